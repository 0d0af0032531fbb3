"""Helpers shared by the op modules: shape rules, the device path of view ops, error names."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from asrkit.graph.primitive import Type


def float_dtype(*nodes):
    """The float dtype of an op's result: the inputs' float type, float32 for integer inputs."""
    dt = np.result_type(*[n.dtype for n in nodes])
    return dt if dt.kind == "f" else np.dtype(np.float32)


def same_type(prim, x, **attrs) -> Type:
    """Output has the input's shape and dynamic axes (and a float dtype)."""
    return Type(x.shape, x.dynamic_axes, float_dtype(x))


def static_axis(prim, x, axis: int) -> int:
    """Map ``axis`` (an index into the static shape, negative from the end) to an array axis."""
    nd = len(x.dynamic_axes)
    rank = len(x.shape) - nd
    if not isinstance(axis, (int, np.integer)) or not -rank <= axis < rank:
        raise prim.error([x], f"axis {axis} is not a static axis (the node has {rank} static "
                         f"axes; dynamic axes {x.dynamic_axes} are reduced by sequence ops)")
    return nd + (axis % rank)


def derived_axis(axis: str, tag: str) -> str:
    """Name of a sequence axis whose lengths an op changed (stride, valid conv, stacking)."""
    return f"{axis}|{tag}"


def require_sequence(prim, x, what="x"):
    """Raise unless ``x`` is a ``[T, B, ...]`` sequence node."""
    if not x.is_sequence:
        raise prim.error([x], f"{what} must be a sequence [*, *, ...] (dynamic axes (seq, batch))"
                         f"; got dynamic axes {x.dynamic_axes}")


# -- on the device -----------------------------------------------------------------------------
def _input_shape(ctx, x, g):
    """Input 0's runtime shape: its array when kept, else its static shape with the dynamic
    (leading) axes taken from ``g``."""
    if x is not None:
        return tuple(x.shape)
    return tuple(int(g.shape[i]) if d is None else int(d)
                 for i, d in enumerate(ctx.node.inputs[0].shape))


def view_cuda(forward) -> dict:
    """``{"cuda": ..., "cuda_backward": ...}`` of a view op (``Primitive(..., **view_cuda(f))``):
    the layout of its numpy ``forward`` replayed on the device (a strided gather; the backward
    scatters into zeros)."""
    def layout(ctx, shape, attrs):
        from asrkit.kernels.cuda.layout import view_layout

        return view_layout(lambda a: forward(ctx, a, **attrs), shape)

    def fwd(ctx, x, **attrs):
        from asrkit.kernels.cuda.layout import gather

        lay = layout(ctx, tuple(x.shape), attrs)
        return NotImplemented if lay is None else gather(x, *lay)

    def bwd(ctx, g, y, x, **attrs):
        from asrkit.kernels.cuda.layout import flat, scatter, zeros

        shape = _input_shape(ctx, x, g)
        lay = layout(ctx, shape, attrs)
        if lay is None:
            return NotImplemented
        _, strides, offset = lay
        gx = zeros(shape, g.dtype)
        scatter(g, flat(gx), strides, offset, accumulate=0 in strides)
        return (gx,)
    return {"cuda": fwd, "cuda_backward": bwd}


@contextmanager
def errors_name(ctx):
    """Prefix a kernel's ValueError with the node it ran for (``op 'name': ...``)."""
    try:
        yield
    except ValueError as e:
        raise ValueError(f"{ctx.where()}: {e}") from None
