"""fbank and mfcc against kaldi-native-fbank, which implements Kaldi's algorithm exactly.

Every case runs with dither=0 on int16-scale input (random noise, and tones plus noise) and
requires a relative difference <= 1e-3 (float32 rounding in Kaldi is far below that).
"""

import numpy as np
import pytest

from asrkit.features import fbank, mfcc
from asrkit.features._mel import dense_mel_banks, mel_banks

knf = pytest.importorskip("kaldi_native_fbank")

FRAME_KEYS = {
    "sample_frequency": "samp_freq",
    "frame_length": "frame_length_ms",
    "frame_shift": "frame_shift_ms",
    "dither": "dither",
    "preemphasis_coefficient": "preemph_coeff",
    "remove_dc_offset": "remove_dc_offset",
    "window_type": "window_type",
    "blackman_coeff": "blackman_coeff",
    "round_to_power_of_two": "round_to_power_of_two",
    "snip_edges": "snip_edges",
}
MEL_KEYS = {"num_mel_bins": "num_bins", "low_freq": "low_freq", "high_freq": "high_freq",
            "vtln_low": "vtln_low", "vtln_high": "vtln_high"}


def knf_options(kind: str, **opts):
    """Our option names -> a knf FbankOptions/MfccOptions with dither 0 unless given."""
    o = knf.FbankOptions() if kind == "fbank" else knf.MfccOptions()
    opts = {"dither": 0.0, **opts}
    for name, value in opts.items():
        if name in FRAME_KEYS:
            setattr(o.frame_opts, FRAME_KEYS[name], value)
        elif name in MEL_KEYS:
            setattr(o.mel_opts, MEL_KEYS[name], value)
        else:
            setattr(o, name, value)
    return o


def knf_features(kind: str, wave: np.ndarray, **opts) -> np.ndarray:
    """Run knf.OnlineFbank/OnlineMfcc on the whole waveform: float32 [frames, dims]."""
    o = knf_options(kind, **opts)
    comp = knf.OnlineFbank(o) if kind == "fbank" else knf.OnlineMfcc(o)
    comp.accept_waveform(o.frame_opts.samp_freq, wave.astype(np.float32))
    comp.input_finished()
    frames = [comp.get_frame(i) for i in range(comp.num_frames_ready)]
    if not frames:
        return np.zeros((0, comp.dim), dtype=np.float32)
    return np.array(frames, dtype=np.float32)


def assert_kaldi_close(ours: np.ndarray, ref: np.ndarray):
    assert ours.dtype == np.float32
    assert ours.shape == ref.shape
    scale = max(1.0, float(np.abs(ref).max())) if ref.size else 1.0
    np.testing.assert_allclose(ours, ref, rtol=1e-3, atol=1e-3 * scale)


def noise(rng, seconds=1.3, sf=16000):
    """int16-scale Gaussian noise (float64)."""
    return np.clip(rng.standard_normal(int(seconds * sf)) * 4000, -32768, 32767).round()


def tones(rng, seconds=1.3, sf=16000):
    """Three tones plus a little noise, int16 scale."""
    t = np.arange(int(seconds * sf)) / sf
    x = sum(a * np.sin(2 * np.pi * f * t) for a, f in ((8000, 440.0), (3000, 1250.0),
                                                        (1500, 3100.0)))
    return np.round(x + rng.standard_normal(t.size) * 30)


SIGNALS = {"noise": noise, "tones": tones}

FBANK_CASES = [
    {},
    {"snip_edges": False},
    {"window_type": "hamming"},
    {"window_type": "hanning", "snip_edges": False},
    {"window_type": "rectangular"},
    {"window_type": "blackman"},
    {"window_type": "blackman", "blackman_coeff": 0.38},
    {"window_type": "sine", "snip_edges": False},
    {"sample_frequency": 8000.0},
    {"sample_frequency": 8000.0, "num_mel_bins": 40, "snip_edges": False},
    {"num_mel_bins": 40},
    {"sample_frequency": 22050.0, "num_mel_bins": 64, "snip_edges": False},
    {"num_mel_bins": 80, "low_freq": 20.0, "high_freq": -400.0},
    {"num_mel_bins": 80, "high_freq": 7600.0, "low_freq": 64.0},
    {"use_energy": True},
    {"use_energy": True, "htk_compat": True},
    {"use_energy": True, "raw_energy": False},
    {"use_energy": True, "raw_energy": False, "htk_compat": True, "snip_edges": False},
    {"use_energy": True, "energy_floor": 1e9},
    {"use_log_fbank": False},
    {"use_power": False},
    {"use_power": False, "use_log_fbank": False, "use_energy": True},
    {"round_to_power_of_two": False},
    {"preemphasis_coefficient": 0.0, "remove_dc_offset": False},
    {"frame_length": 20.0, "frame_shift": 12.5},
    {"frame_length": 32.0, "frame_shift": 8.0, "snip_edges": False},
]


def _id(case: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in case.items()) or "defaults"


@pytest.mark.parametrize("signal", sorted(SIGNALS))
@pytest.mark.parametrize("case", FBANK_CASES, ids=_id)
def test_fbank_matches_kaldi(case, signal, rng):
    sf = case.get("sample_frequency", 16000.0)
    wave = SIGNALS[signal](rng, sf=int(sf))
    assert_kaldi_close(fbank(wave, dither=0.0, **case), knf_features("fbank", wave, **case))


