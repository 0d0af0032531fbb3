"""Static-shape manipulation: reshape, transpose, slicing, splice (concat) and stack.

All of them act on static axes only (indices count from the first static axis; negative from
the end); the dynamic axes pass through untouched.
"""

from __future__ import annotations

import numpy as np

from asrkit.graph.node import bind
from asrkit.graph.primitive import Primitive, Type
from asrkit.ops._rules import static_axis, view_cuda


def _nd(node):
    return len(node.dynamic_axes)


# -- reshape ---------------------------------------------------------------------------------
def _reshape_rule(prim, x, shape):
    static = x.shape[_nd(x):]
    size = int(np.prod(static))
    shape = tuple(int(d) for d in shape)
    if shape.count(-1) > 1:
        raise prim.error([x], f"at most one -1 in the new shape {list(shape)}")
    known = int(np.prod([d for d in shape if d != -1]))
    if -1 in shape:
        if known == 0 or size % known:
            raise prim.error([x], f"cannot reshape static {list(static)} into {list(shape)}")
        shape = tuple(size // known if d == -1 else d for d in shape)
    elif known != size:
        raise prim.error([x], f"cannot reshape static {list(static)} ({size} entries) into "
                         f"{list(shape)} ({known} entries)")
    return Type(x.shape[:_nd(x)] + shape, x.dynamic_axes, x.dtype)


def _reshape_fwd(ctx, x, shape):
    nd = _nd(ctx.node)
    return x.reshape(x.shape[:nd] + tuple(ctx.node.shape[nd:]))


def _reshape_cuda(ctx, x, shape):
    from asrkit.kernels.cuda.layout import contiguous

    return _reshape_fwd(ctx, contiguous(x), shape)


def _reshape_bwd(ctx, g, y, x, shape):
    if ctx.device == "cuda":
        from asrkit.kernels.cuda.layout import contiguous

        g = contiguous(g)
    return (g.reshape(tuple(x.shape)),)


reshape_p = Primitive("reshape", ("x",), _reshape_rule, _reshape_fwd, _reshape_bwd, needs=(0,),
                      view=True, keeps_padding_zero=True, cheap=True, cuda=_reshape_cuda,
                      cuda_backward=_reshape_bwd)


def reshape(x, shape, name=""):
    """Reshape the static part of ``x`` to ``shape`` (one -1 allowed); dynamic axes are kept."""
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    return bind(reshape_p, [x], name=name, shape=shape)


# -- transpose -------------------------------------------------------------------------------
def _transpose_rule(prim, x, perm):
    rank = len(x.shape) - _nd(x)
    if sorted(perm) != list(range(rank)):
        raise prim.error([x], f"perm {list(perm)} is not a permutation of the {rank} static axes")
    nd = _nd(x)
    return Type(x.shape[:nd] + tuple(x.shape[nd + p] for p in perm), x.dynamic_axes, x.dtype)


def _full_perm(nd, perm):
    return tuple(range(nd)) + tuple(nd + p for p in perm)


def _transpose_fwd(ctx, x, perm):
    return x.transpose(_full_perm(_nd(ctx.node), perm))


transpose_p = Primitive(
    "transpose", ("x",), _transpose_rule, _transpose_fwd,
    lambda ctx, g, y, x, perm: (g.transpose(np.argsort(_full_perm(_nd(ctx.node), perm))),),
    needs=(), view=True, keeps_padding_zero=True, cheap=True,
    **view_cuda(_transpose_fwd))


def transpose(x, perm=None, name=""):
    """Permute the static axes (default: reverse them)."""
    rank = len(x.shape) - _nd(x)
    perm = tuple(reversed(range(rank))) if perm is None else tuple(int(p) for p in perm)
    return bind(transpose_p, [x], name=name, perm=perm)


def swapaxes(x, a=-1, b=-2, name=""):
    """Swap two static axes."""
    rank = len(x.shape) - _nd(x)
    perm = list(range(rank))
    perm[a], perm[b] = perm[b], perm[a]
    return transpose(x, perm, name=name)


# -- slicing ---------------------------------------------------------------------------------
def _normalise_index(prim, x, key):
    """Turn a ``__getitem__`` key into a tuple of (int | (start, stop, step)) per static axis."""
    key = key if isinstance(key, tuple) else (key,)
    nd, rank = _nd(x), len(x.shape) - _nd(x)
    if any(k is Ellipsis for k in key):
        i = [k is Ellipsis for k in key].index(True)
        head, tail = key[:i], key[i + 1:]
        fill = len(x.shape) - len(head) - len(tail)
        key = head + (slice(None),) * fill + tail
    key = key + (slice(None),) * (len(x.shape) - len(key))
    if len(key) != len(x.shape):
        raise prim.error([x], f"too many indices ({len(key)}) for rank {len(x.shape)}")
    for k in key[:nd]:
        if k != slice(None):
            raise prim.error([x], "dynamic axes cannot be indexed; use sequence ops "
                             "(sequence_first, sequence_last, subsample_frames)")
    out = []
    for k, d in zip(key[nd:], x.shape[nd:]):
        if isinstance(k, slice):
            out.append(k.indices(d))
        elif isinstance(k, (int, np.integer)):
            if not -d <= k < d:
                raise prim.error([x], f"index {k} is out of range for an axis of size {d}")
            out.append(int(k) % d)
        else:
            raise prim.error([x], f"unsupported index {k!r} (ints and slices only)")
    assert len(out) == rank
    return tuple(out)


def _np_index(nd, index):
    return (slice(None),) * nd + tuple(k if isinstance(k, int) else slice(*k) for k in index)


def _getitem_rule(prim, x, index):
    nd = _nd(x)
    shape = list(x.shape[:nd])
    for k in index:
        if not isinstance(k, int):
            shape.append(len(range(*k)))
    return Type(shape, x.dynamic_axes, x.dtype)


def _getitem_bwd(ctx, g, y, x, index):
    gx = np.zeros(x.shape, g.dtype)
    gx[_np_index(_nd(ctx.node), index)] = g
    return (gx,)


def _getitem_fwd(ctx, x, index):
    return x[_np_index(_nd(ctx.node), index)]


getitem_p = Primitive(
    "getitem", ("x",), _getitem_rule, _getitem_fwd, _getitem_bwd, needs=(0,), view=True,
    keeps_padding_zero=True, cheap=True,
    **view_cuda(_getitem_fwd))


def getitem(x, key, name=""):
    """``x[key]`` over static axes (ints and slices; ``...`` skips the dynamic axes)."""
    return bind(getitem_p, [x], name=name, index=_normalise_index(getitem_p, x, key))


def slice_axis(x, axis, begin, end, step=1, name=""):
    """``x`` restricted to ``begin:end:step`` on static ``axis`` (CNTK's slice)."""
    full = static_axis(getitem_p, x, axis)
    key = [slice(None)] * len(x.shape)
    key[full] = slice(begin, end, step)
    return getitem(x, tuple(key), name=name)


# -- splice (concatenate) and stack ----------------------------------------------------------
def _join_rule(prim, *xs, axis, new_axis):
    first = xs[0]
    for x in xs[1:]:
        if x.dynamic_axes != first.dynamic_axes:
            raise prim.error(xs, "all inputs need the same dynamic axes")
        if len(x.shape) != len(first.shape):
            raise prim.error(xs, "all inputs need the same rank")
    full = static_axis(prim, first, axis) if not new_axis else None
    if new_axis:
        rank = len(first.shape) - _nd(first) + 1
        if not -rank <= axis < rank:
            raise prim.error(xs, f"axis {axis} out of range for stacking rank {rank - 1}")
        full = _nd(first) + (axis % rank)
        for x in xs[1:]:
            if x.shape != first.shape:
                raise prim.error(xs, "stacked inputs must have equal shapes")
        shape = first.shape[:full] + (len(xs),) + first.shape[full:]
    else:
        for x in xs[1:]:
            for i, (a, b) in enumerate(zip(x.shape, first.shape)):
                if i != full and a != b:
                    raise prim.error(xs, f"sizes differ on axis {i - len(first.shape)} "
                                     f"({b} vs {a}) away from the splice axis")
        shape = first.shape[:full] + (sum(x.shape[full] for x in xs),) + first.shape[full + 1:]
    dtype = np.result_type(*[x.dtype for x in xs])
    return Type(shape, first.dynamic_axes, dtype)


def _join_axis(ctx, new_axis, axis):
    nd = _nd(ctx.node)
    rank = len(ctx.node.shape) - nd
    return nd + (axis % rank)


def _splice_fwd(ctx, *xs, axis, new_axis):
    full = _join_axis(ctx, new_axis, axis)
    if new_axis:
        return np.stack(xs, axis=full)
    return np.concatenate(xs, axis=full)


def _splice_bwd(ctx, g, y, *xs, axis, new_axis):
    full = _join_axis(ctx, new_axis, axis)
    if new_axis:
        return tuple(np.take(g, i, axis=full) for i in range(len(ctx.node.inputs)))
    sizes = [x.shape[full] for x in ctx.node.inputs]
    cuts = np.cumsum(sizes)[:-1]
    return tuple(np.split(g, cuts, axis=full))


def _join_layouts(ctx, shapes, axis, new_axis):
    """The output shape and, per input, where it lies in the output (a view layout)."""
    from asrkit.kernels.cuda.layout import view_layout

    full = _join_axis(ctx, new_axis, axis)
    first = shapes[0]
    if new_axis:
        out_shape = first[:full] + (len(shapes),) + first[full:]
        keys = [(slice(None),) * full + (i,) for i in range(len(shapes))]
    else:
        out_shape = first[:full] + (sum(s[full] for s in shapes),) + first[full + 1:]
        cuts = np.cumsum([0] + [s[full] for s in shapes])
        keys = [(slice(None),) * full + (slice(int(a), int(b)),) for a, b in zip(cuts, cuts[1:])]
    return out_shape, [view_layout(lambda a, k=k: a[k], out_shape) for k in keys]


def _splice_cuda(ctx, *xs, axis, new_axis):
    from asrkit.kernels.cuda.layout import empty, flat, scatter

    if len({x.dtype for x in xs}) != 1:
        return NotImplemented
    out_shape, lays = _join_layouts(ctx, [tuple(x.shape) for x in xs], axis, new_axis)
    out = empty(out_shape, xs[0].dtype)
    for x, (_, strides, offset) in zip(xs, lays):
        scatter(x, flat(out), strides, offset, accumulate=False)
    return out


def _splice_cuda_bwd(ctx, g, y, *xs, axis, new_axis):
    from asrkit.kernels.cuda.layout import gather

    full = _join_axis(ctx, new_axis, axis)
    gs = tuple(g.shape)
    if new_axis:
        shapes = [gs[:full] + gs[full + 1:]] * len(ctx.node.inputs)
    else:
        shapes = [gs[:full] + (int(i.shape[full]),) + gs[full + 1:] for i in ctx.node.inputs]
    _, lays = _join_layouts(ctx, shapes, axis, new_axis)
    return tuple(gather(g, *lay) for lay in lays)


splice_p = Primitive("splice", ("x0", "x1"), _join_rule, _splice_fwd, _splice_bwd, needs=(),
                     keeps_padding_zero=True, cuda=_splice_cuda, cuda_backward=_splice_cuda_bwd)


def splice(*xs, axis=-1, name=""):
    """Concatenate nodes along static ``axis`` (CNTK's splice)."""
    if len(xs) == 1 and isinstance(xs[0], (list, tuple)):
        xs = tuple(xs[0])
    return bind(splice_p, list(xs), name=name, axis=axis, new_axis=False)


def stack(*xs, axis=0, name=""):
    """Stack equal-shaped nodes along a new static ``axis``."""
    if len(xs) == 1 and isinstance(xs[0], (list, tuple)):
        xs = tuple(xs[0])
    return bind(splice_p, list(xs), name=name, axis=axis, new_axis=True)


concat = splice


def expand_dims(x, axis=-1, name=""):
    """Insert a static axis of size 1 at ``axis`` (counted on the static shape after insertion)."""
    static = list(x.shape[_nd(x):])
    axis = axis % (len(static) + 1)
    static.insert(axis, 1)
    return reshape(x, static, name=name)


def squeeze(x, axis=-1, name=""):
    """Remove static ``axis`` of size 1."""
    full = static_axis(reshape_p, x, axis)
    if x.shape[full] != 1:
        raise reshape_p.error([x], f"cannot squeeze axis {axis} of size {x.shape[full]}")
    static = [d for i, d in enumerate(x.shape) if i >= _nd(x) and i != full]
    return reshape(x, static, name=name)
