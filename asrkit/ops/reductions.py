"""Reductions over static axes (``reduce_sum``...) and over everything (``sum_all``...).

Static-axis reductions keep the dynamic axes; the ``*_all`` reductions also reduce the sequence
and batch axes and count only valid (non-padding) frames, so a mean over a padded batch is the
mean over its real frames.
"""

from __future__ import annotations

import numpy as np

from asrkit.graph.node import bind
from asrkit.graph.primitive import Primitive, Type
from asrkit.graph.sequence import padding_mask
from asrkit.ops._rules import float_dtype, static_axis


def _axes(prim, x, axis):
    axis = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    full = tuple(sorted({static_axis(prim, x, a) for a in axis}))
    return full


def _reduce_rule(prim, x, axis=(-1,), keepdims=False):
    full = _axes(prim, x, axis)
    shape = tuple(1 if i in full else d for i, d in enumerate(x.shape)) if keepdims else \
        tuple(d for i, d in enumerate(x.shape) if i not in full)
    dtype = x.dtype if prim.name == "reduce_max" or prim.name == "reduce_min" else float_dtype(x)
    return Type(shape, x.dynamic_axes, dtype)


def _full_axes(x, axis, nd):
    rank = x.ndim - nd
    axis = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    return tuple(sorted({nd + (a % rank) for a in axis}))


def _expand(g, x, axes, keepdims):
    return g if keepdims else np.expand_dims(g, axes)


def _nd(ctx):
    return len(ctx.node.inputs[0].dynamic_axes)


def _sum_fwd(ctx, x, axis=(-1,), keepdims=False):
    return np.sum(x, axis=_full_axes(x, axis, _nd(ctx)), keepdims=keepdims)


def _sum_bwd(ctx, g, y, x, axis=(-1,), keepdims=False):
    axes = _full_axes(x, axis, _nd(ctx))
    return (np.broadcast_to(_expand(g, x, axes, keepdims), x.shape),)


def _mean_fwd(ctx, x, axis=(-1,), keepdims=False):
    return np.mean(x, axis=_full_axes(x, axis, _nd(ctx)), keepdims=keepdims)


def _mean_bwd(ctx, g, y, x, axis=(-1,), keepdims=False):
    axes = _full_axes(x, axis, _nd(ctx))
    n = int(np.prod([x.shape[a] for a in axes]))
    return (np.broadcast_to(_expand(g, x, axes, keepdims) / n, x.shape),)


def _extreme_fwd(fn):
    def fwd(ctx, x, axis=(-1,), keepdims=False):
        return fn(x, axis=_full_axes(x, axis, _nd(ctx)), keepdims=keepdims)
    return fwd


def _extreme_bwd(ctx, g, y, x, axis=(-1,), keepdims=False):
    axes = _full_axes(x, axis, _nd(ctx))
    hit = x == _expand(y, x, axes, keepdims)
    share = hit / hit.sum(axis=axes, keepdims=True)  # ties split the gradient evenly
    return (_expand(g, x, axes, keepdims) * share,)


reduce_sum_p = Primitive("reduce_sum", ("x",), _reduce_rule, _sum_fwd, _sum_bwd, needs=(0,),
                         keeps_padding_zero=True)
reduce_mean_p = Primitive("reduce_mean", ("x",), _reduce_rule, _mean_fwd, _mean_bwd, needs=(0,),
                          keeps_padding_zero=True)
reduce_max_p = Primitive("reduce_max", ("x",), _reduce_rule, _extreme_fwd(np.max), _extreme_bwd,
                         keeps_padding_zero=True)
reduce_min_p = Primitive("reduce_min", ("x",), _reduce_rule, _extreme_fwd(np.min), _extreme_bwd,
                         keeps_padding_zero=True)


def reduce_sum(x, axis=-1, keepdims=False, name=""):
    """Sum over static ``axis`` (int or tuple; indices into the static shape)."""
    return bind(reduce_sum_p, [x], name=name, axis=axis, keepdims=keepdims)


def reduce_mean(x, axis=-1, keepdims=False, name=""):
    """Mean over static ``axis`` (int or tuple)."""
    return bind(reduce_mean_p, [x], name=name, axis=axis, keepdims=keepdims)


def reduce_max(x, axis=-1, keepdims=False, name=""):
    """Max over static ``axis``; the gradient goes to the maxima (split evenly between ties)."""
    return bind(reduce_max_p, [x], name=name, axis=axis, keepdims=keepdims)


def reduce_min(x, axis=-1, keepdims=False, name=""):
    """Min over static ``axis``; the gradient goes to the minima (split evenly between ties)."""
    return bind(reduce_min_p, [x], name=name, axis=axis, keepdims=keepdims)


# -- over every axis, counting only valid frames ------------------------------------------------
def _all_rule(prim, x):
    return Type((), (), float_dtype(x) if prim.name != "max_all" else x.dtype)


def _count(ctx, x):
    L = ctx.in_lengths[0]
    per_frame = int(np.prod(x.shape[2:])) if L is not None else 1
    return int(L.sum()) * per_frame if L is not None else x.size


def _sum_all_bwd(ctx, g, y, x):
    return (np.broadcast_to(g, x.shape),)


def _mean_all_fwd(ctx, x):
    return np.asarray(np.sum(x) / max(_count(ctx, x), 1), dtype=float_dtype_of(x))


def _mean_all_bwd(ctx, g, y, x):
    return (np.broadcast_to(g / max(_count(ctx, x), 1), x.shape),)


def float_dtype_of(x):
    """numpy dtype of a float result of ``x``."""
    return x.dtype if x.dtype.kind == "f" else np.dtype(np.float32)


def _masked(ctx, x, fill):
    L = ctx.in_lengths[0]
    if L is None:
        return x
    pad = padding_mask(L, x.shape[0])
    return np.where(pad.reshape(pad.shape + (1,) * (x.ndim - 2)), fill, x)


def _max_all_fwd(ctx, x):
    return np.asarray(np.max(_masked(ctx, x, -np.inf)), x.dtype)


def _max_all_bwd(ctx, g, y, x):
    hit = _masked(ctx, x, -np.inf) == y
    return (g * hit / hit.sum(),)


sum_all_p = Primitive("sum_all", ("x",), _all_rule,
                      lambda ctx, x: np.asarray(np.sum(x), float_dtype_of(x)), _sum_all_bwd,
                      needs=(0,))
mean_all_p = Primitive("mean_all", ("x",), _all_rule, _mean_all_fwd, _mean_all_bwd, needs=(0,))
max_all_p = Primitive("max_all", ("x",), _all_rule, _max_all_fwd, _max_all_bwd)


def sum_all(x, name=""):
    """Sum of every valid entry (all axes, padding excluded) -> scalar."""
    return bind(sum_all_p, [x], name=name)


def mean_all(x, name=""):
    """Mean over every valid entry (divides by the number of real frames x static size)."""
    return bind(mean_all_p, [x], name=name)


def max_all(x, name=""):
    """Max over every valid entry -> scalar."""
    return bind(max_all_p, [x], name=name)
