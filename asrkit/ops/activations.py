"""Activations of the Conformer: Swish (SiLU) and the gated linear unit.

Swish is a row of the element-wise table (``asrkit.ops.swish``), so it runs and differentiates
on every device the element-wise ops do, in one pass each way. The GLU is a primitive of its
own over the kernels' ``glu``/``glu_backward`` (:mod:`asrkit.kernels.elementwise`): one pass
forward and one backward, where a split, a sigmoid and a product took five and a gradient
assembled from two slices. GELU is a row of the table too (``asrkit.ops.gelu``).
"""

from __future__ import annotations

from asrkit.graph.node import bind
from asrkit.graph.primitive import Primitive, Type
from asrkit.kernels import elementwise as ew
from asrkit.ops._rules import float_dtype, static_axis
from asrkit.ops.elementwise import swish


def _glu_rule(prim, x, axis):
    if not 0 <= axis < len(x.shape) or axis < len(x.dynamic_axes):
        raise prim.error([x], f"axis {axis} is not a static axis")
    full = x.shape[axis]
    if full % 2:
        raise prim.error([x], f"glu needs an even size on axis {axis}; got {full}")
    shape = list(x.shape)
    shape[axis] = full // 2
    return Type(shape, x.dynamic_axes, float_dtype(x))


def _glu_fwd(ctx, x, axis):
    return ew.glu(x, axis, device=ctx.device)


def _glu_bwd(ctx, g, y, x, axis):
    return (ew.glu_backward(g, x, axis, device=ctx.device),)


glu_p = Primitive("glu", ("x",), _glu_rule, _glu_fwd, _glu_bwd, needs=(0,),
                  keeps_padding_zero=True, cuda=_glu_fwd, cuda_backward=_glu_bwd)


def glu(x, axis=-1, name=""):
    """Gated linear unit over static ``axis`` of even size 2C: ``a * sigmoid(b)`` with ``a``
    the first C entries and ``b`` the last (torch.nn.functional.glu)."""
    return bind(glu_p, [x], name=name, axis=static_axis(glu_p, x, axis))


__all__ = ["glu", "swish"]
