"""Windows over time: the numpy kernels of convolution, pooling and frame stacking.

A window op with ``K`` taps, dilation ``d``, stride ``s`` and left padding ``P`` reads, for output
frame ``t'``, the input frames ``t' * s - P + k * d`` (k = 0..K-1). Frames outside ``[0, T)`` are
zeros (and, since padding frames are zero too, so is anything past a sequence's end). These are
the CPU path of the ops and the twins of :mod:`asrkit.kernels.cuda.windows`.
"""

from __future__ import annotations

import numpy as np


def window_geometry(T: int, K: int, stride: int, dilation: int, padding) -> tuple[int, int]:
    """Return ``(left_pad, T_out)`` for ``padding`` in 'same' | 'valid' | 'causal' | int."""
    span = dilation * (K - 1)
    if padding == "same":
        left = span // 2
        return left, -(-T // stride)
    if padding == "causal":
        return span, -(-T // stride)
    if padding == "valid":
        return 0, max((T - span - 1) // stride + 1, 0) if T > span else 0
    left = int(padding)
    return left, max((T + left - span - 1) // stride + 1, 0) if T + left > span else 0


def out_lengths(lengths, K, stride, dilation, padding) -> np.ndarray:
    """Output lengths ``int32[B]`` of a window op on sequences of ``lengths``."""
    return np.array([window_geometry(int(n), K, stride, dilation, padding)[1] for n in lengths],
                    np.int32)


def _padded_length(T, K, stride, dilation, left, T_out):
    need = (T_out - 1) * stride + dilation * (K - 1) + 1 if T_out else 0
    return left + T + max(need - left - T, 0)


def gather_windows(x, K, stride, dilation, left, T_out):
    """``x [T, B, ...] -> cols [T_out, B, K, ...]``: the K input frames each output frame reads
    (``left`` frames of zeros before ``x``, as many as needed after it)."""
    T = x.shape[0]
    xp = np.zeros((_padded_length(T, K, stride, dilation, left, T_out),) + x.shape[1:], x.dtype)
    xp[left:left + T] = x
    cols = np.empty((T_out, x.shape[1], K) + x.shape[2:], x.dtype)
    for k in range(K):
        start = k * dilation
        cols[:, :, k] = xp[start:start + stride * (T_out - 1) + 1:stride]
    return cols


def scatter_windows(gcols, T, K, stride, dilation, left):
    """Adjoint of :func:`gather_windows`: ``gcols [T', B, K, ...] -> g [T, B, ...]`` (sums
    overlaps)."""
    T_out = gcols.shape[0]
    gp = np.zeros((_padded_length(T, K, stride, dilation, left, T_out),) + gcols.shape[1:2]
                  + gcols.shape[3:], gcols.dtype)
    for k in range(K):
        start = k * dilation
        gp[start:start + stride * (T_out - 1) + 1:stride] += gcols[:, :, k]
    return gp[left:left + T]


def window_validity(lengths, K, stride, dilation, left, T_out) -> np.ndarray:
    """``bool [T_out, B, K]``: tap k of output frame t' reads a real frame of sequence b."""
    src = np.arange(T_out)[:, None] * stride - left + np.arange(K)[None, :] * dilation
    return (src[:, None, :] >= 0) & (src[:, None, :] < np.asarray(lengths)[None, :, None])


def pool1d(x, lengths, kind, size, stride, left, T_out):
    """Max or mean (``kind``) over windows of ``size`` real frames: ``x [T, B, ...] ->
    (y [T_out, B, ...], state)``; taps on padding are skipped, windows without a real frame
    give 0. ``state`` is what :func:`pool1d_backward` needs."""
    cols = gather_windows(x, size, stride, 1, left, T_out)  # [T', B, K, ...]
    valid = window_validity(lengths, size, stride, 1, left, T_out)
    valid = valid.reshape(valid.shape + (1,) * (x.ndim - 2))
    if kind == "max":
        arg = np.argmax(np.where(valid, cols, -np.inf), axis=2)
        y = np.take_along_axis(cols, arg[:, :, None], axis=2)[:, :, 0]
        return np.where(valid.any(axis=2), y, 0).astype(x.dtype), arg
    count = np.maximum(valid.sum(axis=2), 1)
    return (np.where(valid, cols, 0).sum(axis=2) / count).astype(x.dtype), count


def pool1d_backward(g, state, lengths, T, kind, size, stride, left):
    """Gradient of :func:`pool1d`: ``g [T', B, ...] -> [T, B, ...]``."""
    T_out = g.shape[0]
    valid = window_validity(lengths, size, stride, 1, left, T_out)
    valid = valid.reshape(valid.shape + (1,) * (g.ndim - 2))
    if kind == "max":
        taps = np.arange(size).reshape((1, 1, size) + (1,) * (g.ndim - 2))
        gcols = np.where((taps == state[:, :, None]) & valid, g[:, :, None], 0)
    else:
        gcols = np.where(valid, (g / state)[:, :, None], 0)
    return scatter_windows(gcols.astype(g.dtype), T, size, stride, 1, left)
