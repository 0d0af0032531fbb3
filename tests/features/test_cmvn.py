"""CMVN against a direct numpy derivation of Kaldi's ApplyCmvn / SlidingWindowCmn formulas."""

import numpy as np
import pytest

from asrkit.features import accumulate_cmvn_stats, apply_cmvn, cmvn_stats
from asrkit.features.cmvn import (
    apply_cmvn_corpus,
    apply_cmvn_sliding,
    global_cmvn_stats,
    speaker_cmvn_stats,
    utterance_cmvn_batch,
)


def kaldi_stats(x):
    """AccCmvnStats: float32 frames, float32 products, float64 sums, frame by frame."""
    x = np.asarray(x, np.float32)
    s = np.zeros((2, x.shape[1] + 1))
    for row in x:
        for d, f in enumerate(row):
            s[0, d] += float(f)
            s[1, d] += float(np.float32(f * f))
        s[0, -1] += 1
    return s


def kaldi_apply(x, stats, norm_vars):
    count = stats[0, -1]
    mean = stats[0, :-1] / count
    if not norm_vars:
        return (x - mean).astype(np.float32)
    var = np.maximum(stats[1, :-1] / count - mean ** 2, 1e-20)
    scale = 1 / np.sqrt(var)
    return (x * scale - mean * scale).astype(np.float32)


def test_stats_format_matches_compute_cmvn_stats(rng):
    x = rng.normal(size=(37, 5)).astype(np.float32)
    s = cmvn_stats(x)
    assert s.dtype == np.float64 and s.shape == (2, 6)
    np.testing.assert_allclose(s, kaldi_stats(x), rtol=1e-12)
    assert s[0, 5] == 37 and s[1, 5] == 0


def test_accumulate_adds_in_place(rng):
    a, b = rng.normal(size=(10, 3)), rng.normal(size=(7, 3))
    s = accumulate_cmvn_stats(None, a)
    same = accumulate_cmvn_stats(s, b)
    assert same is s
    np.testing.assert_allclose(s, kaldi_stats(np.concatenate([a, b])), rtol=1e-12)


def test_weighted_stats(rng):
    x = rng.normal(size=(6, 2))
    w = rng.uniform(size=6)
    s = cmvn_stats(x, weights=w)
    np.testing.assert_allclose(s[0, :2], (w[:, None] * x).sum(0), rtol=1e-6)
    np.testing.assert_allclose(s[1, :2], (w[:, None] * x * x).sum(0), rtol=1e-6)
    assert s[0, 2] == pytest.approx(w.sum(), rel=1e-6)


@pytest.mark.parametrize("norm_vars", [False, True])
def test_apply_matches_kaldi_formula(rng, norm_vars):
    x = (rng.normal(size=(50, 13)) * 3 + 7).astype(np.float32)
    stats = kaldi_stats(x)
    y = apply_cmvn(x, stats, norm_vars=norm_vars)
    assert y.dtype == np.float32 and y.shape == x.shape
    np.testing.assert_allclose(y, kaldi_apply(x, stats, norm_vars), atol=2e-5)
    np.testing.assert_allclose(y.mean(0), 0, atol=1e-4)
    if norm_vars:
        np.testing.assert_allclose(y.std(0), 1, atol=1e-4)


def test_variance_floor_and_reverse(rng):
    x = rng.normal(size=(20, 3)).astype(np.float32)
    x[:, 1] = 4.0  # constant column: variance 0 floored to 1e-20, scale 1e10
    y = apply_cmvn(x, cmvn_stats(x), norm_vars=True)
    assert np.all(np.isfinite(y)) and np.all(y[:, 1] == 0)
    z = apply_cmvn(x, cmvn_stats(x), norm_vars=False)
    back = apply_cmvn(z, cmvn_stats(x), reverse=True)
    np.testing.assert_allclose(back, x, atol=1e-5)
    v = apply_cmvn(np.delete(x, 1, 1), cmvn_stats(np.delete(x, 1, 1)), norm_vars=True)
    back = apply_cmvn(v, cmvn_stats(np.delete(x, 1, 1)), norm_vars=True, reverse=True)
    np.testing.assert_allclose(back, np.delete(x, 1, 1), atol=1e-5)


def test_means_only_stats_and_skip_dims(rng):
    x = rng.normal(size=(9, 3)).astype(np.float32) + 1
    s = cmvn_stats(x)
    np.testing.assert_allclose(apply_cmvn(x, s[:1]), apply_cmvn(x, s), atol=0)
    with pytest.raises(ValueError, match="no variance row"):
        apply_cmvn(x, s[:1], norm_vars=True)
    y = apply_cmvn(x, s, norm_vars=True, skip_dims=[1])
    np.testing.assert_allclose(y[:, 1], x[:, 1], atol=1e-6)
    np.testing.assert_allclose(y[:, [0, 2]], apply_cmvn(x, s, norm_vars=True)[:, [0, 2]])


