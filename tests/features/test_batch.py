"""compute_batch: identical to the single-utterance functions, on any number of threads."""

import numpy as np
import pytest

from asrkit.features import batch, compute, compute_batch
from asrkit.features.batch import default_num_threads


@pytest.fixture
def waveforms(rng):
    lengths = [16000, 0, 399, 400, 12345, 8000, 100, 24000, 4000, 16001]
    return [np.round(rng.standard_normal(n) * 2000).astype(np.float32) for n in lengths]


@pytest.mark.parametrize("kind,opts", [
    ("fbank", {}),
    ("fbank", {"dither": 0.0, "num_mel_bins": 80, "use_energy": True, "snip_edges": False}),
    ("mfcc", {}),
    ("mfcc", {"dither": 0.0, "htk_compat": True, "subtract_mean": True}),
    ("spectrogram", {"snip_edges": False}),
])
@pytest.mark.parametrize("num_threads", [1, 2, 3, None])
def test_batch_is_identical_to_single(kind, opts, num_threads, waveforms):
    got = compute_batch(kind, waveforms, num_threads=num_threads, **opts)
    assert len(got) == len(waveforms)
    for wave, feats in zip(waveforms, got):
        np.testing.assert_array_equal(feats, compute(kind, wave, **opts))


@pytest.mark.parametrize("kind", ["fbank", "mfcc", "spectrogram"])
def test_long_utterances_are_split_across_threads(kind, waveforms, monkeypatch):
    """Work units of a few frames: one utterance filled by several threads, same result."""
    monkeypatch.setattr(batch, "UNIT_FRAMES", 16)
    for waves in (waveforms, waveforms[:1]):
        got = compute_batch(kind, waves, num_threads=3, snip_edges=False, subtract_mean=True)
        for wave, feats in zip(waves, got):
            np.testing.assert_array_equal(
                feats, compute(kind, wave, snip_edges=False, subtract_mean=True))


def test_batch_accepts_mixed_dtypes_and_lists(rng):
    waves = [rng.standard_normal(5000), (rng.standard_normal(6000) * 1000).astype(np.int16),
             list(rng.standard_normal(3000))]
    got = compute_batch("fbank", waves, num_threads=2, dither=0.0)
    for wave, feats in zip(waves, got):
        np.testing.assert_array_equal(feats, compute("fbank", wave, dither=0.0))


def test_empty_batch():
    assert compute_batch("mfcc", []) == []


def test_bad_waveform_is_named_by_index(waveforms):
    waveforms[7] = np.array([0.0, np.nan] * 1000)
    with pytest.raises(ValueError, match="waveform 7: waveform sample 1 is nan"):
        compute_batch("fbank", waveforms, num_threads=2)


def test_bad_arguments():
    with pytest.raises(TypeError, match="'num_mel_bin'"):
        compute_batch("fbank", [np.zeros(1000)], num_mel_bin=40)
    with pytest.raises(ValueError, match="unknown feature kind"):
        compute_batch("plp", [np.zeros(1000)])
    with pytest.raises(ValueError, match="num_threads=0"):
        compute_batch("fbank", [np.zeros(1000)], num_threads=0)


def test_default_num_threads_is_positive():
    assert default_num_threads() >= 1
