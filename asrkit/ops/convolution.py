"""1-D convolution and pooling over time (TDNN layers, subsampling front-ends).

Both honour lengths: output lengths follow from each sequence's own length (``'same'``:
``ceil(L / stride)``; ``'valid'``: ``floor((L - dilation*(K-1) - 1) / stride) + 1``), taps past a
sequence's end read zeros (convolution) or are skipped (pooling). The window kernels
(:mod:`asrkit.kernels.reference.windows`, ``asrkit.kernels.cuda.windows``) serve both devices;
the convolution is a GEMM over the gathered windows (numpy's or cuBLAS's).
"""

from __future__ import annotations

import numpy as np

from asrkit.graph.node import bind
from asrkit.graph.primitive import Primitive, Type
from asrkit.kernels._device import kernel
from asrkit.kernels.reference.windows import out_lengths, window_geometry
from asrkit.ops._rules import derived_axis, float_dtype, require_sequence


def _axis_after(x, K, stride, dilation, padding):
    same_len = stride == 1 and (padding == "same" or padding == "causal" or
                                (K == 1 and padding in ("valid", 0)))
    if same_len:
        return x.dynamic_axes
    return (derived_axis(x.seq_axis, f"k{K}s{stride}d{dilation}{padding}"), x.dynamic_axes[1])


def _check_window(prim, nodes, K, stride, dilation, padding):
    if K < 1 or stride < 1 or dilation < 1:
        raise prim.error(nodes, f"kernel size {K}, stride {stride} and dilation {dilation} must "
                         "be >= 1")
    if padding not in ("same", "valid", "causal") and not isinstance(padding, int):
        raise prim.error(nodes, f"padding must be 'same', 'valid', 'causal' or an int; got "
                         f"{padding!r}")


def _conv_rule(prim, x, W, stride=1, dilation=1, padding="same"):
    require_sequence(prim, x)
    if len(x.shape) != 3:
        raise prim.error([x, W], "x must be [T, B, channels]")
    if W.dynamic_axes or len(W.shape) != 3:
        raise prim.error([x, W], "W must be a static [K, in_channels, out_channels] tensor")
    if W.shape[1] != x.shape[-1]:
        raise prim.error([x, W], f"input channels {x.shape[-1]} and W's {W.shape[1]} differ")
    _check_window(prim, [x, W], W.shape[0], stride, dilation, padding)
    return Type((None, None, W.shape[2]), _axis_after(x, W.shape[0], stride, dilation, padding),
                float_dtype(x, W))


def _conv_lengths(ctx, x, W, stride=1, dilation=1, padding="same"):
    return out_lengths(ctx.in_lengths[0], W.shape[0], stride, dilation, padding)


def _windows(ctx, name):
    return kernel("windows", name, ctx.device)


def _gemm(ctx):
    """``gemm(a, b, trans_a, trans_b)`` of the run's device."""
    if ctx.device == "cuda":
        from asrkit.kernels.cuda.gemm import gemm

        return gemm
    return lambda a, b, trans_a=False, trans_b=False: (a.T if trans_a else a) @ (
        b.T if trans_b else b)


def _conv_fwd(ctx, x, W, stride=1, dilation=1, padding="same"):
    if ctx.device == "cuda" and x.dtype != W.dtype:
        return NotImplemented
    K, C, O = W.shape
    left, T_out = window_geometry(x.shape[0], K, stride, dilation, padding)
    cols = _windows(ctx, "gather_windows")(x, K, stride, dilation, left, T_out)  # [T', B, K, C]
    B = x.shape[1]
    if T_out * B == 0:
        return _empty(ctx, (T_out, B, O), x.dtype)
    return _gemm(ctx)(cols.reshape((T_out * B, K * C)), W.reshape((K * C, O))).reshape(
        (T_out, B, O))


def _empty(ctx, shape, dtype):
    if ctx.device == "cuda":
        from asrkit.kernels.cuda.layout import zeros

        return zeros(shape, dtype)
    return np.zeros(shape, dtype)


