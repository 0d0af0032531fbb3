"""2-D convolution over (time, feature) of ``[T, B, F, C]`` sequences: the Conv2d subsampling
front end of ESPnet/icefall Conformers.

No padding in either axis (torch's ``Conv2d(padding=0)``): a sequence of length L keeps
``floor((L - Kt) / st) + 1`` frames, as ESPnet's ``Conv2dSubsampling`` masks them. Output frames
within a sequence's length read only its own frames. The convolution is a GEMM over the windows
of :mod:`asrkit.kernels.reference.conv` (``unfold2d``/``fold2d``; numpy's or cuBLAS's GEMM).
"""

from __future__ import annotations

import numpy as np

from asrkit.graph.node import bind
from asrkit.graph.primitive import Primitive, Type
from asrkit.kernels._device import kernel
from asrkit.kernels.reference.conv import windows2d
from asrkit.ops._rules import derived_axis, float_dtype, require_sequence


def _rule(prim, x, W, stride=(1, 1)):
    require_sequence(prim, x)
    if len(x.shape) != 4:
        raise prim.error([x, W], "x must be [T, B, F, channels]")
    if W.dynamic_axes or len(W.shape) != 4 or W.shape[2] != x.shape[3]:
        raise prim.error([x, W], f"W must be a static [Kt, Kf, {x.shape[3]}, out] tensor")
    (Kt, Kf), (st, sf) = W.shape[:2], stride
    if min(Kt, Kf, st, sf) < 1:
        raise prim.error([x, W], "kernel sizes and strides must be >= 1")
    Fo = windows2d(0, x.shape[2], 0, Kf, 1, sf)[1]
    if Fo < 1:
        raise prim.error([x, W], f"{x.shape[2]} bins are fewer than the kernel's {Kf}")
    axes = x.dynamic_axes if (Kt, st) == (1, 1) else (
        derived_axis(x.seq_axis, f"k{Kt}s{st}valid"), x.dynamic_axes[1])
    return Type((None, None, Fo, W.shape[3]), axes, float_dtype(x, W))


def _lengths(ctx, x, W, stride=(1, 1)):
    Kt, st = W.shape[0], stride[0]
    L = np.asarray(ctx.in_lengths[0], np.int64)
    return np.where(L >= Kt, (L - Kt) // st + 1, 0).astype(np.int32)


def _gemm(ctx):
    if ctx.device == "cuda":
        from asrkit.kernels.cuda.gemm import gemm

        return gemm
    return lambda a, b, trans_a=False, trans_b=False: (a.T if trans_a else a) @ (
        b.T if trans_b else b)


def _fwd(ctx, x, W, stride=(1, 1)):
    Kt, Kf, C, O = W.shape
    cols = kernel("conv", "unfold2d", ctx.device)(x, Kt, Kf, *stride)  # [T', B, F', Kt, Kf, C]
    To, B, Fo = cols.shape[:3]
    n = To * B * Fo
    if n == 0:
        return np.zeros((To, B, Fo, O), np.result_type(x.dtype, W.dtype)) \
            if ctx.device != "cuda" else NotImplemented
    return _gemm(ctx)(cols.reshape((n, Kt * Kf * C)), W.reshape((Kt * Kf * C, O))).reshape(
        (To, B, Fo, O))


def _bwd(ctx, g, y, x, W, stride=(1, 1)):
    Kt, Kf, C, O = W.shape
    T, B, F = x.shape[:3]
    To, _, Fo = g.shape[:3]
    n = To * B * Fo
    if n == 0 and ctx.device == "cuda":
        return NotImplemented
    g2 = g.reshape((n, O))
    gx = gW = None
    if ctx.needs_grad[1]:
        cols = kernel("conv", "unfold2d", ctx.device)(x, Kt, Kf, *stride)
        gW = _gemm(ctx)(cols.reshape((n, Kt * Kf * C)), g2, trans_a=True).reshape(W.shape)
    if ctx.needs_grad[0]:
        gcols = _gemm(ctx)(g2, W.reshape((Kt * Kf * C, O)), trans_b=True)
        gx = kernel("conv", "fold2d", ctx.device)(gcols.reshape((To, B, Fo, Kt, Kf, C)), T, F,
                                                  *stride)
    return gx, gW


conv2d_p = Primitive("conv2d", ("x", "W"), _rule, _fwd, _bwd, lengths_rule=_lengths,
                     needs=(0, 1), cuda=_fwd, cuda_backward=_bwd)


def conv2d(x, W, stride=(1, 1), name=""):
    """Valid 2-D convolution: ``x [T, B, F, C]`` (sequence), ``W [Kt, Kf, C, O]`` ->
    ``[T', B, F', O]`` with ``T' = (T - Kt) // st + 1``, ``F' = (F - Kf) // sf + 1``.

    ``y[t', f'] = sum_{i,j} x[t'*st + i, f'*sf + j] @ W[i, j]`` (cross-correlation, as
    torch.nn.Conv2d on ``[B, C, T, F]``, whose ``weight [O, C, Kt, Kf]`` is ``W`` transposed
    ``(3, 2, 0, 1)``). Add a bias separately.
    """
    st, sf = (stride, stride) if np.isscalar(stride) else stride
    return bind(conv2d_p, [x, W], name=name, stride=(int(st), int(sf)))


__all__ = ["conv2d"]