MFCC_CASES = [
    {},
    {"snip_edges": False},
    {"use_energy": False},
    {"htk_compat": True},
    {"htk_compat": True, "use_energy": False},
    {"raw_energy": False},
    {"cepstral_lifter": 0.0},
    {"num_ceps": 23, "cepstral_lifter": 40.0},
    {"sample_frequency": 8000.0, "window_type": "hamming"},
    {"sample_frequency": 44100.0, "num_mel_bins": 40, "frame_length": 30.0},
    {"num_mel_bins": 40, "num_ceps": 20, "high_freq": -200.0},
    {"window_type": "rectangular", "energy_floor": 5e8},
    {"window_type": "hanning", "round_to_power_of_two": False},
]


@pytest.mark.parametrize("signal", sorted(SIGNALS))
@pytest.mark.parametrize("case", MFCC_CASES, ids=_id)
def test_mfcc_matches_kaldi(case, signal, rng):
    sf = case.get("sample_frequency", 16000.0)
    wave = SIGNALS[signal](rng, sf=int(sf))
    assert_kaldi_close(mfcc(wave, dither=0.0, **case), knf_features("mfcc", wave, **case))


@pytest.mark.parametrize("kind", ["fbank", "mfcc"])
@pytest.mark.parametrize("case", [{}, {"use_energy": True}, {"snip_edges": False},
                                  {"use_energy": True, "htk_compat": True}], ids=_id)
def test_digital_silence_floors_at_float_epsilon(kind, case):
    """All-zero input: every log is log(FLT_EPSILON) = -15.942..., as in Kaldi."""
    wave = np.zeros(8000)
    ours = fbank(wave, dither=0.0, **case) if kind == "fbank" else mfcc(wave, dither=0.0, **case)
    assert_kaldi_close(ours, knf_features(kind, wave, **case))
    if kind == "fbank":
        np.testing.assert_allclose(ours, np.log(np.finfo(np.float32).eps), rtol=1e-6)


@pytest.mark.parametrize("num_samples", [0, 1, 79, 80, 160, 239, 240, 399, 400, 401, 560])
@pytest.mark.parametrize("snip_edges", [True, False])
@pytest.mark.parametrize("kind", ["fbank", "mfcc"])
def test_short_inputs_frame_count_and_values(kind, snip_edges, num_samples, rng):
    """Fewer samples than one frame: 0 frames with snip_edges, reflected frames without."""
    wave = noise(rng, seconds=1.0)[:num_samples]
    fn = fbank if kind == "fbank" else mfcc
    ours = fn(wave, dither=0.0, snip_edges=snip_edges)
    ref = knf_features(kind, wave, snip_edges=snip_edges)
    assert ours.shape[0] == ref.shape[0]
    assert ours.shape[1] == (23 if kind == "fbank" else 13)
    if ref.size:
        assert_kaldi_close(ours, ref)


@pytest.mark.parametrize("warp", [0.85, 0.94, 1.0, 1.08, 1.2])
@pytest.mark.parametrize("sf,bins", [(16000.0, 23), (16000.0, 40), (8000.0, 23)])
def test_vtln_mel_banks_match_kaldi(warp, sf, bins):
    mel_opts = knf.MelBanksOptions()
    mel_opts.num_bins = bins
    frame_opts = knf.FrameExtractionOptions()
    frame_opts.samp_freq = sf
    ref = knf.MelBanks(mel_opts, frame_opts, warp).get_matrix()
    fft_size = 512 if sf == 16000.0 else 256
    ours = dense_mel_banks(*mel_banks(bins, sf, fft_size, 20.0, 0.0, 100.0, -500.0, warp),
                           fft_size // 2 + 1)
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-5)


def test_vtln_fbank_uses_warped_banks(rng):
    """fbank with vtln_warp equals the warped Kaldi filters applied to the power spectrum."""
    from asrkit.features import spectrogram

    wave = noise(rng)
    warp = 0.9
    mel_opts = knf.MelBanksOptions()
    mel_opts.num_bins = 23  # knf's MelBanksOptions default is 25, Kaldi's fbank uses 23
    ref_banks = knf.MelBanks(mel_opts, knf.FrameExtractionOptions(), warp)
    power = np.exp(spectrogram(wave, dither=0.0).astype(np.float64))
    power[:, 0] = 0.0  # column 0 is the energy; no mel filter starting at 20 Hz uses the DC bin
    ref = np.log(np.maximum(power @ ref_banks.get_matrix().T.astype(np.float64),
                            np.finfo(np.float32).eps))
    np.testing.assert_allclose(fbank(wave, dither=0.0, vtln_warp=warp), ref, rtol=1e-3, atol=1e-3)
    assert not np.allclose(fbank(wave, dither=0.0, vtln_warp=warp), fbank(wave, dither=0.0))


def test_input_dtypes_agree(rng):
    """int16, float32 and float64 input of the same samples give the same features."""
    wave = noise(rng)
    ref = fbank(wave, dither=0.0)
    for dtype in (np.int16, np.int32, np.float32, ">f4", np.uint16):
        w = wave.astype(dtype) if dtype != np.uint16 else (wave + 32768).astype(np.uint16)
        got = fbank(w, dither=0.0)
        # uint16 is the same signal offset by 32768: removed by the DC offset removal
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)
