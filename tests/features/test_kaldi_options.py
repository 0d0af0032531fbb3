"""Options, defaults, dither, errors and the per-file options of the Kaldi feature functions."""

import numpy as np
import pytest

from asrkit.features import _kernels as K
from asrkit.features import _pipeline, compute, default_options, fbank, mfcc, spectrogram

FUNCS = {"fbank": fbank, "mfcc": mfcc, "spectrogram": spectrogram}

# torchaudio.compliance.kaldi's keyword names (waveform excluded), asrkit adds `seed`.
TORCHAUDIO_NAMES = {
    "spectrogram": {"blackman_coeff", "channel", "dither", "energy_floor", "frame_length",
                    "frame_shift", "min_duration", "preemphasis_coefficient", "raw_energy",
                    "remove_dc_offset", "round_to_power_of_two", "sample_frequency",
                    "snip_edges", "subtract_mean", "window_type"},
}
MEL_NAMES = {"high_freq", "low_freq", "num_mel_bins", "vtln_high", "vtln_low", "vtln_warp",
             "use_energy", "htk_compat"}
TORCHAUDIO_NAMES["fbank"] = TORCHAUDIO_NAMES["spectrogram"] | MEL_NAMES | {"use_log_fbank",
                                                                           "use_power"}
TORCHAUDIO_NAMES["mfcc"] = TORCHAUDIO_NAMES["spectrogram"] | MEL_NAMES | {"num_ceps",
                                                                          "cepstral_lifter"}


@pytest.mark.parametrize("kind", sorted(FUNCS))
def test_option_names_are_torchaudios(kind):
    assert set(default_options(kind)) == TORCHAUDIO_NAMES[kind] | {"seed"}


def test_defaults_are_kaldis():
    fb, mf, sp = (default_options(k) for k in ("fbank", "mfcc", "spectrogram"))
    for d in (fb, mf, sp):
        assert d["dither"] == 1.0 and d["energy_floor"] == 0.0 and d["raw_energy"] is True
        assert d["sample_frequency"] == 16000.0 and d["frame_length"] == 25.0
        assert d["frame_shift"] == 10.0 and d["preemphasis_coefficient"] == 0.97
        assert d["window_type"] == "povey" and d["snip_edges"] is True
        assert d["round_to_power_of_two"] is True and d["remove_dc_offset"] is True
    assert fb["num_mel_bins"] == 23 and fb["use_energy"] is False and fb["low_freq"] == 20.0
    assert mf["num_mel_bins"] == 23 and mf["use_energy"] is True
    assert mf["num_ceps"] == 13 and mf["cepstral_lifter"] == 22.0


def test_default_options_is_a_fresh_dict():
    d = default_options("fbank")
    d["dither"] = 0.0
    assert default_options("fbank")["dither"] == 1.0
    with pytest.raises(ValueError, match="unknown feature kind 'plp'"):
        default_options("plp")


def test_unknown_option_names_it_and_lists_valid_ones():
    with pytest.raises(TypeError, match=r"'num_mel_bin'.*did you mean 'num_mel_bins'.*valid "
                                        r"options:.*sample_frequency"):
        fbank(np.zeros(1000), num_mel_bin=40)
    with pytest.raises(TypeError, match="'num_ceps'"):
        fbank(np.zeros(1000), num_ceps=13)  # an mfcc option
    with pytest.raises(TypeError, match="'use_log_fbank'"):
        spectrogram(np.zeros(1000), use_log_fbank=False)


@pytest.mark.parametrize("opts,message", [
    ({"num_mel_bins": "40"}, "num_mel_bins='40' must be an integer"),
    ({"num_mel_bins": 40.5}, "must be an integer"),
    ({"dither": "a lot"}, "dither='a lot' must be a number"),
    ({"dither": float("nan")}, "must be finite"),
    ({"snip_edges": 2}, "snip_edges=2 must be a bool"),
    ({"window_type": "kaiser"}, "unknown window_type 'kaiser'"),
    ({"num_mel_bins": 2}, "at least 3 mel bins"),
    ({"num_mel_bins": 128}, "mel bin 3 covers no FFT bin: num_mel_bins=128 is too large"),
    ({"low_freq": 8000.0}, "low_freq=8000"),
    ({"high_freq": 9000.0}, "high_freq=9000"),
    ({"low_freq": 3000.0, "high_freq": 2000.0}, "low_freq=3000"),
    ({"frame_shift": 0.01}, "frame_shift=0.01"),
    ({"preemphasis_coefficient": 1.5}, "preemphasis_coefficient=1.5"),
    ({"energy_floor": -1.0}, "energy_floor"),
    ({"vtln_warp": 0.9, "vtln_low": 10.0}, "vtln_low=10"),
    ({"seed": -1}, "seed=-1"),
])
def test_bad_values_raise_value_error_naming_the_option(opts, message):
    with pytest.raises(ValueError, match=message):
        fbank(np.zeros(16000), **opts)


def test_mfcc_num_ceps_bounded_by_mel_bins():
    with pytest.raises(ValueError, match="num_ceps=30 must be between 1 and num_mel_bins=23"):
        mfcc(np.zeros(16000), num_ceps=30)


