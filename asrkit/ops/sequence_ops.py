"""Ops along the sequence axis: frame stacking/subsampling/splicing, reversal, delays
(past_value/future_value) and per-sequence reductions. All honour each sequence's length.

Each forward and backward calls the sequence (or window) kernel of the run's device
(:func:`asrkit.kernels._device.kernel`): one function serves the cpu and cuda.
"""

from __future__ import annotations

import numpy as np

from asrkit.graph.node import BATCH, bind
from asrkit.graph.primitive import Primitive, Type
from asrkit.kernels import sequence as seq
from asrkit.kernels._device import kernel
from asrkit.ops._rules import derived_axis, float_dtype, require_sequence, view_cuda


def _primitive(name, arg_names, rule, fwd, bwd, **kw):
    """A primitive whose forward and backward run on both devices."""
    return Primitive(name, arg_names, rule, fwd, bwd, cuda=fwd, cuda_backward=bwd, **kw)


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


def _stack_fwd(ctx, x, size, stride):
    T, B, D = x.shape
    T_out = -(-T // stride)
    cols = kernel("windows", "gather_windows", ctx.device)(x, size, stride, 1, 0, T_out)
    return cols.reshape((T_out, B, size * D))


def _stack_bwd(ctx, g, y, x, size, stride):
    T_out, B, _ = g.shape
    D = x.shape[2]
    return (kernel("windows", "scatter_windows", ctx.device)(
        g.reshape((T_out, B, size, D)), x.shape[0], size, stride, 1, 0),)


stack_frames_p = _primitive(
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


def _subsample_fwd(ctx, x, factor, offset):
    return x[offset::factor]


subsample_frames_p = Primitive(
    "subsample_frames", ("x",), _subsample_rule, _subsample_fwd, _subsample_bwd, needs=(0,),
    view=True, keeps_padding_zero=True,
    lengths_rule=lambda ctx, x, factor, offset: np.maximum(
        _ceil_div(ctx.in_lengths[0] - offset, factor), 0), **view_cuda(_subsample_fwd))


def subsample_frames(x, factor, offset=0, name=""):
    """Keep every ``factor``-th frame from ``offset``: lengths ``ceil((L - offset) / factor)``."""
    return bind(subsample_frames_p, [x], name=name, factor=int(factor), offset=int(offset))


# -- Kaldi-style splicing (context frames, edges replicated) ---------------------------------
def _splice_rule(prim, x, left, right):
    require_sequence(prim, x)
    if left < 0 or right < 0 or len(x.shape) != 3:
        raise prim.error([x], "need x [T, B, D] and left, right >= 0")
    return Type((None, None, x.shape[2] * (left + right + 1)), x.dynamic_axes, x.dtype)


def _splice_fwd(ctx, x, left, right):
    return seq.splice_frames(x, ctx.in_lengths[0], left, right, device=ctx.device)


def _splice_bwd(ctx, g, y, x, left, right):
    return (seq.splice_frames_backward(g, ctx.in_lengths[0], left, right, device=ctx.device),)


splice_frames_p = _primitive("splice_frames", ("x",), _splice_rule, _splice_fwd, _splice_bwd,
                             needs=(), keeps_padding_zero=True)


def splice_frames(x, left, right, name=""):
    """Append context: frame t becomes ``[x[t-left], ..., x[t+right]]`` (Kaldi's splice-feats),
    replicating each sequence's first and last frames at its edges. ``[T,B,D] -> [T,B,(l+r+1)D]``.
    """
    return bind(splice_frames_p, [x], name=name, left=int(left), right=int(right))


# -- reversal --------------------------------------------------------------------------------
def _same_seq_rule(prim, x, **attrs):
    require_sequence(prim, x)
    return x.type


def _reverse(ctx, x):
    return seq.sequence_reverse(x, ctx.in_lengths[0], device=ctx.device)


sequence_reverse_p = _primitive("sequence_reverse", ("x",), _same_seq_rule, _reverse,
                                lambda ctx, g, y, x: (_reverse(ctx, g),), needs=(),
                                keeps_padding_zero=True)


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


def _delay(future):
    def fwd(ctx, x, init, time_step=1):
        if ctx.device == "cuda" and x.dtype.kind != "f":
            return NotImplemented
        return kernel("sequence", "delay", ctx.device)(x, init, ctx.in_lengths[0], time_step,
                                                       future)

    def bwd(ctx, g, y, x, init, time_step=1):
        return kernel("sequence", "delay_backward", ctx.device)(g, ctx.in_lengths[0],
                                                                time_step, future)
    return fwd, bwd


past_value_p = _primitive("past_value", ("x", "initial_state"), _delay_rule, *_delay(False),
                          needs=())
future_value_p = _primitive("future_value", ("x", "initial_state"), _delay_rule, *_delay(True),
                            needs=())


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


def _seq_sum(mean):
    def fwd(ctx, x):
        if ctx.device == "cuda" and x.dtype.kind != "f":
            return NotImplemented
        fn = seq.masked_mean if mean else seq.masked_sum
        return fn(x, ctx.in_lengths[0], device=ctx.device)

    def bwd(ctx, g, y, x):
        fn = seq.masked_mean_backward if mean else seq.masked_sum_backward
        return (fn(g, ctx.in_lengths[0], x.shape[0], device=ctx.device),)
    return fwd, bwd


sequence_sum_p = _primitive("sequence_sum", ("x",), _seq_reduce_rule, *_seq_sum(False),
                            needs=(0,))
sequence_mean_p = _primitive("sequence_mean", ("x",), _seq_reduce_rule, *_seq_sum(True),
                             needs=(0,))


def _pick(last):
    def index(ctx):
        L = ctx.in_lengths[0]
        return (L - 1).astype(np.int32) if last else np.zeros_like(L)

    def fwd(ctx, x):
        return kernel("sequence", "take_frame", ctx.device)(x, index(ctx))

    def bwd(ctx, g, y, x):
        return (kernel("sequence", "put_frame", ctx.device)(g, index(ctx), x.shape[0]),)
    return fwd, bwd


sequence_last_p = _primitive("sequence_last", ("x",), _seq_reduce_rule, *_pick(True), needs=(0,))
sequence_first_p = _primitive("sequence_first", ("x",), _seq_reduce_rule, *_pick(False),
                              needs=(0,))


def _seq_max_fwd(ctx, x):
    if ctx.device == "cuda" and x.dtype.kind != "f":
        return NotImplemented
    return kernel("sequence", "masked_max", ctx.device)(x, ctx.in_lengths[0])


def _seq_max_bwd(ctx, g, y, x):
    return (kernel("sequence", "masked_max_backward", ctx.device)(g, x, y, ctx.in_lengths[0]),)


sequence_max_p = _primitive("sequence_max", ("x",), _seq_reduce_rule, _seq_max_fwd, _seq_max_bwd)


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


def _lengths_fwd(ctx, x):
    L = ctx.in_lengths[0].astype(np.float32)
    if ctx.device == "cuda":
        from numba import cuda

        return cuda.to_device(L)
    return L


sequence_lengths_p = Primitive("sequence_lengths", ("x",), _lengths_rule, _lengths_fwd, None,
                               cuda=_lengths_fwd)


def sequence_lengths(x, name=""):
    """Each sequence's length as a float ``[B]`` node (no gradient)."""
    return bind(sequence_lengths_p, [x], name=name)