def _conv_bwd(ctx, g, y, x, W, stride=1, dilation=1, padding="same"):
    K, C, O = W.shape
    T = x.shape[0]
    T_out, B = g.shape[:2]
    if ctx.device == "cuda" and T_out * B == 0:
        return NotImplemented
    left, _ = window_geometry(T, K, stride, dilation, padding)
    g2 = g.reshape((T_out * B, O))
    gx = gW = None
    if ctx.needs_grad[1]:
        cols = _windows(ctx, "gather_windows")(x, K, stride, dilation, left, T_out)
        gW = _gemm(ctx)(cols.reshape((T_out * B, K * C)), g2, trans_a=True).reshape((K, C, O))
    if ctx.needs_grad[0]:
        gcols = _gemm(ctx)(g2, W.reshape((K * C, O)), trans_b=True).reshape((T_out, B, K, C))
        gx = _windows(ctx, "scatter_windows")(gcols, T, K, stride, dilation, left)
    return gx, gW


conv1d_p = Primitive("conv1d", ("x", "W"), _conv_rule, _conv_fwd, _conv_bwd,
                     lengths_rule=_conv_lengths, needs=(0, 1), cuda=_conv_fwd,
                     cuda_backward=_conv_bwd)


def conv1d(x, W, stride=1, dilation=1, padding="same", name=""):
    """Convolution over time: ``x [T, B, C]`` (sequence), ``W [K, C, O]`` -> ``[T', B, O]``.

    padding: 'same' (centred, ``T' = ceil(T / stride)``), 'causal' (only past frames),
    'valid' (no padding) or an int of left-padding frames. ``y[t'] = sum_k x[t'*stride - P +
    k*dilation] @ W[k]`` (cross-correlation, as torch.nn.Conv1d). Add a bias separately.
    """
    return bind(conv1d_p, [x, W], name=name, stride=int(stride), dilation=int(dilation),
                padding=padding)


# -- pooling ---------------------------------------------------------------------------------
def _pool_rule(prim, x, kind="max", size=2, stride=None, padding="valid"):
    require_sequence(prim, x)
    if kind not in ("max", "avg"):
        raise prim.error([x], f"pooling kind must be 'max' or 'avg'; got {kind!r}")
    stride = size if stride is None else stride
    _check_window(prim, [x], size, stride, 1, padding)
    return Type(x.shape, _axis_after(x, size, stride, 1, padding), float_dtype(x))


def _pool_lengths(ctx, x, kind="max", size=2, stride=None, padding="valid"):
    return out_lengths(ctx.in_lengths[0], size, stride or size, 1, padding)


def _pool_fwd(ctx, x, kind="max", size=2, stride=None, padding="valid"):
    if ctx.device == "cuda" and x.dtype.kind != "f":
        return NotImplemented
    left, T_out = window_geometry(x.shape[0], size, stride or size, 1, padding)
    return _windows(ctx, "pool1d")(x, ctx.in_lengths[0], kind, size, stride or size, left, T_out)


def _pool_bwd(ctx, g, y, x, kind="max", size=2, stride=None, padding="valid", state=None):
    left, _ = window_geometry(x.shape[0], size, stride or size, 1, padding)
    return (_windows(ctx, "pool1d_backward")(g, state, ctx.in_lengths[0], x.shape[0], kind,
                                             size, stride or size, left),)


pool1d_p = Primitive("pool1d", ("x",), _pool_rule, _pool_fwd, _pool_bwd, needs=(0,),
                     lengths_rule=_pool_lengths, stateful=True, cuda=_pool_fwd,
                     cuda_backward=_pool_bwd)


def max_pool1d(x, size=2, stride=None, padding="valid", name=""):
    """Max over windows of ``size`` frames every ``stride`` (default ``size``) frames."""
    return bind(pool1d_p, [x], name=name, kind="max", size=int(size),
                stride=int(stride or size), padding=padding)


def avg_pool1d(x, size=2, stride=None, padding="valid", name=""):
    """Mean over windows of ``size`` frames, counting only real (non-padding) frames."""
    return bind(pool1d_p, [x], name=name, kind="avg", size=int(size),
                stride=int(stride or size), padding=padding)


__all__ = ["avg_pool1d", "conv1d", "max_pool1d", "window_geometry"]