def test_compute_dispatches_on_kind(rng):
    wave = rng.standard_normal(8000) * 1000
    for kind, fn in FUNCS.items():
        np.testing.assert_array_equal(compute(kind, wave, dither=0.5), fn(wave, dither=0.5))
    with pytest.raises(ValueError, match="unknown feature kind 'plp'; expected one of fbank"):
        compute("plp", wave)


def test_output_is_float32_contiguous(rng):
    for fn in FUNCS.values():
        out = fn(rng.standard_normal(5000))
        assert out.dtype == np.float32 and out.flags.c_contiguous and out.ndim == 2


def test_dither_is_seeded_and_reproducible(rng):
    wave = np.round(rng.standard_normal(16000) * 100)
    a, b = fbank(wave), fbank(wave)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, fbank(wave, seed=1))
    assert not np.array_equal(a, fbank(wave, dither=0.0))
    np.testing.assert_array_equal(fbank(wave, dither=2.0, seed=5), fbank(wave, dither=2.0, seed=5))


def test_dither_lifts_silence_off_the_floor():
    """Kaldi's reason for dither: digital silence gives finite, non-constant log energies."""
    out = fbank(np.zeros(16000))
    assert np.all(out > np.log(np.finfo(np.float32).eps) + 1.0)
    assert np.unique(out).size > 100


def test_dither_noise_is_standard_gaussian():
    buf = np.zeros(200_001)
    K._add_dither(buf, buf.size, 1.0, 7, 3)
    assert abs(buf.mean()) < 0.01
    assert abs(buf.std() - 1.0) < 0.01
    kurtosis = ((buf - buf.mean()) ** 4).mean() / buf.var() ** 2
    assert abs(kurtosis - 3.0) < 0.05
    other = np.zeros_like(buf)
    K._add_dither(other, other.size, 1.0, 7, 4)  # another frame: independent noise
    assert abs(np.corrcoef(buf, other)[0, 1]) < 0.01


def test_results_do_not_depend_on_block_size(rng, monkeypatch):
    wave = rng.standard_normal(30000) * 1000
    ref = {k: fn(wave, snip_edges=False) for k, fn in FUNCS.items()}
    monkeypatch.setattr(_pipeline, "BLOCK_FRAMES", 7)
    for k, fn in FUNCS.items():
        np.testing.assert_array_equal(fn(wave, snip_edges=False), ref[k])


def test_min_duration_gives_no_frames(rng):
    wave = rng.standard_normal(8000)
    assert fbank(wave, min_duration=0.6).shape == (0, 23)
    assert fbank(wave, min_duration=0.5).shape == (48, 23)
    assert mfcc(wave, min_duration=1.0).shape == (0, 13)


def test_subtract_mean(rng):
    wave = rng.standard_normal(16000) * 1000
    plain = mfcc(wave, dither=0.0)
    cms = mfcc(wave, dither=0.0, subtract_mean=True)
    np.testing.assert_allclose(cms.mean(axis=0), 0.0, atol=1e-4)
    np.testing.assert_allclose(cms, plain - plain.mean(axis=0), atol=1e-4)


def test_high_freq_non_positive_is_offset_from_nyquist(rng):
    wave = rng.standard_normal(16000) * 1000
    np.testing.assert_array_equal(fbank(wave, dither=0.0, high_freq=-400.0),
                                  fbank(wave, dither=0.0, high_freq=7600.0))
    np.testing.assert_array_equal(fbank(wave, dither=0.0, high_freq=0.0),
                                  fbank(wave, dither=0.0, high_freq=8000.0))


def test_channel_picks_a_row_of_2d_input(rng):
    stereo = rng.standard_normal((2, 8000)) * 1000
    np.testing.assert_array_equal(fbank(stereo, dither=0.0), fbank(stereo[0], dither=0.0))
    np.testing.assert_array_equal(fbank(stereo, dither=0.0, channel=1),
                                  fbank(stereo[1], dither=0.0))
    with pytest.raises(ValueError, match="channel=2 but the waveform has 2 channels"):
        fbank(stereo, channel=2)
    with pytest.raises(ValueError, match="channel=1 but the waveform is 1-D"):
        fbank(stereo[0], channel=1)
    with pytest.raises(ValueError, match=r"must be \[channels, samples\], got shape \(8000, 2\)"):
        fbank(stereo.T)


@pytest.mark.parametrize("wave,message", [
    (np.zeros((2, 2, 100)), "must be 1-D"),
    (np.array(["a", "b"]), "must hold real numbers"),
    (np.zeros(10, dtype=complex), "must hold real numbers"),
    (np.array([0.0, 1.0, np.nan, 2.0]), "sample 2 is nan"),
    (np.array([0.0, np.inf]), "sample 1 is inf"),
])
def test_bad_waveforms(wave, message):
    with pytest.raises(ValueError, match=message):
        fbank(wave)


def test_plans_are_cached():
    a = _pipeline.make_plan("fbank", {"num_mel_bins": 40})
    b = _pipeline.make_plan("fbank", {"num_mel_bins": 40.0})
    assert a is b
    assert not a.weights.flags.writeable
