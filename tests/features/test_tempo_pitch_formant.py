"""Tempo (WSOLA, against audiotsm's implementation), pitch shift and formant shift (vocal-tract
length perturbation in the waveform), measured on tones and on a synthetic vowel."""

import numpy as np
import pytest

from asrkit.features import formant_shift, pitch_shift, tempo_perturb
from asrkit.features.perturb import wsola

SR = 16000


def peak_frequency(y, sr):
    spec = np.abs(np.fft.rfft(y * np.hanning(len(y)), 16 * len(y)))
    return np.argmax(spec) * sr / (16 * len(y))


def audiotsm_wsola(x, speed, frame_length, tolerance):
    audiotsm = pytest.importorskip("audiotsm")
    from audiotsm.io.array import ArrayReader, ArrayWriter

    writer = ArrayWriter(1)
    audiotsm.wsola(1, speed=speed, frame_length=frame_length, synthesis_hop=frame_length // 2,
                   tolerance=tolerance).run(ArrayReader(x[None]), writer)
    return writer.data[0]


@pytest.mark.parametrize("speed", [0.5, 0.75, 1.25, 1.5, 2.0])
@pytest.mark.parametrize("frame_length,tolerance", [(512, 256), (320, 80), (1024, 512)])
def test_wsola_matches_audiotsm(rng, speed, frame_length, tolerance):
    t = np.arange(SR) / SR
    x = np.sin(2 * np.pi * 180 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t)) \
        + 0.3 * rng.normal(size=SR)
    ref = audiotsm_wsola(x, speed, frame_length, tolerance)
    y = wsola(x, speed, frame_length, tolerance)
    assert len(y) == round(SR / speed)
    # audiotsm streams until the input runs out; the last frame of each is padding
    m = min(len(ref), len(y)) - frame_length
    np.testing.assert_allclose(y[:m], ref[:m], atol=1e-6)


@pytest.mark.parametrize("factor", [0.8, 0.9, 1.1, 1.25])
@pytest.mark.parametrize("freq", [120.0, 440.0, 1500.0])
def test_tempo_keeps_pitch_and_level(factor, freq):
    x = (0.5 * np.sin(2 * np.pi * freq * np.arange(SR) / SR)).astype(np.float32)
    y = tempo_perturb(x, SR, factor)
    assert y.dtype == np.float32 and len(y) == round(SR / factor)
    inner = y[800:-800]
    assert abs(peak_frequency(inner, SR) - freq) < 0.005 * freq
    assert np.sqrt(np.mean(inner.astype(np.float64) ** 2)) == pytest.approx(0.5 / np.sqrt(2),
                                                                          rel=0.03)


def test_tempo_identity_and_errors(rng):
    x = rng.normal(size=1000).astype(np.float32)
    np.testing.assert_array_equal(tempo_perturb(x, SR, 1.0), x)
    np.testing.assert_array_equal(tempo_perturb(x, SR, 1.2), tempo_perturb(x, SR, 1.2))
    assert len(tempo_perturb(np.zeros(0, np.float32), SR, 1.5)) == 0
    with pytest.raises(ValueError, match="tempo factor"):
        tempo_perturb(x, SR, 0)
    with pytest.raises(ValueError, match="1-D"):
        tempo_perturb(np.zeros((2, 10)), SR, 1.1)
    with pytest.raises(ValueError, match="frame_length"):
        tempo_perturb(x, SR, 1.1, frame_length=1e-5)


@pytest.mark.parametrize("semitones", [-4.0, -1.0, 1.5, 3.0])
def test_pitch_shift_moves_a_tone_and_keeps_duration(semitones):
    x = (0.5 * np.sin(2 * np.pi * 300 * np.arange(SR) / SR)).astype(np.float32)
    y = pitch_shift(x, SR, semitones)
    assert y.dtype == np.float32 and len(y) == len(x)
    expected = 300 * 2 ** (semitones / 12)
    assert abs(peak_frequency(y[1000:-1000], SR) - expected) < 0.006 * expected
    np.testing.assert_array_equal(pitch_shift(x, SR, 0), x)


def vowel(f0, formants, seconds=1.0, sr=SR):
    """A glottal impulse train at ``f0`` Hz through two-pole resonators (100 Hz bandwidths)."""
    from scipy.signal import lfilter

    n = int(seconds * sr)
    x = np.zeros(n)
    x[:: int(round(sr / f0))] = 1.0
    for f in formants:
        r = np.exp(-np.pi * 100 / sr)
        x = lfilter([1 - r], [1, -2 * r * np.cos(2 * np.pi * f / sr), r * r], x)
    return (x / np.abs(x).max() * 0.5).astype(np.float32)


def envelope_peaks(x, sr, count):
    """Frequencies of the ``count`` strongest peaks of the LPC envelope (order 12)."""
    from scipy.linalg import solve_toeplitz

    x = x.astype(np.float64)[2000:-2000]
    r = np.correlate(x, x, "full")[len(x) - 1:len(x) + 12]
    a = np.concatenate([[1.0], -solve_toeplitz(r[:12], r[1:13])])
    f = np.arange(1, sr // 2, 5.0)
    h = 1.0 / np.abs(np.exp(-2j * np.pi * np.outer(f / sr, np.arange(13))) @ a)
    peaks = [i for i in range(1, len(f) - 1) if h[i] > h[i - 1] and h[i] >= h[i + 1]]
    return sorted(f[i] for i in sorted(peaks, key=lambda i: -h[i])[:count])


def pitch_of(x, sr):
    x = x.astype(np.float64)[2000:-2000]
    ac = np.correlate(x, x, "full")[len(x) - 1:]
    lo, hi = sr // 400, sr // 60
    return sr / (lo + np.argmax(ac[lo:hi]))


@pytest.mark.parametrize("alpha", [0.85, 0.92, 1.1, 1.2])
def test_formant_shift_moves_formants_not_pitch(alpha):
    pytest.importorskip("scipy")
    formants = [600.0, 1300.0, 2500.0]
    x = vowel(125.0, formants)
    assert envelope_peaks(x, SR, 3) == pytest.approx(formants, rel=0.04)
    y = formant_shift(x, SR, alpha)
    assert y.dtype == np.float32 and len(y) == len(x)
    assert envelope_peaks(y, SR, 3) == pytest.approx([alpha * f for f in formants], rel=0.05)
    assert pitch_of(y, SR) == pytest.approx(125.0, rel=0.02)


def test_formant_shift_near_one_reconstructs(rng):
    x = rng.normal(size=5000).astype(np.float32)
    np.testing.assert_array_equal(formant_shift(x, SR, 1.0), x)
    np.testing.assert_allclose(formant_shift(x, SR, 1.0 + 1e-9), x, atol=1e-4)
    with pytest.raises(ValueError, match="alpha"):
        formant_shift(x, SR, -1.0)
