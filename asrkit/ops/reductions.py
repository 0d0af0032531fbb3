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


# -- on the device (asrkit.kernels.cuda.layout) ------------------------------------------------
def _kept(shape, axes):
    return tuple(1 if i in axes else d for i, d in enumerate(shape))


def _reduce_cuda(kind, mean=False):
    def fwd(ctx, x, axis=(-1,), keepdims=False):
        from asrkit.kernels.cuda import layout

        if x.dtype.kind != "f":
            return NotImplemented
        axes = _full_axes(x, axis, _nd(ctx))
        n = int(np.prod([x.shape[a] for a in axes]))
        y = layout.reduce_axes(x, axes, getattr(layout, kind), 1.0 / max(n, 1) if mean else 1.0)
        return y.reshape(_kept(x.shape, axes)) if keepdims else y

    def bwd(ctx, g, y, x, axis=(-1,), keepdims=False):
        from asrkit.kernels.cuda import layout

        axes = _full_axes(x, axis, _nd(ctx))
        kept = _kept(x.shape, axes)
        g = layout.contiguous(g).reshape(kept)
        if kind == "SUM":
            n = int(np.prod([x.shape[a] for a in axes])) if mean else 1
            return (layout.broadcast_to(_scaled(g, 1.0 / max(n, 1)), x.shape),)
        return (layout.extreme_grad(x, layout.contiguous(y).reshape(kept), g, axes),)
    return fwd, bwd


def _scaled(g, s):
    from asrkit.kernels import elementwise as ew

    return g if s == 1.0 else ew.binary("mul", g, np.full((1,), s, g.dtype), device="cuda")


def _primitive(name, kind, fwd, bwd, mean=False, needs=(0,)):
    cuda_fwd, cuda_bwd = _reduce_cuda(kind, mean)
    return Primitive(name, ("x",), _reduce_rule, fwd, bwd, needs=needs, keeps_padding_zero=True,
                     cuda=cuda_fwd, cuda_backward=cuda_bwd)


reduce_sum_p = _primitive("reduce_sum", "SUM", _sum_fwd, _sum_bwd)
reduce_mean_p = _primitive("reduce_mean", "SUM", _mean_fwd, _mean_bwd, mean=True)
reduce_max_p = _primitive("reduce_max", "MAX", _extreme_fwd(np.max), _extreme_bwd, needs=None)
reduce_min_p = _primitive("reduce_min", "MIN", _extreme_fwd(np.min), _extreme_bwd, needs=None)


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


def _sum_all_cuda(ctx, x):
    from asrkit.kernels.cuda.layout import reduce_leading

    return reduce_leading(x, x.ndim) if x.dtype.kind == "f" else NotImplemented


def _mean_all_cuda(ctx, x):
    y = _sum_all_cuda(ctx, x)
    return y if y is NotImplemented else _scaled(y, 1.0 / max(_count(ctx, x), 1))


def _spread_cuda(scale):
    def bwd(ctx, g, y, x):
        from asrkit.kernels.cuda.layout import broadcast_to, contiguous

        s = scale(ctx, x)
        return (broadcast_to(_scaled(contiguous(g).reshape((1,) * x.ndim), s), x.shape),)
    return bwd


def _masked_cuda(ctx, x):
    from asrkit.kernels.cuda.layout import contiguous
    from asrkit.kernels.cuda.sequence import fill_padding

    L = ctx.in_lengths[0]
    return contiguous(x) if L is None or not x.size else fill_padding(x, L, -np.inf)


def _max_all_cuda(ctx, x):
    from asrkit.kernels.cuda.layout import MAX, reduce_leading

    if x.dtype.kind != "f":
        return NotImplemented
    return reduce_leading(_masked_cuda(ctx, x), x.ndim, MAX)


def _max_all_cuda_bwd(ctx, g, y, x):
    from asrkit.kernels.cuda.layout import contiguous, extreme_grad

    ones = (1,) * x.ndim
    return (extreme_grad(_masked_cuda(ctx, x), contiguous(y).reshape(ones),
                         contiguous(g).reshape(ones), tuple(range(x.ndim))),)


sum_all_p = Primitive("sum_all", ("x",), _all_rule,
                      lambda ctx, x: np.asarray(np.sum(x), float_dtype_of(x)), _sum_all_bwd,
                      needs=(0,), cuda=_sum_all_cuda,
                      cuda_backward=_spread_cuda(lambda ctx, x: 1.0))
mean_all_p = Primitive("mean_all", ("x",), _all_rule, _mean_all_fwd, _mean_all_bwd, needs=(0,),
                       cuda=_mean_all_cuda,
                       cuda_backward=_spread_cuda(lambda ctx, x: 1.0 / max(_count(ctx, x), 1)))
max_all_p = Primitive("max_all", ("x",), _all_rule, _max_all_fwd, _max_all_bwd,
                      cuda=_max_all_cuda, cuda_backward=_max_all_cuda_bwd)


def sum_all(x, name=""):
    """Sum of every valid entry (all axes, padding excluded) -> scalar."""
    return bind(sum_all_p, [x], name=name)


def mean_all(x, name=""):
    """Mean over every valid entry (divides by the number of real frames x static size)."""
    return bind(mean_all_p, [x], name=name)


def max_all(x, name=""):
    """Max over every valid entry -> scalar."""
    return bind(max_all_p, [x], name=name)
