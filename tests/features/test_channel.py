"""Channel simulation: cookbook biquads against scipy.signal (coefficients, responses,
filtering), simulated rooms (RT60 by Schroeder integration), telephone band and codecs through
libsndfile, levels and clipping."""

import math
import warnings

import numpy as np
import pytest

from asrkit.features import (
    biquad_coefficients,
    biquad_filter,
    clip,
    codec_roundtrip,
    random_mic_eq,
    reverberate,
    room_impulse_response,
    scale_to_level,
    telephone_channel,
)

SR = 16000
signal = pytest.importorskip("scipy.signal")


def response_db(b, a, freqs, sr=SR):
    _, h = signal.freqz(b, a, worN=np.asarray(freqs, dtype=float), fs=sr)
    return 20 * np.log10(np.abs(h))


@pytest.mark.parametrize("kind", ["lowpass", "highpass"])
@pytest.mark.parametrize("freq", [100.0, 1000.0, 3400.0, 7000.0])
def test_butterworth_sections_equal_scipy(kind, freq):
    b, a = biquad_coefficients(kind, freq, SR)
    rb, ra = signal.butter(2, freq, btype=kind[:-4] if kind != "lowpass" else "low", fs=SR)
    np.testing.assert_allclose(b, rb, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(a, ra, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("gain", [-12.0, -3.0, 6.0, 15.0])
@pytest.mark.parametrize("freq,q", [(300.0, 0.7), (1500.0, 2.0), (5000.0, 4.0)])
def test_peaking_gain_at_centre_and_flat_far_away(gain, freq, q):
    b, a = biquad_coefficients("peaking", freq, SR, q=q, gain_db=gain)
    at, dc, nyq = response_db(b, a, [freq, 1e-3, SR / 2 - 1e-3])
    assert at == pytest.approx(gain, abs=1e-6)
    assert abs(dc) < 1e-6 and abs(nyq) < 1e-6


@pytest.mark.parametrize("gain", [-10.0, 8.0])
def test_shelves_reach_their_gain_and_midpoint(gain):
    lo_b, lo_a = biquad_coefficients("lowshelf", 300.0, SR, gain_db=gain)
    hi_b, hi_a = biquad_coefficients("highshelf", 3000.0, SR, gain_db=gain)
    dc, mid, nyq = response_db(lo_b, lo_a, [1e-3, 300.0, SR / 2 - 1e-3])
    assert dc == pytest.approx(gain, abs=1e-6) and abs(nyq) < 1e-3
    assert mid == pytest.approx(gain / 2, abs=1e-6)  # the cookbook's shelf midpoint
    dc, mid, nyq = response_db(hi_b, hi_a, [1e-3, 3000.0, SR / 2 - 1e-3])
    assert abs(dc) < 1e-6 and nyq == pytest.approx(gain, abs=1e-3)
    assert mid == pytest.approx(gain / 2, abs=1e-6)
    b, a = biquad_coefficients("bandpass", 1000.0, SR, q=2.0)
    assert response_db(b, a, [1000.0])[0] == pytest.approx(0.0, abs=1e-9)


def test_biquad_filter_equals_lfilter(rng):
    x = rng.normal(size=4000) * 1000
    for kind in ("lowpass", "highpass", "bandpass", "peaking", "lowshelf", "highshelf"):
        b, a = biquad_coefficients(kind, 800.0, SR, q=1.3, gain_db=-7.0)
        y = biquad_filter(x, b, a)
        assert y.dtype == np.float32 and y.shape == x.shape
        np.testing.assert_allclose(y, signal.lfilter(b, a, x), rtol=1e-5, atol=1e-3)
    with pytest.raises(ValueError, match="a\\[0\\] == 1"):
        biquad_filter(x, [1, 0, 0], [2, 0, 0])
    with pytest.raises(ValueError, match="unknown biquad kind"):
        biquad_coefficients("notch", 100.0, SR)
    with pytest.raises(ValueError, match="freq"):
        biquad_coefficients("lowpass", 9000.0, SR)


def test_random_mic_eq_is_seeded_keeps_energy_and_colours(rng):
    x = rng.normal(size=SR).astype(np.float32) * 1000
    y = random_mic_eq(x, SR, seed=4)
    np.testing.assert_array_equal(y, random_mic_eq(x, SR, seed=4))
    assert np.mean(y.astype(np.float64) ** 2) == pytest.approx(np.mean(x.astype(np.float64) ** 2),
                                                               rel=1e-4)
    # a coloured copy: band energies move by decibels, and the lowest band is cut
    def bands(z):
        spec = np.abs(np.fft.rfft(z.astype(np.float64))) ** 2
        f = np.fft.rfftfreq(len(z), 1 / SR)
        edges = [0, 40, 300, 1000, 3000, 8001]
        return np.array([spec[(f >= lo) & (f < hi)].sum() for lo, hi in zip(edges, edges[1:])])
    change = 10 * np.log10(bands(y) / bands(x))
    assert change[0] < -3 and np.abs(change[1:]).max() > 1


def schroeder_rt60(h, sr):
    edc = np.cumsum((h.astype(np.float64) ** 2)[::-1])[::-1]
    db = 10 * np.log10(edc / edc[0] + 1e-300)
    i5, i25 = np.argmax(db <= -5), np.argmax(db <= -25)
    return -60 / np.polyfit(np.arange(i5, i25) / sr, db[i5:i25], 1)[0]


@pytest.mark.parametrize("rt60", [0.25, 0.5, 0.8])
def test_simulated_room_reverberates_as_asked(rt60):
    pytest.importorskip("pyroomacoustics")
    h = room_impulse_response(SR, rt60=rt60, room=[6.0, 5.0, 3.0], seed=1,
                              backend="pyroomacoustics")
    assert h.dtype == np.float32
    assert np.sum(h.astype(np.float64) ** 2) == pytest.approx(1.0, rel=1e-5)
    assert int(np.argmax(np.abs(h))) <= 8  # the direct path leads
    # the image method with Sabine absorption lands near the target (within a third)
    assert schroeder_rt60(h, SR) == pytest.approx(rt60, rel=0.35)
    np.testing.assert_array_equal(h, room_impulse_response(SR, rt60=rt60, room=[6.0, 5.0, 3.0],
                                                           seed=1, backend="pyroomacoustics"))


def test_rooms_are_drawn_and_positions_checked():
    pytest.importorskip("pyroomacoustics")
    a = room_impulse_response(SR, seed=2, max_order=10)
    b = room_impulse_response(SR, seed=3, max_order=10)
    assert len(a) != len(b) or not np.array_equal(a, b)
    with pytest.raises(ValueError, match="not inside the room"):
        room_impulse_response(SR, room=[4, 4, 3], source=[5, 1, 1])
    with pytest.raises(ValueError, match="unknown backend"):
        room_impulse_response(SR, backend="gpu")
    # a reverberated tone keeps its length and energy, and is later in time smeared
    x = np.zeros(SR, np.float32)
    x[:4000] = np.sin(np.arange(4000) * 0.3) * 1000
    y = reverberate(x, SR, 0, rir=a)
    assert y.shape == x.shape and np.abs(y[5000:]).max() > 1.0


def test_without_pyroomacoustics_falls_back_with_a_warning(monkeypatch):
    from asrkit.features import channel

    monkeypatch.setattr(channel, "_pyroomacoustics", lambda: None)
    with pytest.warns(RuntimeWarning, match="pip install pyroomacoustics"):
        h = room_impulse_response(SR, rt60=0.4, seed=0)
    assert len(h) == math.ceil(0.4 * SR) + 1 and schroeder_rt60(h, SR) == pytest.approx(0.4,
                                                                                       rel=0.1)
    with pytest.raises(ImportError, match="pip install pyroomacoustics"):
        room_impulse_response(SR, backend="pyroomacoustics")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        room_impulse_response(SR, rt60=0.3, seed=0, backend="synthetic")


def band_energy_db(x, sr, lo, hi):
    spec = np.abs(np.fft.rfft(x.astype(np.float64) * np.hanning(len(x)))) ** 2
    f = np.fft.rfftfreq(len(x), 1 / sr)
    return 10 * np.log10(spec[(f >= lo) & (f < hi)].sum() + 1e-30)


def snr_db(ref, y):
    ref = ref.astype(np.float64)
    return 10 * np.log10(np.sum(ref ** 2) / np.sum((y.astype(np.float64) - ref) ** 2))


def test_telephone_band_and_rate(rng):
    x = (rng.normal(size=SR) * 2000).astype(np.float32)
    y = telephone_channel(x, SR, codec=None)
    assert y.dtype == np.float32 and len(y) == len(x)
    inband = band_energy_db(x, SR, 500, 3000) - band_energy_db(y, SR, 500, 3000)
    assert abs(inband) < 1.0
    assert band_energy_db(y, SR, 4200, 8000) < band_energy_db(x, SR, 4200, 8000) - 30
    assert band_energy_db(y, SR, 20, 120) < band_energy_db(x, SR, 20, 120) - 20
    assert len(telephone_channel(x, SR, out_rate=8000)) == SR // 2
    with pytest.raises(ValueError, match="telephone codec"):
        telephone_channel(x, SR, codec="mp3")


def speech_like(rng, n, sr=SR):
    """Harmonics of a 140 Hz voice under a syllabic envelope, int16 scale."""
    t = np.arange(n) / sr
    voice = sum(np.sin(2 * np.pi * 140 * k * t + rng.uniform(0, 6)) / k for k in range(1, 25))
    return (voice * (0.6 + 0.4 * np.sin(2 * np.pi * 4 * t)) * 3000).astype(np.float32)


@pytest.mark.parametrize("codec,rate,min_snr", [("ulaw", 8000, 30), ("alaw", 8000, 30),
                                                ("gsm", 8000, 3), ("mp3", 16000, 8),
                                                ("vorbis", 16000, 8), ("opus", 16000, 3)])
def test_codecs_round_trip_aligned(rng, codec, rate, min_snr):
    x = speech_like(rng, rate)
    y = codec_roundtrip(x, rate, codec)
    assert y.dtype == np.float32 and len(y) == len(x)
    # aligned: the best lag is 0, not the encoder's delay
    lags = range(-80, 81)
    corr = [np.dot(x[100:-100], np.roll(y, -lag)[100:-100]) for lag in lags]
    assert list(lags)[int(np.argmax(corr))] == 0
    assert snr_db(x, y) > min_snr
    assert snr_db(x, y) < 80  # it is lossy


def test_g711_is_libsndfiles_and_clips_at_full_scale(rng):
    sf = pytest.importorskip("soundfile")
    import io

    x = speech_like(rng, 800, 8000) * 3
    buf = io.BytesIO()
    sf.write(buf, np.clip(x / 32768.0, -1, 1), 8000, format="WAV", subtype="ULAW")
    buf.seek(0)
    ref = sf.read(buf, dtype="float32")[0] * 32768.0
    np.testing.assert_array_equal(codec_roundtrip(x, 8000, "ulaw"), ref)
    loud = codec_roundtrip(np.full(100, 1e6, np.float32), 8000, "alaw")
    assert np.abs(loud).max() <= 32768.0
    with pytest.raises(ValueError, match="unknown codec"):
        codec_roundtrip(x, 8000, "aac")
    with pytest.raises(ValueError, match="does not take 16000 Hz"):
        codec_roundtrip(x, 16000, "gsm")


def test_levels_and_clipping(rng):
    x = rng.normal(size=1000).astype(np.float32) * 100
    y = scale_to_level(x, -20.0)
    assert 20 * np.log10(np.sqrt(np.mean(y.astype(np.float64) ** 2)) / 32768) == \
        pytest.approx(-20.0, abs=1e-4)
    np.testing.assert_array_equal(scale_to_level(np.zeros(5), -10), np.zeros(5))
    c = clip(x * 100, 5000.0)
    assert np.abs(c).max() == 5000.0 and np.array_equal(c[np.abs(x * 100) < 5000],
                                                        (x * 100)[np.abs(x * 100) < 5000])
