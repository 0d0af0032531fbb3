"""The streaming Conformer: the chunk-masked, causal-convolution encoder of ``chunk_size`` against
ESPnet's Conformer written in torch (tests/layers/test_conformer.py) with icefall's chunk mask
and a causal depthwise convolution, and the chunk-by-chunk model stream against the
whole-utterance network it must equal, fed in chunks of every size."""

import math

import numpy as np
import pytest

from asrkit.config.acoustic_net import ConfigError, parse_network
from asrkit.models import Model
from asrkit.recognizer.model_stream import (
    CarriedStateStream,
    WindowedStream,
    model_stream,
    subsampling_of,
)
from asrkit.recognizer.model_stream_conformer import ConformerChunks
from tests.streaming.weights import random_state

torch = pytest.importorskip("torch")
tc = pytest.importorskip("tests.layers.test_conformer")
nn = torch.nn


# -- the torch reference: icefall's chunk mask, a causal depthwise convolution ------------------
def chunk_mask(T, chunk, left):
    """bool [T, T], True where query i may not see key j (icefall's / WeNet's chunk mask)."""
    c = torch.arange(T) // chunk
    seen = c[None, :] <= c[:, None]
    if left >= 0:
        seen &= c[None, :] >= c[:, None] - left
    return ~seen


class ChunkedMHA(tc.RelPositionMHA):
    chunk, left = 1, -1

    def forward(self, x, pos_emb, key_pad):
        B, T, _ = x.shape
        q, k, v = (t.view(B, T, self.h, self.d_k) for t in self.in_proj(x).chunk(3, dim=-1))
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        p = self.linear_pos(pos_emb).view(1, -1, self.h, self.d_k).transpose(1, 2)
        ac = torch.matmul((q + self.pos_bias_u).transpose(1, 2), k.transpose(-2, -1))
        bd = self.rel_shift(torch.matmul((q + self.pos_bias_v).transpose(1, 2),
                                         p.transpose(-2, -1)))
        scores = (ac + bd) / math.sqrt(self.d_k)
        mask = key_pad[:, None, None, :] | chunk_mask(T, self.chunk, self.left)[None, None]
        attn = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1).masked_fill(mask,
                                                                                           0.0)
        out = torch.matmul(attn, v).transpose(1, 2).reshape(B, T, -1)
        return self.out_proj(out)


class CausalConvModule(tc.ConvModule):
    """icefall's causal ConvolutionModule: K-1 zeros on the left, none on the right."""

    def forward(self, x, key_pad):
        K = self.depthwise_conv.kernel_size[0]
        x = nn.functional.glu(self.pointwise_conv1(x.transpose(1, 2)), dim=1)
        x = nn.functional.pad(x.masked_fill(key_pad[:, None, :], 0.0), (K - 1, 0))
        x = nn.functional.conv1d(x, self.depthwise_conv.weight, self.depthwise_conv.bias,
                                 groups=x.shape[1])
        if isinstance(self.norm, nn.BatchNorm1d):
            x = self.norm(x)
        else:
            x = self.norm(x.transpose(1, 2)).transpose(1, 2)
        return self.pointwise_conv2(nn.functional.silu(x)).transpose(1, 2)


def streaming_torch_conformer(D, H, F, K, N, norm, chunk, left):
    ref = tc.TorchConformer(D, H, F, K, N, norm)
    for block in ref.layers:
        block.self_attn.__class__ = ChunkedMHA
        block.self_attn.chunk, block.self_attn.left = chunk, left
        block.conv_module.__class__ = CausalConvModule
    return ref.eval()


@pytest.mark.parametrize("norm,chunk,left", [("batch", 3, 1), ("layer", 2, -1), ("batch", 4, 0)])
def test_chunked_causal_conformer_matches_torch(norm, chunk, left, rng):
    D, H, F, K, N = 8, 2, 12, 5, 2
    ref = streaming_torch_conformer(D, H, F, K, N, norm, chunk, left)
    model, out = tc._layer_model({"type": "conformer", "dim": D, "heads": H, "ff_dim": F,
                                  "kernel_size": K, "num_layers": N, "conv_norm": norm,
                                  "chunk_size": chunk, "left_chunks": left}, D, ref)
    x, lengths = tc._batch(rng, 13, 3, D, [13, 8, 4])
    y, _ = model(x, lengths)
    with torch.no_grad():
        xt = torch.from_numpy(np.ascontiguousarray(x.transpose(1, 0, 2)))
        want = torch.log_softmax(out(ref(xt, tc._key_pad(lengths, 13))), -1).numpy()
    for b, n in enumerate(lengths):
        np.testing.assert_allclose(y[:n, b], want[b, :n], rtol=1e-4, atol=1e-5)
    # the whole-utterance conformer of the same weights differs: the options are in force
    full = Model({"layers": [dict(model.network["layers"][0], chunk_size=0, left_chunks=-1)]},
                 D, model.tokens, params=model.state_dict())
    assert not np.allclose(full(x, lengths)[0][:13, 0], y[:13, 0], atol=1e-3)


