"""spectrogram against a plain-numpy derivation of Kaldi's compute-spectrogram-feats, and its
power spectrum against kaldi-native-fbank's filterbank (which shares Kaldi's framing and FFT).
"""

import numpy as np
import pytest

from asrkit.features import spectrogram

EPS = np.finfo(np.float32).eps


def kaldi_spectrogram_reference(wave, sample_frequency=16000.0, frame_length=25.0,
                                frame_shift=10.0, preemphasis_coefficient=0.97,
                                remove_dc_offset=True, window_type="povey",
                                round_to_power_of_two=True, snip_edges=True, raw_energy=True,
                                energy_floor=0.0):
    """Kaldi's spectrogram written from feature-window.cc / feature-spectrogram.cc in numpy."""
    wave = np.asarray(wave, dtype=np.float64)
    n = wave.size
    size = int(sample_frequency * 0.001 * frame_length)
    shift = int(sample_frequency * 0.001 * frame_shift)
    fft = 1 << (size - 1).bit_length() if round_to_power_of_two else size
    if snip_edges:
        frames = 0 if n < size else 1 + (n - size) // shift
        starts = np.arange(frames) * shift
    else:
        frames = (n + shift // 2) // shift
        starts = np.arange(frames) * shift + shift // 2 - size // 2
    idx = starts[:, None] + np.arange(size)[None, :]
    while np.any((idx < 0) | (idx >= n)):
        idx = np.where(idx < 0, -idx - 1, idx)
        idx = np.where(idx >= n, 2 * n - 1 - idx, idx)
    x = wave[idx] if frames else np.zeros((0, size))
    if remove_dc_offset:
        x = x - x.mean(axis=1, keepdims=True)
    energy = np.log(np.maximum((x ** 2).sum(axis=1), EPS))
    if preemphasis_coefficient:
        prev = np.concatenate([x[:, :1], x[:, :-1]], axis=1)
        x = x - preemphasis_coefficient * prev
    i = np.arange(size)
    a = 2 * np.pi / (size - 1)
    window = {
        "povey": (0.5 - 0.5 * np.cos(a * i)) ** 0.85,
        "hamming": 0.54 - 0.46 * np.cos(a * i),
        "hanning": 0.5 - 0.5 * np.cos(a * i),
        "rectangular": np.ones(size),
        "blackman": 0.42 - 0.5 * np.cos(a * i) + 0.08 * np.cos(2 * a * i),
    }[window_type]
    x = x * window
    if not raw_energy:
        energy = np.log(np.maximum((x ** 2).sum(axis=1), EPS))
    if energy_floor > 0:
        energy = np.maximum(energy, np.log(energy_floor))
    spec = np.abs(np.fft.rfft(x, n=fft, axis=1)) ** 2
    out = np.log(np.maximum(spec, EPS))
    out[:, 0] = energy
    return out


CASES = [
    {},
    {"snip_edges": False},
    {"window_type": "hamming", "raw_energy": False},
    {"window_type": "hanning", "round_to_power_of_two": False},
    {"window_type": "rectangular", "snip_edges": False, "energy_floor": 1e8},
    {"window_type": "blackman", "preemphasis_coefficient": 0.0},
    {"sample_frequency": 8000.0, "remove_dc_offset": False},
    {"frame_length": 20.0, "frame_shift": 5.0},
    {"sample_frequency": 22050.0, "round_to_power_of_two": False},  # odd FFT length, 551
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items())
                         or "defaults")
def test_spectrogram_matches_numpy_derivation(case, rng):
    sf = case.get("sample_frequency", 16000.0)
    t = np.arange(int(1.2 * sf)) / sf
    wave = np.round(6000 * np.sin(2 * np.pi * 523.0 * t) + rng.standard_normal(t.size) * 800)
    ours = spectrogram(wave, dither=0.0, **case)
    ref = kaldi_spectrogram_reference(wave, **case)
    assert ours.dtype == np.float32 and ours.shape == ref.shape
    np.testing.assert_allclose(ours, ref, rtol=1e-3, atol=1e-3)


def test_spectrogram_dims(rng):
    wave = rng.standard_normal(16000) * 1000
    assert spectrogram(wave, dither=0.0).shape == (98, 257)
    assert spectrogram(wave, dither=0.0, round_to_power_of_two=False).shape == (98, 201)
    assert spectrogram(wave[:8000], dither=0.0, sample_frequency=8000.0).shape == (98, 129)


def test_spectrogram_of_silence_and_short_input():
    out = spectrogram(np.zeros(4000), dither=0.0)
    np.testing.assert_allclose(out, np.log(EPS), rtol=1e-6)
    assert spectrogram(np.zeros(399), dither=0.0).shape == (0, 257)
    short = np.arange(100.0)
    np.testing.assert_allclose(spectrogram(short, dither=0.0, snip_edges=False),
                               kaldi_spectrogram_reference(short, snip_edges=False),
                               rtol=1e-3, atol=1e-3)


def test_power_spectrum_agrees_with_kaldi_filterbank(rng):
    """exp(spectrogram) times Kaldi's mel matrix equals knf's linear (non-log) filterbank."""
    knf = pytest.importorskip("kaldi_native_fbank")
    wave = np.round(rng.standard_normal(20000) * 3000)
    opts = knf.FbankOptions()
    opts.frame_opts.dither = 0.0
    opts.use_log_fbank = False
    comp = knf.OnlineFbank(opts)
    comp.accept_waveform(16000, wave.astype(np.float32))
    comp.input_finished()
    ref = np.array([comp.get_frame(i) for i in range(comp.num_frames_ready)])
    mel_opts = knf.MelBanksOptions()
    mel_opts.num_bins = 23
    banks = knf.MelBanks(mel_opts, knf.FrameExtractionOptions(), 1.0).get_matrix()
    power = np.exp(spectrogram(wave, dither=0.0).astype(np.float64))
    assert not banks[:, 0].any()  # column 0 of the spectrogram holds the energy instead
    np.testing.assert_allclose(power[:, 1:] @ banks[:, 1:].T, ref, rtol=2e-3)
