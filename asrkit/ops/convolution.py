"""1-D convolution and pooling over time (TDNN layers, subsampling front-ends).

Both honour lengths: output lengths follow from each sequence's own length (``'same'``:
``ceil(L / stride)``; ``'valid'``: ``floor((L - dilation*(K-1) - 1) / stride) + 1``), taps past a
sequence's end read zeros (convolution) or are skipped (pooling).
"""

from __future__ import annotations

import numpy as np

from asrkit.graph.node import bind
from asrkit.graph.primitive import Primitive, Type
from asrkit.ops._frames import (
    gather_windows,
    out_lengths,
    scatter_windows,
    window_geometry,
    window_validity,
)
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


def _conv_fwd(ctx, x, W, stride=1, dilation=1, padding="same"):
    K, C, O = W.shape
    cols = gather_windows(x, K, stride, dilation, padding)  # [T', B, K, C]
    T_out, B = cols.shape[:2]
    return (cols.reshape(T_out * B, K * C) @ W.reshape(K * C, O)).reshape(T_out, B, O)


def _conv_bwd(ctx, g, y, x, W, stride=1, dilation=1, padding="same"):
    K, C, O = W.shape
    T_out, B = g.shape[:2]
    g2 = g.reshape(T_out * B, O)
    gx = gW = None
    if ctx.needs_grad[1]:
        cols = gather_windows(x, K, stride, dilation, padding)
        gW = (cols.reshape(T_out * B, K * C).T @ g2).reshape(K, C, O)
    if ctx.needs_grad[0]:
        gcols = (g2 @ W.reshape(K * C, O).T).reshape(T_out, B, K, C)
        gx = scatter_windows(gcols, x.shape[0], K, stride, dilation, padding)
    return gx, gW


conv1d_p = Primitive("conv1d", ("x", "W"), _conv_rule, _conv_fwd, _conv_bwd,
                     lengths_rule=_conv_lengths, needs=(0, 1))


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
    stride = stride or size
    cols = gather_windows(x, size, stride, 1, padding)  # [T', B, K, ...]
    valid = window_validity(ctx.in_lengths[0], x.shape[0], size, stride, 1, padding)
    valid = valid.reshape(valid.shape + (1,) * (x.ndim - 2))
    if kind == "max":
        z = np.where(valid, cols, -np.inf)
        arg = np.argmax(z, axis=2)
        y = np.take_along_axis(cols, arg[:, :, None], axis=2)[:, :, 0]
        any_valid = valid.any(axis=2)
        return np.where(any_valid, y, 0).astype(x.dtype), (arg, None)
    count = np.maximum(valid.sum(axis=2), 1)
    return (np.where(valid, cols, 0).sum(axis=2) / count).astype(x.dtype), (None, count)


def _pool_bwd(ctx, g, y, x, kind="max", size=2, stride=None, padding="valid", state=None):
    stride = stride or size
    arg, count = state
    valid = window_validity(ctx.in_lengths[0], x.shape[0], size, stride, 1, padding)
    valid = valid.reshape(valid.shape + (1,) * (x.ndim - 2))
    if kind == "max":
        taps = np.arange(size).reshape((1, 1, size) + (1,) * (x.ndim - 2))
        gcols = np.where((taps == arg[:, :, None]) & valid, g[:, :, None], 0)
    else:
        gcols = np.where(valid, (g / count)[:, :, None], 0)
    return (scatter_windows(gcols.astype(g.dtype), x.shape[0], size, stride, 1, padding),)


pool1d_p = Primitive("pool1d", ("x",), _pool_rule, _pool_fwd, _pool_bwd, needs=(0,),
                     lengths_rule=_pool_lengths, stateful=True)


def max_pool1d(x, size=2, stride=None, padding="valid", name=""):
    """Max over windows of ``size`` frames every ``stride`` (default ``size``) frames."""
    return bind(pool1d_p, [x], name=name, kind="max", size=int(size),
                stride=int(stride or size), padding=padding)


def avg_pool1d(x, size=2, stride=None, padding="valid", name=""):
    """Mean over windows of ``size`` frames, counting only real (non-padding) frames."""
    return bind(pool1d_p, [x], name=name, kind="avg", size=int(size),
                stride=int(stride or size), padding=padding)


__all__ = ["avg_pool1d", "conv1d", "max_pool1d", "window_geometry"]
