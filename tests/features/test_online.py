"""Streaming front end (``asrkit.features.online``): fed in chunks of any size, resampling,
features and CMVN give the offline functions' numbers; features also frame for frame as
kaldi-native-fbank's ``OnlineFbank``/``OnlineMfcc`` (same frames ready after every chunk)."""

import numpy as np
import pytest

from asrkit.features import compute, normalize, resample
from asrkit.features.cmvn import apply_cmvn, cmvn_stats
from asrkit.features.online import OnlineCmvn, OnlineFeatures, OnlineResampler
from tests.features.test_kaldi_vs_knf import assert_kaldi_close, knf_options

knf = pytest.importorskip("kaldi_native_fbank")


def _chunks(x, seed, most=700):
    """``x`` cut into random pieces, empty and one-sample pieces included."""
    rng = np.random.default_rng(seed)
    out, i = [], 0
    while i < len(x):
        n = int(rng.choice([0, 1, int(rng.integers(2, most))]))
        out.append(x[i:i + n])
        i += n
    return out


def _wave(seed, seconds=1.3, rate=16000):
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    x = 3000 * np.sin(2 * np.pi * 440 * t) + 300 * rng.standard_normal(len(t))
    return x.astype(np.float32)


@pytest.mark.parametrize("kind", ["fbank", "mfcc", "spectrogram"])
@pytest.mark.parametrize("snip_edges", [True, False])
@pytest.mark.parametrize("dither", [0.0, 1.0])
def test_features_in_chunks_equal_offline(kind, snip_edges, dither):
    x = _wave(1)
    opts = dict(snip_edges=snip_edges, dither=dither, seed=7)
    ref = compute(kind, x, **opts)
    online = OnlineFeatures(kind, **opts)
    parts = [online.accept(c) for c in _chunks(x, 2)]
    last = online.finish()
    np.testing.assert_array_equal(np.concatenate(parts + [last]), ref)
    # with snip_edges the end of the input adds nothing; without, the frames that reflect
    # at the end come from finish
    assert len(last) == (0 if snip_edges else len(ref) - sum(map(len, parts)))
    assert not snip_edges or len(last) == 0


@pytest.mark.parametrize("kind", ["fbank", "mfcc"])
@pytest.mark.parametrize("snip_edges", [True, False])
def test_frames_ready_after_each_chunk_as_kaldi_native_fbank(kind, snip_edges):
    x = _wave(3, seconds=0.9)
    o = knf_options(kind, snip_edges=snip_edges, num_mel_bins=23)
    theirs = knf.OnlineFbank(o) if kind == "fbank" else knf.OnlineMfcc(o)
    ours = OnlineFeatures(kind, snip_edges=snip_edges, num_mel_bins=23, dither=0.0)
    got = []
    for chunk in _chunks(x, 4, most=400):
        got.append(ours.accept(chunk))
        theirs.accept_waveform(16000, chunk)
        assert sum(map(len, got)) == theirs.num_frames_ready
    got.append(ours.finish())
    theirs.input_finished()
    assert sum(map(len, got)) == theirs.num_frames_ready
    ref = np.array([theirs.get_frame(i) for i in range(theirs.num_frames_ready)], np.float32)
    assert_kaldi_close(np.concatenate(got), ref)


def test_features_keep_only_the_samples_the_next_frames_read():
    online = OnlineFeatures("fbank", dither=0.0)
    x = _wave(5, seconds=3.0)
    for chunk in np.array_split(x, 30):
        online.accept(chunk)
        assert len(online._buf) < 400 + 1600  # a window plus at most one chunk


@pytest.mark.parametrize("rates", [(8000, 16000), (44100, 16000), (16000, 8000),
                                   (22050, 16000), (16000, 16000)])
def test_resampler_in_chunks_equals_resample(rates):
    orig, new = rates
    x = np.random.default_rng(6).standard_normal(orig + 77).astype(np.float32)
    r = OnlineResampler(orig, new)
    got = np.concatenate([r.accept(c) for c in _chunks(x, 7)] + [r.finish()])
    np.testing.assert_array_equal(got, resample(x, orig, new))


def _feed_cmvn(cmvn, feats, seed):
    rng = np.random.default_rng(seed)
    parts, i = [], 0
    while i < len(feats):
        n = int(rng.integers(0, 13))
        parts.append(cmvn.accept(feats[i:i + n]))
        i += n
    return parts, cmvn.finish()


