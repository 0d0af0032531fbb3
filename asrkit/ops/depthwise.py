"""Depthwise convolution over time: one kernel per channel (the Conformer's convolution module).

``depthwise_conv1d(x, W)`` is torch's ``Conv1d(C, C, K, groups=C, padding=(K-1)//2, bias=False)``
on ``[T, B, C]`` sequences (``padding="causal"``: only past frames, for streaming). Taps past a
sequence's end read zeros, as the engine keeps padding zero: the output of a sequence never
depends on what follows it in the batch. Kernels: :mod:`asrkit.kernels.cpu.conv` and the CUDA
ones, twins of :mod:`asrkit.kernels.reference.conv`.
"""

from __future__ import annotations

from asrkit.graph.node import bind
from asrkit.graph.primitive import Primitive, Type
from asrkit.kernels._device import kernel
from asrkit.ops._rules import float_dtype, require_sequence


def _left(K, padding):
    return K - 1 if padding == "causal" else (K - 1) // 2


def _rule(prim, x, W, padding="same"):
    require_sequence(prim, x)
    if len(x.shape) != 3:
        raise prim.error([x, W], "x must be [T, B, channels]")
    if W.dynamic_axes or len(W.shape) != 2 or W.shape[1] != x.shape[2]:
        raise prim.error([x, W], f"W must be a static [K, {x.shape[2]}] tensor")
    if padding not in ("same", "causal"):
        raise prim.error([x, W], f"padding must be 'same' or 'causal'; got {padding!r}")
    return Type(x.shape, x.dynamic_axes, float_dtype(x, W))


def _fwd(ctx, x, W, padding="same"):
    return kernel("conv", "depthwise_conv1d", ctx.device)(x, W, _left(W.shape[0], padding))


def _bwd(ctx, g, y, x, W, padding="same"):
    return kernel("conv", "depthwise_conv1d_backward", ctx.device)(g, x, W,
                                                                   _left(W.shape[0], padding))


depthwise_conv1d_p = Primitive("depthwise_conv1d", ("x", "W"), _rule, _fwd, _bwd, needs=(0, 1),
                               cuda=_fwd, cuda_backward=_bwd)


def depthwise_conv1d(x, W, padding="same", name=""):
    """``x [T, B, C]``, ``W [K, C]`` -> ``[T, B, C]``: ``y[t, c] = sum_k x[t - P + k, c] W[k, c]``
    with ``P = (K-1)//2`` ('same') or ``K-1`` ('causal'). torch's depthwise ``weight [C, 1, K]``
    is ``W.T`` with the middle axis dropped. Add a bias separately."""
    return bind(depthwise_conv1d_p, [x, W], name=name, padding=padding)


__all__ = ["depthwise_conv1d"]
