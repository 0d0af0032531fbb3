"""Softmax and log-softmax over a static axis, or over time (masked to each sequence's length)."""

from __future__ import annotations

import numpy as np

from asrkit.graph.node import bind
from asrkit.graph.primitive import Primitive
from asrkit.graph.sequence import padding_mask
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


softmax_p = Primitive("softmax", ("x",), _axis_rule, _softmax_fwd, _softmax_bwd, needs=("out",))
log_softmax_p = Primitive("log_softmax", ("x",), _axis_rule, _log_softmax_fwd, _log_softmax_bwd,
                          needs=("out",))


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


def _pad(ctx, x):
    pad = padding_mask(ctx.in_lengths[0], x.shape[0])
    return pad.reshape(pad.shape + (1,) * (x.ndim - 2))


def _seq_log_softmax(ctx, x):
    x = _float(x)
    pad = _pad(ctx, x)
    z = np.where(pad, -np.inf, x)
    m = np.max(z, axis=0, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)  # empty sequences: all padding
    with np.errstate(divide="ignore"):
        out = z - m - np.log(np.sum(np.exp(z - m), axis=0, keepdims=True))
    return np.where(pad, 0, out)


def _seq_softmax_fwd(ctx, x):
    return np.where(_pad(ctx, x), 0, np.exp(_seq_log_softmax(ctx, x)))


def _seq_softmax_bwd(ctx, g, y, x):
    return (y * (g - np.sum(g * y, axis=0, keepdims=True)),)


def _seq_log_softmax_bwd(ctx, g, y, x):
    p = np.where(_pad(ctx, g), 0, np.exp(y))
    return (g - p * np.sum(g, axis=0, keepdims=True),)


sequence_softmax_p = Primitive("sequence_softmax", ("x",), _seq_rule, _seq_softmax_fwd,
                               _seq_softmax_bwd, needs=("out",), keeps_padding_zero=True)
sequence_log_softmax_p = Primitive("sequence_log_softmax", ("x",), _seq_rule,
                                   _seq_log_softmax, _seq_log_softmax_bwd, needs=("out",))
