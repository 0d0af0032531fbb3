"""The streaming Conformer's stages of a ``CarriedStateStream``: the Conv2d front end and the
chunked causal Conformer (``[[network.layers]] type = "conformer"`` with ``chunk_size > 0``),
run chunk by chunk with caches, as icefall's streaming Conformer and sherpa-onnx run theirs.

- :class:`Conv2dFrontEnd` (``conv2d_subsampling``): output frame t reads input frames
  ``t*S .. t*S + span`` (S the product of the strides; x4: S = 4, span = 6). It keeps the input
  frames from ``n_out * S`` on, so the next outputs' windows are complete when they come.
- :class:`ConformerChunks`: frames are held until a chunk of ``chunk_size`` is complete, then go
  through every block at once. Each block caches what the chunk mask lets later chunks read:
  the attention keys and values of the last ``left_chunks`` chunks (all of them with -1), and
  the ``kernel_size - 1`` last inputs of the causal depthwise convolution. Relative positions
  depend only on ``i - j``, so the embedding of the needed offsets is the whole-utterance one.
  ``finish`` runs the last, shorter chunk, which sees only the frames that exist, as the key
  padding of the whole-utterance network does.

The arithmetic is that of the graph's CPU kernels (layer and batch norm, the depthwise
convolution, im2col for the front end, the activations' own forwards), so the concatenated
chunks equal the whole-utterance ``Model`` output to float32 rounding (the GEMMs see other
row counts). Dropout is off and batch norm uses its running statistics (evaluation mode).
"""

from __future__ import annotations

import math

import numpy as np

from asrkit.kernels._device import kernel
from asrkit.layers.attention import BN_EPS, LN_EPS
from asrkit.layers.subsampling import CONVS
from asrkit.ops.attention import _sinusoids

__all__ = ["ConformerChunks", "Conv2dFrontEnd", "front_end_span"]


def front_end_span(factor: int) -> int:
    """Input frames an output frame of the x``factor`` front end reads beyond its first:
    ``sum_i (K_i - 1) * prod_{k<i} s_k`` (x4: 2 + 2*2 = 6; x6: 10; x8: 14)."""
    span, stride = 0, 1
    for K, s in CONVS[factor]:
        span += (K - 1) * stride
        stride *= s
    return span


def _act(name: str):
    from asrkit.recognizer.model_stream import _activation

    return _activation(name)


def _layer_norm(x, p, key):
    y, _ = kernel("normalization", "layer_norm", "cpu")(x, p[f"{key}.weight"], p[f"{key}.bias"],
                                                        LN_EPS)
    return y


def _lin(x, p, key):
    return x @ p[f"{key}.W"] + p[f"{key}.b"]


class Conv2dFrontEnd:
    """The ``conv2d_subsampling`` layer ``pre`` (parameters ``p``) on frames that arrive in
    chunks: ``accept(x [n, F]) -> [n', dim]`` or None (module docstring)."""

    def __init__(self, p: dict, pre: str, factor: int):
        self.convs = CONVS[factor]
        self.weights = [(p[f"{pre}.conv.{2 * i}.W"], p[f"{pre}.conv.{2 * i}.b"])
                        for i in range(len(self.convs))]
        self.out_W, self.out_b = p[f"{pre}.out.W"], p[f"{pre}.out.b"]
        self.stride = int(np.prod([s for _, s in self.convs]))
        self.span = front_end_span(factor)
        self.relu = _act("relu")
        self.buf = None      # input frames [n_out * stride, n_in)
        self.n_in = 0
        self.n_out = 0

    def _compute(self, stop: int) -> np.ndarray:
        first = self.n_out * self.stride
        last = (stop - 1) * self.stride + self.span          # the last input frame read
        h = self.buf[: last + 1 - first][:, None, :, None]   # [T, 1, F, 1]
        unfold = kernel("conv", "unfold2d", "cpu")
        for (W, b), (_, s) in zip(self.weights, self.convs):
            Kt, Kf, C, O = W.shape
            cols = unfold(h, Kt, Kf, s, s)                          # [T', 1, F', Kt, Kf, C]
            To, _, Fo = cols.shape[:3]
            h = self.relu((cols.reshape(To * Fo, Kt * Kf * C) @ W.reshape(Kt * Kf * C, O)
                           ).reshape(To, 1, Fo, O) + b)
        self.n_out = stop
        self.buf = self.buf[self.n_out * self.stride - first:]
        return h.reshape(len(h), -1) @ self.out_W + self.out_b

    def accept(self, x: np.ndarray) -> np.ndarray | None:
        self.buf = x if self.buf is None else np.concatenate([self.buf, x])
        self.n_in += len(x)
        stop = (self.n_in - 1 - self.span) // self.stride + 1   # outputs whose window is in
        return self._compute(stop) if stop > self.n_out else None

    def finish(self) -> None:
        return None          # valid convolutions: a window past the end gives no frame


