"""Ops along the sequence axis: frame stacking/subsampling/splicing, reversal, delays
(past_value/future_value) and per-sequence reductions. All honour each sequence's length.
"""

from __future__ import annotations

import numpy as np

from asrkit.graph.node import BATCH, bind
from asrkit.graph.primitive import Primitive, Type
from asrkit.graph.sequence import padding_mask, valid_mask
from asrkit.ops._frames import gather_windows, scatter_windows
from asrkit.ops._rules import derived_axis, float_dtype, require_sequence


def _ceil_div(a, b):
    return -(-np.asarray(a) // b)


# -- stacking and subsampling ----------------------------------------------------------------
def _stack_rule(prim, x, size, stride):
    require_sequence(prim, x)
    if size < 1 or stride < 1:
        raise prim.error([x], f"size {size} and stride {stride} must be >= 1")
    if len(x.shape) != 3:
        raise prim.error([x], "x must be [T, B, D]")
    axes = x.dynamic_axes if stride == 1 else (derived_axis(x.seq_axis, f"s{stride}"), BATCH)
    return Type((None, None, x.shape[2] * size), axes, x.dtype)


def _stack_geometry(T, size, stride):
    return -(-T // stride)


def _stack_fwd(ctx, x, size, stride):
    T, B, D = x.shape
    T_out = _stack_geometry(T, size, stride)
    xp = np.zeros(((T_out - 1) * stride + size if T_out else 0, B, D), x.dtype)
    n = min(T, xp.shape[0])
    xp[:n] = x[:n]
    cols = gather_windows(xp, size, stride, 1, "valid")[:T_out]
    return cols.reshape(T_out, B, size * D)


def _stack_bwd(ctx, g, y, x, size, stride):
    T, B, D = x.shape
    T_out = g.shape[0]
    Tp = (T_out - 1) * stride + size if T_out else 0
    gp = scatter_windows(g.reshape(T_out, B, size, D), Tp, size, stride, 1, "valid")
    gx = np.zeros(x.shape, g.dtype)
    n = min(T, Tp)
    gx[:n] = gp[:n]
    return (gx,)


stack_frames_p = Primitive(
    "stack_frames", ("x",), _stack_rule, _stack_fwd, _stack_bwd, needs=(0,),
    lengths_rule=lambda ctx, x, size, stride: _ceil_div(ctx.in_lengths[0], stride))


def stack_frames(x, size, stride=None, name=""):
    """Low frame rate: output frame t' concatenates input frames ``t'*stride .. +size-1``.

    ``x [T, B, D] -> [ceil(T / stride), B, size * D]`` (stride defaults to size); frames past a
    sequence's end are zeros; lengths become ``ceil(L / stride)``.
    """
    return bind(stack_frames_p, [x], name=name, size=int(size), stride=int(stride or size))


def _subsample_rule(prim, x, factor, offset):
    require_sequence(prim, x)
    if factor < 1 or not 0 <= offset < factor:
        raise prim.error([x], f"need factor >= 1 and 0 <= offset < factor; got {factor}, "
                         f"{offset}")
    axes = x.dynamic_axes if factor == 1 else (derived_axis(x.seq_axis, f"s{factor}"), BATCH)
    return Type(x.shape, axes, x.dtype)


def _subsample_bwd(ctx, g, y, x, factor, offset):
    gx = np.zeros(x.shape, g.dtype)
    gx[offset::factor] = g
    return (gx,)


subsample_frames_p = Primitive(
    "subsample_frames", ("x",), _subsample_rule, lambda ctx, x, factor, offset: x[offset::factor],
    _subsample_bwd, needs=(0,), view=True, keeps_padding_zero=True,
    lengths_rule=lambda ctx, x, factor, offset: np.maximum(
        _ceil_div(ctx.in_lengths[0] - offset, factor), 0))


def subsample_frames(x, factor, offset=0, name=""):
    """Keep every ``factor``-th frame from ``offset``: lengths ``ceil((L - offset) / factor)``."""
    return bind(subsample_frames_p, [x], name=name, factor=int(factor), offset=int(offset))


# -- Kaldi-style splicing (context frames, edges replicated) ---------------------------------
def _splice_rule(prim, x, left, right):
    require_sequence(prim, x)
    if left < 0 or right < 0 or len(x.shape) != 3:
        raise prim.error([x], "need x [T, B, D] and left, right >= 0")
    return Type((None, None, x.shape[2] * (left + right + 1)), x.dynamic_axes, x.dtype)


def _splice_index(lengths, T, left, right):
    t = np.arange(T)[:, None, None] + np.arange(-left, right + 1)[None, None, :]
    last = np.maximum(np.asarray(lengths) - 1, 0)[None, :, None]
    return np.clip(t, 0, last)  # [T, B, K]


def _splice_fwd(ctx, x, left, right):
    T, B, D = x.shape
    idx = _splice_index(ctx.in_lengths[0], T, left, right)
    out = x[idx, np.arange(B)[None, :, None]]  # [T, B, K, D]
    return out.reshape(T, B, -1)


def _splice_bwd(ctx, g, y, x, left, right):
    T, B, D = x.shape
    idx = _splice_index(ctx.in_lengths[0], T, left, right)
    gk = g.reshape(T, B, left + right + 1, D) * valid_mask(ctx.in_lengths[0], T, 4, g.dtype)
    gx = np.zeros(x.shape, g.dtype)
    np.add.at(gx, (idx, np.broadcast_to(np.arange(B)[None, :, None], idx.shape)), gk)
    return (gx,)


splice_frames_p = Primitive("splice_frames", ("x",), _splice_rule, _splice_fwd, _splice_bwd,
                            needs=(0,))


def splice_frames(x, left, right, name=""):
    """Append context: frame t becomes ``[x[t-left], ..., x[t+right]]`` (Kaldi's splice-feats),
    replicating each sequence's first and last frames at its edges. ``[T,B,D] -> [T,B,(l+r+1)D]``.
    """
    return bind(splice_frames_p, [x], name=name, left=int(left), right=int(right))


# -- reversal --------------------------------------------------------------------------------
def _reverse(x, lengths):
    T, B = x.shape[:2]
    src = np.asarray(lengths)[None, :] - 1 - np.arange(T)[:, None]  # [T, B]
    valid = src >= 0
    out = x[np.where(valid, src, 0), np.arange(B)[None, :]]
    out[~valid] = 0
    return out


def _same_seq_rule(prim, x, **attrs):
    require_sequence(prim, x)
    return x.type


sequence_reverse_p = Primitive(
    "sequence_reverse", ("x",), _same_seq_rule, lambda ctx, x: _reverse(x, ctx.in_lengths[0]),
    lambda ctx, g, y, x: (_reverse(g, ctx.in_lengths[0]),), needs=(), keeps_padding_zero=True)


def sequence_reverse(x, name=""):
    """Reverse each sequence within its own length (padding stays at the end)."""
    return bind(sequence_reverse_p, [x], name=name)


# -- delays ----------------------------------------------------------------------------------
def _delay_rule(prim, x, initial_state, time_step):
    require_sequence(prim, x)
    if time_step < 1:
        raise prim.error([x, initial_state], f"time_step must be >= 1; got {time_step}")
    if initial_state.is_sequence:
        raise prim.error([x, initial_state], "initial_state must be static or per-sequence")
    static = x.shape[2:]
    init_static = initial_state.shape[len(initial_state.dynamic_axes):]
    if len(init_static) > len(static) or any(
            a != b and a != 1 for a, b in zip(init_static[::-1], static[::-1])):
        raise prim.error([x, initial_state], "initial_state does not broadcast to a frame")
    return Type(x.shape, x.dynamic_axes, float_dtype(x, initial_state))


def _frame_init(x, init):
    return np.broadcast_to(init, x.shape[1:]).astype(x.dtype, copy=False)


def _past_fwd(ctx, x, init, time_step=1):
    k = min(time_step, x.shape[0])
    y = np.empty_like(x)
    y[:k] = _frame_init(x, init)
    y[k:] = x[:x.shape[0] - k]
    return y


def _past_bwd(ctx, g, y, x, init, time_step=1):
    k = min(time_step, g.shape[0])
    gx = np.zeros_like(g)
    gx[:g.shape[0] - k] = g[k:]
    return gx, g[:k].sum(axis=0)


past_value_p = Primitive("past_value", ("x", "initial_state"), _delay_rule, _past_fwd, _past_bwd,
                         needs=())


def _future_src_valid(lengths, T, k):
    return (np.arange(T)[:, None] + k) < np.asarray(lengths)[None, :]  # [T, B]


def _future_fwd(ctx, x, init, time_step=1):
    T = x.shape[0]
    k = time_step
    shifted = np.zeros_like(x)
    if k < T:
        shifted[:T - k] = x[k:]
    src = _future_src_valid(ctx.in_lengths[0], T, k)
    src = src.reshape(src.shape + (1,) * (x.ndim - 2))
    return np.where(src, shifted, _frame_init(x, init)[None])


def _future_bwd(ctx, g, y, x, init, time_step=1):
    T = g.shape[0]
    k = time_step
    src = _future_src_valid(ctx.in_lengths[0], T, k)
    src = src.reshape(src.shape + (1,) * (g.ndim - 2))
    gx = np.zeros_like(g)
    if k < T:
        gx[k:] = np.where(src, g, 0)[:T - k]
    return gx, np.where(src, 0, g).sum(axis=0)


future_value_p = Primitive("future_value", ("x", "initial_state"), _delay_rule, _future_fwd,
                           _future_bwd, needs=())


def past_value(x, initial_state=0.0, time_step=1, name=""):
    """Delay: ``y[t] = x[t - time_step]``, ``initial_state`` for the first frames (CNTK's
    past_value). initial_state: a scalar, a static ``[D]`` or a per-sequence ``[B, D]`` node."""
    return bind(past_value_p, [x, initial_state], name=name, time_step=int(time_step))


def future_value(x, initial_state=0.0, time_step=1, name=""):
    """Look-ahead: ``y[t] = x[t + time_step]`` while inside the sequence, else initial_state."""
    return bind(future_value_p, [x, initial_state], name=name, time_step=int(time_step))


# -- per-sequence reductions -----------------------------------------------------------------
def _seq_reduce_rule(prim, x):
    require_sequence(prim, x)
    return Type(x.shape[1:], (BATCH,), float_dtype(x) if prim.name != "sequence_max" else x.dtype)


def _lengths_shape(ctx, x):
    L = ctx.in_lengths[0]
    return L.reshape((1, -1) + (1,) * (x.ndim - 2))


sequence_sum_p = Primitive(
    "sequence_sum", ("x",), _seq_reduce_rule, lambda ctx, x: x.sum(axis=0),
    lambda ctx, g, y, x: (np.broadcast_to(g[None], x.shape),), needs=(0,))


def _seq_mean_fwd(ctx, x):
    return (x.sum(axis=0) / np.maximum(_lengths_shape(ctx, x)[0], 1)).astype(x.dtype)


def _seq_mean_bwd(ctx, g, y, x):
    return (np.broadcast_to((g / np.maximum(_lengths_shape(ctx, x)[0], 1))[None], x.shape),)


sequence_mean_p = Primitive("sequence_mean", ("x",), _seq_reduce_rule, _seq_mean_fwd,
                            _seq_mean_bwd, needs=(0,))


def _last_index(ctx):
    return np.maximum(ctx.in_lengths[0] - 1, 0)


def _seq_last_fwd(ctx, x):
    y = x[_last_index(ctx), np.arange(x.shape[1])]
    y[ctx.in_lengths[0] == 0] = 0
    return y


def _seq_last_bwd(ctx, g, y, x):
    gx = np.zeros(x.shape, g.dtype)
    gx[_last_index(ctx), np.arange(x.shape[1])] = g
    return (gx,)


sequence_last_p = Primitive("sequence_last", ("x",), _seq_reduce_rule, _seq_last_fwd,
                            _seq_last_bwd, needs=(0,))


def _seq_first_bwd(ctx, g, y, x):
    gx = np.zeros(x.shape, g.dtype)
    gx[0] = g
    return (gx,)


sequence_first_p = Primitive("sequence_first", ("x",), _seq_reduce_rule,
                             lambda ctx, x: x[0].copy() if len(x) else np.zeros(x.shape[1:],
                                                                                   x.dtype),
                             _seq_first_bwd, needs=(0,))


def _seq_max_fwd(ctx, x):
    pad = padding_mask(ctx.in_lengths[0], x.shape[0])
    z = np.where(pad.reshape(pad.shape + (1,) * (x.ndim - 2)), -np.inf, x)
    y = z.max(axis=0)
    return np.where(np.isfinite(y), y, 0).astype(x.dtype)


def _seq_max_bwd(ctx, g, y, x):
    pad = padding_mask(ctx.in_lengths[0], x.shape[0])
    hit = (x == y[None]) & ~pad.reshape(pad.shape + (1,) * (x.ndim - 2))
    return (g[None] * hit / np.maximum(hit.sum(axis=0, keepdims=True), 1),)


sequence_max_p = Primitive("sequence_max", ("x",), _seq_reduce_rule, _seq_max_fwd, _seq_max_bwd)


def sequence_sum(x, name=""):
    """Sum over each sequence's frames: ``[T, B, ...] -> [B, ...]``."""
    return bind(sequence_sum_p, [x], name=name)


def sequence_mean(x, name=""):
    """Mean over each sequence's frames (0 for empty sequences): ``[T, B, ...] -> [B, ...]``."""
    return bind(sequence_mean_p, [x], name=name)


def sequence_last(x, name=""):
    """Each sequence's last real frame: ``[T, B, ...] -> [B, ...]``."""
    return bind(sequence_last_p, [x], name=name)


def sequence_first(x, name=""):
    """Each sequence's first frame: ``[T, B, ...] -> [B, ...]``."""
    return bind(sequence_first_p, [x], name=name)


def sequence_max(x, name=""):
    """Max over each sequence's real frames: ``[T, B, ...] -> [B, ...]``."""
    return bind(sequence_max_p, [x], name=name)


# -- lengths as values -----------------------------------------------------------------------
def _lengths_rule(prim, x):
    require_sequence(prim, x)
    return Type((None,), (BATCH,), np.float32)


sequence_lengths_p = Primitive("sequence_lengths", ("x",), _lengths_rule,
                               lambda ctx, x: ctx.in_lengths[0].astype(np.float32), None)


def sequence_lengths(x, name=""):
    """Each sequence's length as a float ``[B]`` node (no gradient)."""
    return bind(sequence_lengths_p, [x], name=name)