@pytest.mark.parametrize("settings", [
    dict(mode="none"),
    dict(mode="sliding", cmn_window=60, min_window=20),
    dict(mode="sliding", cmn_window=60, min_window=20, norm_vars=True),
    dict(mode="sliding", cmn_window=61, min_window=20, center=True),
    dict(mode="sliding", cmn_window=600, min_window=100),  # longer than the input
])
def test_sliding_cmvn_in_chunks_equals_offline(settings):
    feats = compute("fbank", _wave(8), dither=0.0)
    s = dict(settings)
    mode = s.pop("mode")
    ref = normalize(feats, mode, s.get("norm_vars", False), None, s.get("cmn_window", 600),
                    s.get("min_window", 100), s.get("center", False))
    cmvn = OnlineCmvn(mode, **s)
    parts, last = _feed_cmvn(cmvn, feats, 9)
    np.testing.assert_array_equal(np.concatenate(parts + [last]), ref)
    # no frame waits longer than delay_frames (its window's future part)
    cmvn = OnlineCmvn(mode, **s)
    for t in range(len(feats)):
        cmvn.accept(feats[t:t + 1])
        assert cmvn.frames_out >= t + 1 - cmvn.delay_frames


def test_causal_sliding_cmvn_is_kaldis_online_cmn():
    feats = compute("fbank", _wave(10), dither=0.0)
    cmvn = OnlineCmvn("sliding", cmn_window=50, min_window=30, causal=True)
    got = []
    for t in range(len(feats)):  # no waiting: every frame comes out at once
        got.append(cmvn.accept(feats[t:t + 1]))
        assert len(got[-1]) == 1
    got = np.concatenate(got + [cmvn.finish()])
    x = feats.astype(np.float64)
    ref = np.stack([x[t] - x[max(0, t - 50):t + 1].mean(axis=0) for t in range(len(x))])
    np.testing.assert_allclose(got, ref, atol=1e-4)
    offline = normalize(feats, "sliding", cmn_window=50, min_window=30)
    np.testing.assert_array_equal(got[30:], offline[30:])  # differs on the first frames only
    assert not np.allclose(got[:29], offline[:29])


@pytest.mark.parametrize("norm_vars", [False, True])
def test_utterance_cmvn_running_mean(norm_vars):
    feats = compute("fbank", _wave(11), dither=0.0)  # 128 frames
    # a stream within prior_frames gets exactly the offline numbers
    cmvn = OnlineCmvn("utterance", norm_vars=norm_vars, prior_frames=200)
    parts, last = _feed_cmvn(cmvn, feats, 12)
    assert sum(map(len, parts)) == 0
    np.testing.assert_array_equal(last, normalize(feats, "utterance", norm_vars))
    # a longer one: the prior's frames with their own stats, then the running statistics
    cmvn = OnlineCmvn("utterance", norm_vars=norm_vars, prior_frames=40)
    parts, last = _feed_cmvn(cmvn, feats, 13)
    got = np.concatenate(parts + [last])
    ref = [apply_cmvn(feats[:40], cmvn_stats(feats[:40]), norm_vars=norm_vars)]
    ref += [apply_cmvn(feats[t:t + 1], cmvn_stats(feats[:t + 1]), norm_vars=norm_vars)
            for t in range(40, len(feats))]
    np.testing.assert_allclose(got, np.concatenate(ref), atol=1e-4, rtol=1e-5)
    assert cmvn.delay_frames == 39


def test_online_front_end_refuses_what_cannot_stream():
    with pytest.raises(ValueError, match="subtract_mean"):
        OnlineFeatures("fbank", subtract_mean=True)
    with pytest.raises(ValueError, match="unknown feature kind"):
        OnlineFeatures("plp")
    f = OnlineFeatures("fbank")
    with pytest.raises(ValueError, match="sample 2 of the chunk is not finite"):
        f.accept(np.array([0.0, 1.0, np.nan]))
    f.finish()
    with pytest.raises(ValueError, match="finish was called"):
        f.accept(np.zeros(10))
    with pytest.raises(ValueError, match="prior_frames"):
        OnlineCmvn("utterance", prior_frames=0)
    c = OnlineCmvn("sliding")
    c.accept(np.zeros((3, 4)))
    with pytest.raises(ValueError, match=r"expected frames \[n, 4\]"):
        c.accept(np.zeros((3, 5)))