def test_defaults_are_the_whole_utterance_conformer():
    spec = parse_network({"layers": [{"type": "conformer", "dim": 8}]})["layers"][0]
    assert spec["chunk_size"] == 0 and spec["left_chunks"] == -1
    with pytest.raises(ConfigError, match=r"x.toml: \[network.layers\] #0.left_chunks: 2 needs "
                                          r"a chunk_size"):
        parse_network({"layers": [{"type": "conformer", "dim": 8, "left_chunks": 2}]}, "x.toml")
    with pytest.raises(ConfigError, match=r"#0.chunk_size: must be >= 0, got -1"):
        parse_network({"layers": [{"type": "conformer", "dim": 8, "chunk_size": -1}]})


# -- the model stream against the whole utterance ------------------------------------------------
def _model(net, input_dim=20, seed=0):
    model = Model(net, input_dim, ["<blk>", "a", "b", "c", "d"])
    model.load_state_dict(random_state(model, seed))
    return model


def _net(chunk, left, factor=4, norm="batch", extra=()):
    return {"layers": [
        {"type": "conv2d_subsampling", "dim": 16, "factor": factor, "channels": 4},
        {"type": "conformer", "dim": 16, "heads": 4, "ff_dim": 24, "num_layers": 2,
         "kernel_size": 7, "conv_norm": norm, "chunk_size": chunk, "left_chunks": left},
        *extra]}


def _feed(ms, feats, sizes):
    out, i, k = [], 0, 0
    while i < len(feats):
        n = sizes[k % len(sizes)]
        out.append(ms.accept(feats[i:i + n]))
        i, k = i + n, k + 1
    out.append(ms.finish())
    return np.concatenate(out)


@pytest.mark.parametrize("chunk,left,factor,norm", [
    (4, 2, 4, "batch"), (3, -1, 4, "layer"), (2, 0, 6, "batch"), (5, 1, 8, "layer")])
def test_stream_equals_whole_utterance(chunk, left, factor, norm, rng):
    model = _model(_net(chunk, left, factor, norm))
    for T in (150, 61, 7 + 4 * factor, 3):
        feats = rng.standard_normal((T, 20)).astype(np.float32)
        want, _ = model(feats)
        for sizes in ([1], [7], [T], [13, 2, 40, 5], [factor * chunk]):
            ms = model_stream(model)
            assert isinstance(ms, CarriedStateStream)
            got = _feed(ms, feats, sizes)
            assert got.shape == want.shape, (T, sizes)
            np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5,
                                       err_msg=f"T={T} sizes={sizes}")


def test_stream_with_layers_around_the_conformer(rng):
    net = _net(3, 1, extra=[{"type": "lstm", "hidden": 6}, {"type": "dense", "dim": 5}])
    net["stack_frames"], net["subsample_frames"] = 2, 1
    model = _model(net)
    feats = rng.standard_normal((97, 20)).astype(np.float32)
    want, _ = model(feats)
    np.testing.assert_allclose(_feed(model_stream(model), feats, [9, 4]), want, atol=1e-5)


def test_cache_is_bounded_by_the_left_context(rng):
    model = _model(_net(4, 2))
    ms = model_stream(model)
    (conf,) = [s for s in ms.stages if isinstance(s, ConformerChunks)]
    for _ in range(40):
        ms.accept(rng.standard_normal((16, 20)).astype(np.float32))
        for block in conf.blocks:
            # the keys the next chunk's queries may read: left_chunks chunks
            assert len(block.k) == len(block.v) <= 2 * 4
            assert len(block.conv) == 6
    assert conf.n_done == 40 * 4 - 4    # the front end holds its 6-frame span back


def test_delay_and_the_kind_of_stream():
    model = _model(_net(4, 2))
    ms = model_stream(model)
    assert subsampling_of(model.network) == ms.subsampling == 4
    # the front end reads 6 frames ahead; the first frame of a chunk waits for 3 more outputs
    assert ms.delay == 6 + 3 * 4
    whole = _model(_net(0, -1))
    assert isinstance(model_stream(whole), WindowedStream)
    assert model_stream(whole).subsampling == 4


def test_onnx_export_keeps_the_chunk_mask_and_the_causal_convolution(rng):
    pytest.importorskip("onnxruntime")
    from asrkit.export import build_onnx, run_onnx

    for chunk, left in ((3, 1), (2, -1)):
        model = _model(_net(chunk, left))
        proto = build_onnx(model)
        feats = rng.standard_normal((60, 2, 20)).astype(np.float32)
        lengths = np.array([60, 41], np.int32)
        ref, ref_len = model(feats, lengths)
        got, got_len = run_onnx(proto, feats, lengths)
        np.testing.assert_array_equal(got_len, ref_len)
        for b, n in enumerate(ref_len):
            np.testing.assert_allclose(got[:n, b], ref[:n, b], atol=1e-4)


def test_windowed_stream_of_a_whole_utterance_conformer_waits_for_the_front_end(rng):
    model = _model(_net(0, -1))
    feats = rng.standard_normal((83, 20)).astype(np.float32)
    want, _ = model(feats)
    for right in (0, 3):
        ms = model_stream(model, left=100, right=right)
        assert ms.delay == right * 4 + 6
        got = _feed(ms, feats, [5, 11])
        assert got.shape == want.shape
    # all the past and the whole future in view: the offline output
    ms = model_stream(model, left=100, right=100)
    np.testing.assert_allclose(_feed(ms, feats, [5, 11]), want, atol=1e-5)
