"""Matrix products: ``times`` (affine maps, as CNTK's times) and batched ``matmul``."""

from __future__ import annotations

import numpy as np

from asrkit.graph.broadcast import broadcast_type
from asrkit.graph.node import bind
from asrkit.graph.primitive import Primitive, Type
from asrkit.kernels._device import kernel
from asrkit.ops._rules import float_dtype


def _times_rule(prim, x, W):
    if W.dynamic_axes:
        raise prim.error([x, W], "W must be static (a parameter or constant); for products of "
                         "two dynamic nodes use matmul")
    if len(W.shape) not in (1, 2):
        raise prim.error([x, W], "W must be a vector [in] or a matrix [in, out]")
    if len(x.shape) - len(x.dynamic_axes) < 1:
        raise prim.error([x, W], "x needs a static last axis to contract")
    if x.shape[-1] != W.shape[0]:
        raise prim.error([x, W], f"inner dimensions {x.shape[-1]} and {W.shape[0]} differ")
    return Type(x.shape[:-1] + W.shape[1:], x.dynamic_axes, float_dtype(x, W))


def _times_fwd(ctx, x, W, out=None):
    # One GEMM over the folded leading axes (numpy would run [T, B, I] @ [I, O] as T small
    # ones); on the cpu one per sequence over its valid frames (kernels/cpu/linalg.py).
    return kernel("linalg", "times", ctx.device)(x, W, ctx.in_lengths[0], out)


def _times_bwd(ctx, g, y, x, W):
    return kernel("linalg", "times_backward", ctx.device)(g, x, W, ctx.in_lengths[0],
                                                           tuple(ctx.needs_grad))


def _rows(a):
    """A contiguous device array as ``[rows, last axis]``."""
    from asrkit.kernels.cuda.layout import contiguous

    k = int(tuple(a.shape)[-1])
    return contiguous(a).reshape((a.size // k if k else int(np.prod(a.shape[:-1])), k))


def _times_cuda(ctx, x, W):
    from asrkit.kernels.cuda.gemm import gemm

    if W.ndim != 2 or x.dtype != W.dtype or x.dtype.kind != "f":
        return NotImplemented
    return gemm(_rows(x), W).reshape(tuple(x.shape)[:-1] + (int(W.shape[1]),))


def _times_cuda_bwd(ctx, g, y, x, W):
    from asrkit.kernels.cuda.gemm import gemm

    if W.ndim != 2:
        return NotImplemented
    g2 = _rows(g)
    gx = gemm(g2, W, trans_b=True).reshape(tuple(x.shape)) if ctx.needs_grad[0] else None
    gW = gemm(_rows(x), g2, trans_a=True) if ctx.needs_grad[1] else None
    return gx, gW


times_p = Primitive("times", ("x", "W"), _times_rule, _times_fwd, _times_bwd, needs=(0, 1),
                    keeps_padding_zero=True, out_shape=lambda x, W: x.shape[:-1] + W.shape[1:],
                    cuda=_times_cuda, cuda_backward=_times_cuda_bwd)


def times(x, W, name=""):
    """Affine map over the last axis: ``x [..., in] @ W [in, out] -> [..., out]``.

    ``W`` may be a vector ``[in]`` (the output drops the axis). This is ``x @ W``.
    """
    return bind(times_p, [x, W], name=name)


def _matmul_rule(prim, a, b):
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise prim.error([a, b], "matmul needs rank >= 2 on both sides ([..., n, k] @ [..., k, m])")
    if any(d is None for d in (a.shape[-1], a.shape[-2], b.shape[-1], b.shape[-2])):
        raise prim.error([a, b], "the two matrix axes must be static")
    if a.shape[-1] != b.shape[-2]:
        raise prim.error([a, b], f"inner dimensions {a.shape[-1]} and {b.shape[-2]} differ")

    class _Lead:  # broadcast the batch dims with the shared rule
        def __init__(self, n):
            self.shape, self.dynamic_axes, self.dtype = n.shape[:-2], n.dynamic_axes, n.dtype
    lead = broadcast_type(prim, _Lead(a), _Lead(b))
    return Type(lead.shape + (a.shape[-2], b.shape[-1]), lead.dynamic_axes, float_dtype(a, b))


def _matmul_bwd(ctx, g, y, a, b):
    ga = g @ np.swapaxes(b, -1, -2) if ctx.needs_grad[0] else None
    gb = np.swapaxes(a, -1, -2) @ g if ctx.needs_grad[1] else None
    return ga, gb


matmul_p = Primitive("matmul", ("a", "b"), _matmul_rule,
                     lambda ctx, a, b, out=None: np.matmul(a, b, out=out), _matmul_bwd,
                     needs=(0, 1), keeps_padding_zero=True,
                     out_shape=lambda a, b: np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
                     + (a.shape[-2], b.shape[-1]),
                     # against a matrix, ``[..., n, k] @ [k, m]`` is times over the folded rows
                     cuda=_times_cuda, cuda_backward=_times_cuda_bwd)


def matmul(a, b, name=""):
    """Batched matrix product with numpy semantics: ``[..., n, k] @ [..., k, m] -> [..., n, m]``."""
    return bind(matmul_p, [a, b], name=name)