def test_bad_stats_raise():
    x = np.ones((3, 2), np.float32)
    with pytest.raises(ValueError, match="count = 0"):
        apply_cmvn(x, np.zeros((2, 3)))
    with pytest.raises(ValueError, match="dimension"):
        apply_cmvn(x, cmvn_stats(np.ones((3, 4))))
    with pytest.raises(ValueError, match="variance but not the mean"):
        apply_cmvn(x, cmvn_stats(x), norm_vars=True, norm_means=False)
    np.testing.assert_array_equal(apply_cmvn(x, cmvn_stats(x), norm_means=False), x)


def test_speaker_and_global_modes(rng):
    feats = {f"u{i}": rng.normal(loc=i, size=(5 + i, 4)).astype(np.float32) for i in range(5)}
    utt2spk = {"u0": "a", "u1": "b", "u2": "a", "u3": "b", "u4": "a"}
    spk = speaker_cmvn_stats(feats, utt2spk)
    np.testing.assert_allclose(spk["a"], kaldi_stats(np.concatenate(
        [feats["u0"], feats["u2"], feats["u4"]])), rtol=1e-10)
    glob = global_cmvn_stats(feats.items())
    np.testing.assert_allclose(glob, kaldi_stats(np.concatenate(list(feats.values()))),
                               rtol=1e-10)
    out = apply_cmvn_corpus(feats, "speaker", utt2spk, norm_vars=True)
    np.testing.assert_allclose(out["u3"], kaldi_apply(feats["u3"], spk["b"], True), atol=2e-5)
    out = apply_cmvn_corpus(feats, "utterance")
    np.testing.assert_allclose(out["u1"].mean(0), 0, atol=1e-5)
    out = apply_cmvn_corpus(feats, "global")
    np.testing.assert_allclose(np.concatenate(list(out.values())).mean(0), 0, atol=1e-5)
    out = apply_cmvn_corpus(feats, "none")
    assert out["u2"].dtype == np.float32 and np.array_equal(out["u2"], feats["u2"])
    with pytest.raises(ValueError, match="unknown CMVN mode"):
        apply_cmvn_corpus(feats, "cepstral")
    with pytest.raises(ValueError, match="needs utt2spk"):
        apply_cmvn_corpus(feats, "speaker")
    with pytest.raises(ValueError, match="'u9' has no speaker"):
        speaker_cmvn_stats({"u9": feats["u0"]}, utt2spk)
    with pytest.raises(ValueError, match="utterance 'bad'"):
        global_cmvn_stats({"u0": feats["u0"], "bad": np.ones((2, 7))})


def kaldi_sliding(x, cmn_window, min_window, center, norm_vars):
    """SlidingWindowCmnInternal, frame by frame with its own window rules."""
    x = np.asarray(x, np.float64)
    n = len(x)
    out = np.zeros_like(x)
    for t in range(n):
        if center:
            ws = t - cmn_window // 2
            we = ws + cmn_window
        else:
            ws, we = t - cmn_window, t + 1
        if ws < 0:
            we -= ws
            ws = 0
        if not center and we > t:
            we = max(t + 1, min_window)
        if we > n:
            ws -= we - n
            we = n
            ws = max(ws, 0)
        win = x[ws:we]
        out[t] = x[t] - win.mean(0)
        if norm_vars:
            if len(win) == 1:
                out[t] = 0
            else:
                var = np.maximum((win ** 2).mean(0) - win.mean(0) ** 2, 1e-10)
                out[t] *= var ** -0.5
    return out


@pytest.mark.parametrize("center", [False, True])
@pytest.mark.parametrize("norm_vars", [False, True])
@pytest.mark.parametrize("frames", [1, 7, 40])
def test_sliding_matches_kaldi(rng, center, norm_vars, frames):
    x = rng.normal(size=(frames, 3)).astype(np.float32) + 2
    y = apply_cmvn_sliding(x, cmn_window=10, min_window=4, center=center, norm_vars=norm_vars)
    np.testing.assert_allclose(y, kaldi_sliding(x, 10, 4, center, norm_vars), atol=1e-4)


def test_batch_ignores_padding(rng):
    lengths = np.array([6, 3, 0], np.int32)
    x = rng.normal(size=(6, 3, 2)).astype(np.float32)
    x[3:, 1] = 1e6  # padding must not leak into sequence 1's stats
    y = utterance_cmvn_batch(x, lengths, norm_vars=True)
    np.testing.assert_allclose(y[:3, 1], kaldi_apply(x[:3, 1], kaldi_stats(x[:3, 1]), True),
                               atol=2e-5)
    assert np.all(y[3:, 1] == 0) and np.all(y[:, 2] == 0)
