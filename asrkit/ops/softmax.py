"""Softmax and log-softmax over a static axis, or over time (masked to each sequence's length).

Over time, the masked softmax kernels of :mod:`asrkit.kernels.sequence` on every device; over a
static axis, numpy on the CPU (any axis) and the same kernels on CUDA (the last axis).
"""

from __future__ import annotations

import numpy as np

from asrkit.graph.node import bind
from asrkit.graph.primitive import Primitive
from asrkit.kernels import sequence as seq
from asrkit.ops._rules import require_sequence, same_type, static_axis


def _float(x):
    return x if x.dtype.kind == "f" else x.astype(np.float32)


def _axis_rule(prim, x, axis=-1):
    static_axis(prim, x, axis)
    return same_type(prim, x)


def _full(ctx, axis):
    n = ctx.node.inputs[0]
    return len(n.dynamic_axes) + (axis % (len(n.shape) - len(n.dynamic_axes)))


def _log_softmax(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    z = x - m
    return z - np.log(np.sum(np.exp(z), axis=axis, keepdims=True))


def _softmax_fwd(ctx, x, axis=-1):
    return np.exp(_log_softmax(_float(x), _full(ctx, axis)))


def _softmax_bwd(ctx, g, y, x, axis=-1):
    a = _full(ctx, axis)
    return (y * (g - np.sum(g * y, axis=a, keepdims=True)),)


def _log_softmax_fwd(ctx, x, axis=-1):
    return _log_softmax(_float(x), _full(ctx, axis))


def _log_softmax_bwd(ctx, g, y, x, axis=-1):
    a = _full(ctx, axis)
    return (g - np.exp(y) * np.sum(g, axis=a, keepdims=True),)


def _rows_cuda(ctx, x, axis, log):
    """Over the last axis on the device: the masked softmax kernel on ``[rows, 1, C]``."""
    from asrkit.kernels.cuda.layout import contiguous
    from asrkit.kernels.cuda.sequence import masked_log_softmax, masked_softmax

    n = ctx.node.inputs[0]
    rank = len(n.shape) - len(n.dynamic_axes)
    if axis % rank != rank - 1 or x.dtype.kind != "f":
        return NotImplemented
    C = int(tuple(x.shape)[-1])
    x3 = contiguous(x).reshape((x.size // C if C else 0, 1, C))
    return (masked_log_softmax if log else masked_softmax)(x3).reshape(tuple(x.shape))


def _rows_cuda_bwd(ctx, g, y, x, axis=-1, log=False):
    from asrkit.kernels.cuda import sequence
    from asrkit.kernels.cuda.layout import contiguous

    C = int(tuple(g.shape)[-1])
    shape3 = (g.size // C if C else 0, 1, C)
    fn = sequence.masked_log_softmax_backward if log else sequence.masked_softmax_backward
    return (fn(contiguous(g).reshape(shape3), contiguous(y).reshape(shape3))
            .reshape(tuple(g.shape)),)


softmax_p = Primitive("softmax", ("x",), _axis_rule, _softmax_fwd, _softmax_bwd, needs=("out",),
                      cuda=lambda ctx, x, axis=-1: _rows_cuda(ctx, x, axis, False),
                      cuda_backward=lambda ctx, g, y, x, axis=-1: _rows_cuda_bwd(ctx, g, y, x))
log_softmax_p = Primitive("log_softmax", ("x",), _axis_rule, _log_softmax_fwd, _log_softmax_bwd,
                          needs=("out",),
                          cuda=lambda ctx, x, axis=-1: _rows_cuda(ctx, x, axis, True),
                          cuda_backward=lambda ctx, g, y, x, axis=-1: _rows_cuda_bwd(
                              ctx, g, y, x, log=True))


def softmax(x, axis=-1, name=""):
    """Softmax over static ``axis`` (default the last); ``axis="seq"`` normalises over time."""
    if axis == "seq":
        return bind(sequence_softmax_p, [x], name=name)
    return bind(softmax_p, [x], name=name, axis=axis)


def log_softmax(x, axis=-1, name=""):
    """Log-softmax over static ``axis``; ``axis="seq"`` normalises over each sequence's frames."""
    if axis == "seq":
        return bind(sequence_log_softmax_p, [x], name=name)
    return bind(log_softmax_p, [x], name=name, axis=axis)


# -- over the sequence axis ------------------------------------------------------------------
def _seq_rule(prim, x):
    require_sequence(prim, x)
    return same_type(prim, x)


def _seq_fwd(log):
    def fwd(ctx, x):
        if ctx.device == "cuda" and x.dtype.kind != "f":
            return NotImplemented
        fn = seq.masked_log_softmax if log else seq.masked_softmax
        return fn(_float(x), ctx.in_lengths[0], axis=0, device=ctx.device)
    return fwd


def _seq_bwd(log):
    def bwd(ctx, g, y, x):
        fn = seq.masked_log_softmax_backward if log else seq.masked_softmax_backward
        return (fn(g, y, ctx.in_lengths[0], axis=0, device=ctx.device),)
    return bwd


def _seq_primitive(name, log):
    fwd, bwd = _seq_fwd(log), _seq_bwd(log)
    return Primitive(name, ("x",), _seq_rule, fwd, bwd, needs=("out",),
                     keeps_padding_zero=not log, cuda=fwd, cuda_backward=bwd)


sequence_softmax_p = _seq_primitive("sequence_softmax", False)
sequence_log_softmax_p = _seq_primitive("sequence_log_softmax", True)
