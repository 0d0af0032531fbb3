"""Multi-head self-attention as one op, and sinusoidal positional encodings.

``mhsa`` is the whole layer of ``asrkit.kernels.mhsa_forward``/``mhsa_backward`` (projections,
the fused attention core with key padding, causal and chunked masks, the output projection) on
every device, the way ``asrkit.ops.lstm`` wraps the LSTM kernels: parameters in torch's layouts
(``nn.MultiheadAttention``'s ``in_proj_weight [3D, D]``, ``out_proj``), relative positions as
ESPnet's ``RelPositionMultiHeadedAttention`` / icefall's conformer (``linear_pos``,
``pos_bias_u``, ``pos_bias_v``), with the positional embedding of the batch's length built in
the forward (:func:`rel_pos_embedding`). ``positional_encoding`` is the absolute sinusoidal
encoding of the Transformer (``x * scale + PE``).
"""

from __future__ import annotations

import math

import numpy as np

from asrkit.graph.node import bind
from asrkit.graph.primitive import Primitive, Type
from asrkit.kernels._device import kernel
from asrkit.ops._rules import float_dtype, require_sequence


def _sinusoids(positions: np.ndarray, D: int, dtype) -> np.ndarray:
    """``[N, D]``: ``sin(p * w_i)`` in even and ``cos(p * w_i)`` in odd columns,
    ``w_i = 10000^(-2i/D)``, computed in ``dtype`` as ESPnet computes it in float32."""
    dt = np.dtype(dtype)
    div = np.exp(np.arange(0, D, 2, dtype=dt) * dt.type(-(math.log(10000.0) / D)))
    arg = positions.astype(dt)[:, None] * div[None, :]
    pe = np.zeros((len(positions), D), dt)
    pe[:, 0::2] = np.sin(arg)
    pe[:, 1::2] = np.cos(arg)[:, :D // 2]
    return pe


def rel_pos_embedding(T: int, D: int, dtype=np.float32) -> np.ndarray:
    """ESPnet's ``RelPositionalEncoding`` of ``T`` frames: ``[2T-1, D]``, row m for the
    relative position ``T-1-m`` (T-1 first, -(T-1) last), as the attention kernels take it."""
    return _sinusoids(np.arange(T - 1, -T, -1), D, dtype)


def abs_pos_embedding(T: int, D: int, dtype=np.float32) -> np.ndarray:
    """ESPnet's (and the Transformer's) absolute ``PositionalEncoding`` table ``[T, D]``."""
    return _sinusoids(np.arange(T), D, dtype)


# -- multi-head self-attention ---------------------------------------------------------------
_ARGS = ("x", "w_in", "b_in", "w_out", "b_out", "w_pos", "pos_bias_u", "pos_bias_v")


def _mhsa_rule(prim, x, w_in, b_in, w_out, b_out, *pos, num_heads=1, causal=False,
               chunk_size=None, left_chunks=None):
    nodes = [x, w_in, b_in, w_out, b_out, *pos]
    require_sequence(prim, x)
    if len(x.shape) != 3:
        raise prim.error(nodes, "x must be [T, B, D]")
    D, H = x.shape[2], num_heads
    if H < 1 or D % H:
        raise prim.error(nodes, f"num_heads={H} does not divide the model size {D}")
    want = {"w_in": (3 * D, D), "b_in": (3 * D,), "w_out": (D, D), "b_out": (D,),
            "w_pos": (D, D), "pos_bias_u": (H, D // H), "pos_bias_v": (H, D // H)}
    if len(pos) not in (0, 3):
        raise prim.error(nodes, "relative positions take w_pos, pos_bias_u and pos_bias_v")
    for name, node in zip(_ARGS[1:], nodes[1:]):
        if node.dynamic_axes or tuple(node.shape) != want[name]:
            raise prim.error(nodes, f"{name} must be a static {list(want[name])} tensor")
    if chunk_size is not None and chunk_size < 1:
        raise prim.error(nodes, f"chunk_size={chunk_size} must be >= 1")
    if left_chunks is not None and (chunk_size is None or left_chunks < 0):
        raise prim.error(nodes, "left_chunks needs a chunk_size and must be >= 0")
    return Type(x.shape, x.dynamic_axes, float_dtype(*nodes))


def _zeros(ctx, shape, dtype):
    if ctx.device == "cuda":
        return kernel("layout", "zeros", "cuda")(tuple(shape), dtype)
    return np.zeros(shape, dtype)


def _mhsa_fwd(ctx, x, w_in, b_in, w_out, b_out, *pos, num_heads=1, causal=False,
              chunk_size=None, left_chunks=None):
    from asrkit.kernels.attention import mhsa_forward

    T, _, D = tuple(x.shape)
    if T == 0:  # no frames (a front end left none): nothing to attend
        return _zeros(ctx, x.shape, x.dtype), None
    rel = {}
    if pos:
        dt = np.float64 if np.dtype(x.dtype) == np.float64 else np.float32
        rel = dict(pos_emb=rel_pos_embedding(T, D, dt), w_pos=pos[0], pos_bias_u=pos[1],
                   pos_bias_v=pos[2])
    return mhsa_forward(x, w_in, b_in, w_out, b_out, num_heads, np.asarray(ctx.in_lengths[0]),
                        device=ctx.device, causal=causal, chunk_size=chunk_size,
                        left_chunks=left_chunks, **rel)


def _mhsa_bwd(ctx, g, y, x, w_in, b_in, w_out, b_out, *pos, state=None, **attrs):
    from asrkit.kernels.attention import mhsa_backward

    if state is None:  # T == 0
        return tuple(_zeros(ctx, a.shape, g.dtype) for a in (x, w_in, b_in, w_out, b_out, *pos))
    return tuple(mhsa_backward(g, state))


# The kernels' caches reference the inputs and the output (the CPU backward recomputes the
# probabilities from them): keep every one alive until the backward pass.
mhsa_p = Primitive("mhsa", _ARGS, _mhsa_rule, _mhsa_fwd, _mhsa_bwd,
                   needs=(*range(len(_ARGS)), "out"), stateful=True, cuda=_mhsa_fwd,
                   cuda_backward=_mhsa_bwd)


def mhsa(x, w_in, b_in, w_out, b_out, num_heads, w_pos=None, pos_bias_u=None, pos_bias_v=None,
         causal=False, chunk_size=None, left_chunks=None, name=""):
    """Multi-head self-attention over a padded batch: ``x [T, B, D] -> [T, B, D]``.

    ``w_in [3D, D]``, ``b_in [3D]`` (query, key, value rows), ``w_out [D, D]``, ``b_out [D]``
    in torch's layouts; ``num_heads`` divides D. Keys past a sequence's length are never
    attended; ``causal`` (key j <= query i), ``chunk_size`` with ``left_chunks`` (None: all)
    restrict the keys further (WeNet/icefall streaming masks). Relative positions (ESPnet's
    ``RelPositionMultiHeadedAttention``): ``w_pos [D, D]`` (``linear_pos``, no bias) and
    ``pos_bias_u``, ``pos_bias_v [H, D/H]``; the positional embedding is
    :func:`rel_pos_embedding` of the batch's T. No attention dropout.
    """
    rel = [w_pos, pos_bias_u, pos_bias_v]
    if any(r is not None for r in rel) and not all(r is not None for r in rel):
        raise TypeError("mhsa: relative positions need w_pos, pos_bias_u and pos_bias_v")
    inputs = [x, w_in, b_in, w_out, b_out] + (rel if w_pos is not None else [])
    return bind(mhsa_p, inputs, name=name, num_heads=int(num_heads), causal=bool(causal),
                chunk_size=None if chunk_size is None else int(chunk_size),
                left_chunks=None if left_chunks is None else int(left_chunks))


# -- absolute positional encoding ------------------------------------------------------------
def _pe_rule(prim, x, scale=1.0):
    require_sequence(prim, x)
    if len(x.shape) != 3:
        raise prim.error([x], "x must be [T, B, D]")
    return Type(x.shape, x.dynamic_axes, float_dtype(x))


def _pe_table(x):
    T, _, D = tuple(x.shape)
    dt = np.float64 if np.dtype(x.dtype) == np.float64 else np.float32
    return abs_pos_embedding(T, D, dt)


def _pe_fwd(ctx, x, scale=1.0):
    return kernel("conv", "scale_add_rows", ctx.device)(x, _pe_table(x), scale)


def _pe_bwd(ctx, g, y, x=None, scale=1.0):
    T, _, D = tuple(g.shape)
    return (kernel("conv", "scale_add_rows", ctx.device)(g, np.zeros((T, D), g.dtype), scale),)


positional_encoding_p = Primitive("positional_encoding", ("x",), _pe_rule, _pe_fwd, _pe_bwd,
                                  needs=(), cuda=_pe_fwd, cuda_backward=_pe_bwd)


def positional_encoding(x, scale=1.0, name=""):
    """The Transformer's absolute sinusoidal encoding: ``x * scale + PE[t]``, ``x [T, B, D]``
    (ESPnet's ``PositionalEncoding`` with ``scale = sqrt(D)``; :func:`abs_pos_embedding`)."""
    return bind(positional_encoding_p, [x], name=name, scale=float(scale))


__all__ = ["abs_pos_embedding", "mhsa", "positional_encoding", "rel_pos_embedding"]