class _Block:
    """One Conformer block's parameters and its caches (keys, values, convolution inputs)."""

    def __init__(self, p: dict, pre: str, D: int, K: int):
        self.p = {k[len(pre) + 1:]: v for k, v in p.items() if k.startswith(pre + ".")}
        a = self.p
        self.w_in, self.b_in = a["self_attn.in_proj.weight"], a["self_attn.in_proj.bias"]
        self.k = np.zeros((0, D), np.float32)    # keys of frames [kv_base, n_done)
        self.v = np.zeros((0, D), np.float32)
        self.conv = np.zeros((K - 1, D), np.float32)   # depthwise inputs of the last K-1 frames


class ConformerChunks:
    """The ``conformer`` layer ``pre`` with ``chunk_size > 0`` (parameters ``p``, parsed
    ``spec``) run chunk by chunk: ``accept(x [n, dim]) -> [n', dim]`` or None."""

    def __init__(self, p: dict, pre: str, spec: dict):
        self.D, self.H = int(spec["dim"]), int(spec["heads"])
        self.K = int(spec["kernel_size"])
        self.chunk = int(spec["chunk_size"])
        self.left = int(spec["left_chunks"])     # -1: all
        self.batch_norm = spec["conv_norm"] == "batch"
        self.blocks = [_Block(p, f"{pre}.layers.{k}", self.D, self.K)
                       for k in range(int(spec["num_layers"]))]
        self.sigmoid = _act("sigmoid")
        self.pending = np.zeros((0, self.D), np.float32)
        self.n_done = 0      # frames through every block
        self.kv_base = 0     # frame of each block's k[0], v[0]

    # -- the parts of a block ------------------------------------------------------------------
    def _swish(self, x):
        return x * self.sigmoid(x)

    def _ff(self, x, b, key):
        return _lin(self._swish(_lin(x, b.p, f"{key}.w_1")), b.p, f"{key}.w_2")

    def _attention(self, x, b: _Block, s: int, base: int) -> np.ndarray:
        """Queries: frames ``[s, s + n)`` (``x [n, D]``); keys: the cache (from frame
        ``kv_base``) and these; then the cache keeps the keys from frame ``base`` on."""
        n, D, H = len(x), self.D, self.H
        d = D // H
        qkv = x @ b.w_in.T + b.b_in
        b.k = np.concatenate([b.k, qkv[:, D:2 * D]])
        b.v = np.concatenate([b.v, qkv[:, 2 * D:]])
        m = len(b.k)                                  # keys [kv_base, s + n)
        i = s + np.arange(n)[:, None]
        j = self.kv_base + np.arange(m)[None, :]
        c = self.chunk
        seen = j // c <= i // c
        if self.left >= 0:
            seen &= j // c >= i // c - self.left
        a = b.p
        q = qkv[:, :D].reshape(n, H, d)
        k, v = b.k.reshape(m, H, d), b.v.reshape(m, H, d)
        # relative offsets i - j from top = s + n - 1 - kv_base down to -(n - 1)
        top = s + n - 1 - self.kv_base
        rel = _sinusoids(np.arange(top, -n, -1), D, np.float32) @ a["self_attn.linear_pos.weight"].T
        rel = rel.reshape(-1, H, d)
        ac = np.einsum("nhd,mhd->hnm", q + a["self_attn.pos_bias_u"], k)
        bd = np.einsum("nhd,rhd->hnr", q + a["self_attn.pos_bias_v"], rel)
        bd = np.take_along_axis(bd, np.broadcast_to(top - (i - j), (H, n, m)), axis=2)
        scores = np.where(seen, (ac + bd) * np.float32(1.0 / math.sqrt(d)), -np.inf)
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs = e / e.sum(axis=-1, keepdims=True)
        o = np.einsum("hnm,mhd->nhd", probs, v).reshape(n, D)
        b.k, b.v = b.k[base - self.kv_base:], b.v[base - self.kv_base:]
        return o @ a["self_attn.out_proj.weight"].T + a["self_attn.out_proj.bias"]

    def _conv(self, x, b: _Block) -> np.ndarray:
        a, c = b.p, "conv_module"
        h = _lin(x, a, f"{c}.pointwise_conv1")
        h = h[:, :self.D] * self.sigmoid(h[:, self.D:])                    # GLU
        full = np.concatenate([b.conv, h])
        b.conv = full[len(full) - (self.K - 1):]
        y = kernel("conv", "depthwise_conv1d", "cpu")(full[:, None], a[f"{c}.depthwise_conv.W"],
                                                      self.K - 1)[self.K - 1:, 0]
        y = y + a[f"{c}.depthwise_conv.b"]
        n = f"{c}.norm"
        if self.batch_norm:
            rstd = 1.0 / np.sqrt(a[f"{n}.running_var"] + BN_EPS)
            y, _ = kernel("normalization", "batch_norm", "cpu")(
                y, a[f"{n}.weight"], a[f"{n}.bias"], a[f"{n}.running_mean"], rstd)
        else:
            y = _layer_norm(y, a, n)
        return _lin(self._swish(y), a, f"{c}.pointwise_conv2")

    def _run(self, x: np.ndarray) -> np.ndarray:
        """Frames ``[n_done, n_done + n)`` through every block (a whole number of chunks, or
        the last frames of the input)."""
        s = self.n_done
        end = s + len(x)
        # the first key the next chunk's queries may read (they start at frame `end`)
        base = self.kv_base if self.left < 0 else max(
            (end // self.chunk - self.left) * self.chunk, self.kv_base)
        x = x * np.float32(math.sqrt(self.D))
        for b in self.blocks:
            x = x + 0.5 * self._ff(_layer_norm(x, b.p, "norm_ff_macaron"), b,
                                   "feed_forward_macaron")
            x = x + self._attention(_layer_norm(x, b.p, "norm_mha"), b, s, base)
            x = x + self._conv(_layer_norm(x, b.p, "norm_conv"), b)
            x = x + 0.5 * self._ff(_layer_norm(x, b.p, "norm_ff"), b, "feed_forward")
            x = _layer_norm(x, b.p, "norm_final")
        self.n_done, self.kv_base = end, base
        return np.asarray(x, np.float32)

    def accept(self, x: np.ndarray) -> np.ndarray | None:
        self.pending = np.concatenate([self.pending, x])
        full = len(self.pending) // self.chunk * self.chunk
        if not full:
            return None
        y = self._run(self.pending[:full])
        self.pending = self.pending[full:]
        return y

    def finish(self) -> np.ndarray | None:
        if not len(self.pending):
            return None
        y = self._run(self.pending)
        self.pending = self.pending[:0]
        return y

    @property
    def delay(self) -> int:
        """Frames of this layer's input the first frame of a chunk waits for."""
        return self.chunk - 1
