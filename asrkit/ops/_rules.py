"""Shape-rule helpers shared by the op modules."""

from __future__ import annotations

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
