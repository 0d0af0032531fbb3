"""Resampling (against torchaudio's algorithm run in torch, and scipy.signal.resample_poly),
speed and volume perturbation, additive noise at an SNR, synthetic noises and reverberation."""

import math

import numpy as np
import pytest

from asrkit.features import add_noise, resample, speed_perturb
from asrkit.features.perturb import (
    fft_convolve,
    fit_noise,
    make_noise,
    reverberate,
    synthetic_rir,
    volume_perturb,
)

RATES = [(16000, 8000), (8000, 16000), (44100, 16000), (22050, 16000), (16000, 16000 * 11 // 10)]


def torchaudio_resample(x, orig, new, lowpass_filter_width=6, rolloff=0.99, method="hann",
                        beta=14.769656459379492):
    """torchaudio.functional.resample (_get_sinc_resample_kernel + conv1d), in float64 torch."""
    torch = pytest.importorskip("torch")
    g = math.gcd(orig, new)
    orig, new = orig // g, new // g
    base = min(orig, new) * rolloff
    width = math.ceil(lowpass_filter_width * orig / base)
    idx = torch.arange(-width, width + orig, dtype=torch.float64)[None, None] / orig
    t = torch.arange(0, -new, -1, dtype=torch.float64)[:, None, None] / new + idx
    t *= base
    t = t.clamp_(-lowpass_filter_width, lowpass_filter_width)
    if method == "hann":
        window = torch.cos(t * math.pi / lowpass_filter_width / 2) ** 2
    else:
        b = torch.tensor(float(beta), dtype=torch.float64)
        window = torch.i0(b * torch.sqrt(1 - (t / lowpass_filter_width) ** 2)) / torch.i0(b)
    t *= math.pi
    kernels = torch.where(t == 0, torch.tensor(1.0, dtype=torch.float64), t.sin() / t)
    kernels *= window * base / orig
    w = torch.from_numpy(np.asarray(x, np.float64)).reshape(-1, x.shape[-1])
    n = w.shape[-1]
    w = torch.nn.functional.pad(w, (width, width + orig))
    y = torch.nn.functional.conv1d(w[:, None], kernels, stride=orig)
    y = y.transpose(1, 2).reshape(w.shape[0], -1)
    y = y[..., :math.ceil(new * n / orig)]
    return y.reshape(x.shape[:-1] + (y.shape[-1],)).numpy()


@pytest.mark.parametrize("orig,new", RATES)
def test_matches_torchaudio_algorithm(rng, orig, new):
    x = rng.normal(size=(2, 901)).astype(np.float32)
    y = resample(x, orig, new)
    ref = torchaudio_resample(x, orig, new)
    assert y.dtype == np.float32 and y.shape == ref.shape
    np.testing.assert_allclose(y, ref, atol=2e-6)


def test_kaiser_and_options_match_torchaudio(rng):
    x = rng.normal(size=500)
    y = resample(x, 16000, 12000, lowpass_filter_width=10, rolloff=0.9,
                 resampling_method="sinc_interp_kaiser", beta=8.0)
    np.testing.assert_allclose(y, torchaudio_resample(x, 16000, 12000, 10, 0.9, "kaiser", 8.0),
                               atol=2e-6)


@pytest.mark.parametrize("n", [0, 1, 2, 441, 1000, 16001])
@pytest.mark.parametrize("orig,new", RATES)
def test_output_length_is_ceil(n, orig, new):
    y = resample(np.ones(n, np.float32), orig, new)
    assert len(y) == math.ceil(n * new / orig)


@pytest.mark.parametrize("orig,new", RATES)
@pytest.mark.parametrize("freq", [440.0, 1000.0, 2000.0])
def test_tone_keeps_frequency_and_amplitude(orig, new, freq):
    # the default filter (6 zero crossings, Hann) is flat to 1% up to ~60% of the lower Nyquist
    t = np.arange(orig // 2) / orig
    y = resample(0.5 * np.sin(2 * np.pi * freq * t), orig, new)
    ideal = 0.5 * np.sin(2 * np.pi * freq * np.arange(len(y)) / new)
    edge = new // 50  # 20 ms: the filter sees the zero padding near the ends
    assert np.abs(y[edge:-edge] - ideal[edge:-edge]).max() < 0.01 * 0.5


@pytest.mark.parametrize("orig,new", [(16000, 8000), (8000, 16000)])
def test_wider_filter_keeps_tone_near_nyquist(orig, new):
    t = np.arange(orig // 2) / orig
    y = resample(np.sin(2 * np.pi * 3000 * t), orig, new, lowpass_filter_width=16)
    ideal = np.sin(2 * np.pi * 3000 * np.arange(len(y)) / new)
    edge = new // 20
    assert np.abs(y[edge:-edge] - ideal[edge:-edge]).max() < 0.01


@pytest.mark.parametrize("orig,new,freq", [(16000, 8000, 6000), (44100, 16000, 12000),
                                           (22050, 16000, 10000)])
def test_energy_above_new_nyquist_is_removed(orig, new, freq):
    t = np.arange(orig // 2) / orig
    y = resample(np.sin(2 * np.pi * freq * t), orig, new)
    edge = new // 50
    assert np.mean(y[edge:-edge] ** 2) / 0.5 < 10 ** (-40 / 10)  # at least 40 dB down


@pytest.mark.parametrize("orig,new", RATES[:4])
def test_close_to_scipy_resample_poly_in_the_passband(rng, orig, new):
    signal = pytest.importorskip("scipy.signal")
    t = np.arange(orig // 4) / orig
    freqs = rng.uniform(50, 0.35 * min(orig, new), size=8)
    x = sum(np.sin(2 * np.pi * f * t + rng.uniform(0, 6)) for f in freqs) / 8
    y = resample(x, orig, new)
    ref = signal.resample_poly(x, new // math.gcd(orig, new), orig // math.gcd(orig, new))
    edge = new // 50
    assert np.abs(y[edge:-edge] - ref[edge:len(y) - edge]).max() < 5e-3


def test_resample_dtypes_and_errors():
    x16 = (np.sin(np.arange(800) / 5) * 10000).astype(np.int16)
    y = resample(x16, 8000, 16000)
    assert y.dtype == np.float32 and np.abs(y).max() > 9000  # int16 scale kept
    np.testing.assert_array_equal(resample(x16, 8000, 8000), x16.astype(np.float32))
    assert resample(np.zeros(10), 16000.0, 8000.0).shape == (5,)
    with pytest.raises(ValueError, match="orig_freq"):
        resample(np.zeros(10), 0, 8000)
    with pytest.raises(ValueError, match="new_freq"):
        resample(np.zeros(10), 8000, 1.5)
    with pytest.raises(ValueError, match="resampling_method"):
        resample(np.zeros(10), 8000, 16000, resampling_method="cubic")


def peak_frequency(y, sr):
    spec = np.abs(np.fft.rfft(y * np.hanning(len(y)), 16 * len(y)))
    return np.argmax(spec) * sr / (16 * len(y))


@pytest.mark.parametrize("factor", [0.9, 1.0, 1.1])
def test_speed_perturb_changes_duration_and_pitch(factor):
    sr = 16000
    x = np.sin(2 * np.pi * 1000 * np.arange(sr) / sr).astype(np.float32)
    y = speed_perturb(x, sr, factor)
    assert y.dtype == np.float32
    assert abs(len(y) - sr / factor) <= 1
    assert abs(peak_frequency(y, sr) - 1000 * factor) < 2.0


def test_speed_perturb_is_resample_from_scaled_rate(rng):
    x = rng.normal(size=3000)
    np.testing.assert_array_equal(speed_perturb(x, 16000, 0.95), resample(x, 15200, 16000))


def test_volume_perturb(rng):
    x = rng.normal(size=100).astype(np.float32)
    np.testing.assert_allclose(volume_perturb(x, 0.5), x * 0.5)
    a = volume_perturb(x, seed=3)
    ratio = a[0] / x[0]
    assert 0.125 <= ratio <= 2.0 and np.allclose(a, x * ratio)
    np.testing.assert_array_equal(a, volume_perturb(x, seed=3))


def measured_snr(clean, noisy):
    clean = clean.astype(np.float64)
    noise = noisy.astype(np.float64) - clean
    return 10 * np.log10(np.mean(clean ** 2) / np.mean(noise ** 2))


@pytest.mark.parametrize("snr", [-5.0, 0.0, 10.0, 20.0, 35.0])
@pytest.mark.parametrize("noise_len", [700, 16000, 40000])
def test_add_noise_reaches_snr(rng, snr, noise_len):
    speech = (rng.normal(size=16000) * 3000).astype(np.int16)
    noise = rng.normal(size=noise_len) * 0.01
    y = add_noise(speech, noise, snr, seed=1)
    assert y.dtype == np.float32 and y.shape == speech.shape
    assert abs(measured_snr(speech, y) - snr) < 0.01


def test_add_noise_seeded_offsets():
    speech = np.ones(100, np.float32)
    noise = np.arange(1, 1001, dtype=np.float64)
    a, b = add_noise(speech, noise, 10, seed=5), add_noise(speech, noise, 10, seed=5)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, add_noise(speech, noise, 10, seed=6))
    piece = fit_noise(noise, 100, seed=5)
    assert np.all(np.diff(piece) == 1)  # a contiguous crop
    looped = fit_noise(np.arange(7.0), 20, seed=0)
    np.testing.assert_array_equal(np.diff(looped) % 7, np.ones(19))  # wraps around


def test_add_noise_edge_cases():
    np.testing.assert_array_equal(add_noise(np.zeros(10), np.ones(10), 5, seed=0), np.zeros(10))
    with pytest.raises(ValueError, match="silent"):
        add_noise(np.ones(10), np.zeros(30), 5, seed=0)
    with pytest.raises(ValueError, match="1-D"):
        add_noise(np.ones((2, 10)), np.ones(30), 5, seed=0)


def spectral_slope(x, sr):
    """Least-squares slope of log10 power against log10 frequency, 50 Hz .. sr/4."""
    segs = x[: len(x) // 1024 * 1024].reshape(-1, 1024)
    psd = np.mean(np.abs(np.fft.rfft(segs * np.hanning(1024), axis=1)) ** 2, axis=0)
    f = np.fft.rfftfreq(1024, 1 / sr)
    keep = (f >= 50) & (f <= sr / 4)
    return np.polyfit(np.log10(f[keep]), np.log10(psd[keep]), 1)[0]


@pytest.mark.parametrize("kind,slope", [("white", 0), ("pink", -1), ("brown", -2),
                                        ("blue", 1), ("violet", 2)])
def test_coloured_noise_spectra(kind, slope):
    x = make_noise(kind, 64000, 16000, seed=0)
    assert x.dtype == np.float32 and len(x) == 64000
    assert np.sqrt(np.mean(x.astype(np.float64) ** 2)) == pytest.approx(1, rel=1e-4)
    assert spectral_slope(x, 16000) == pytest.approx(slope, abs=0.15)


def test_babble_is_speech_band_and_fluctuates():
    sr = 16000
    x = make_noise("babble", 4 * sr, sr, seed=1).astype(np.float64)
    np.testing.assert_array_equal(x, make_noise("babble", 4 * sr, sr, seed=1))
    spec = np.abs(np.fft.rfft(x)) ** 2
    f = np.fft.rfftfreq(len(x), 1 / sr)
    assert spec[(f > 200) & (f < 4000)].sum() / spec.sum() > 0.95
    frame_db = 10 * np.log10(np.mean(x.reshape(-1, 400) ** 2, axis=1) + 1e-12)
    assert np.std(frame_db) > 1.5  # syllabic modulation, unlike stationary noise
    white = make_noise("white", 4 * sr, sr, seed=1).astype(np.float64)
    assert np.std(10 * np.log10(np.mean(white.reshape(-1, 400) ** 2, axis=1))) < 0.5
    with pytest.raises(ValueError, match="unknown noise kind"):
        make_noise("purple", 10, sr)


def schroeder_rt60(h, sr):
    """RT60 from the Schroeder backward integral, fitted between -5 and -25 dB (T20 x 3)."""
    edc = np.cumsum((h.astype(np.float64) ** 2)[::-1])[::-1]
    db = 10 * np.log10(edc / edc[0])
    i5, i25 = np.argmax(db <= -5), np.argmax(db <= -25)
    slope = np.polyfit(np.arange(i5, i25) / sr, db[i5:i25], 1)[0]
    return -60 / slope


@pytest.mark.parametrize("rt60", [0.2, 0.5, 0.9])
def test_synthetic_rir_decay(rt60):
    sr = 16000
    h = synthetic_rir(sr, rt60, seed=0, direct_to_reverberant_db=-10.0)
    assert h.dtype == np.float32 and len(h) == math.ceil(rt60 * sr) + 1
    assert np.sum(h.astype(np.float64) ** 2) == pytest.approx(1, rel=1e-5)
    assert schroeder_rt60(h, sr) == pytest.approx(rt60, rel=0.1)
    drr = 10 * np.log10(h[0] ** 2 / np.sum(h[1:].astype(np.float64) ** 2))
    assert drr == pytest.approx(-10, abs=1e-3)


def test_reverberate_is_normalised_convolution(rng):
    sr = 8000
    x = rng.normal(size=3000).astype(np.float32)
    h = synthetic_rir(sr, 0.3, seed=2)
    y = reverberate(x, sr, 0.3, seed=2)
    ref = np.convolve(x.astype(np.float64), h.astype(np.float64))[:3000]
    ref *= np.sqrt(np.mean(x.astype(np.float64) ** 2) / np.mean(ref ** 2))
    assert y.dtype == np.float32 and y.shape == x.shape
    np.testing.assert_allclose(y, ref, atol=1e-5)
    np.testing.assert_array_equal(y, reverberate(x, sr, 0.3, seed=2))
    np.testing.assert_array_equal(reverberate(x, sr, 0.0), x)
    np.testing.assert_allclose(fft_convolve(np.arange(3.0), np.ones(2)), [0, 1, 3, 2], atol=1e-12)
    with pytest.raises(ValueError, match="all zeros"):
        reverberate(x, sr, 0.3, rir=np.zeros(5))


def test_resample_benchmark_runs():
    import argparse

    from asrkit.bench import resample as bench

    cases = bench.run(argparse.Namespace(seconds=0.02, repeat=1))
    assert len(cases) == 2 * len(bench.RATE_PAIRS)
    assert all(c.asrkit_s > 0 for c in cases)
