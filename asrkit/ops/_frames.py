"""Windowed views over time shared by convolution, pooling and frame stacking.

A window op with ``K`` taps, dilation ``d``, stride ``s`` and left padding ``P`` reads, for output
frame ``t'``, the input frames ``t' * s - P + k * d`` (k = 0..K-1). Frames outside ``[0, T)`` are
zeros (and, since padding frames are zero too, so is anything past a sequence's end).
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


def gather_windows(x, K, stride, dilation, padding):
    """``x [T, B, ...] -> cols [T', B, K, ...]``: the K input frames each output frame reads."""
    T = x.shape[0]
    left, T_out = window_geometry(T, K, stride, dilation, padding)
    need = (T_out - 1) * stride + dilation * (K - 1) + 1 if T_out else 0
    right = max(need - left - T, 0)
    xp = np.zeros((left + T + right,) + x.shape[1:], x.dtype)
    xp[left:left + T] = x
    cols = np.empty((T_out, x.shape[1], K) + x.shape[2:], x.dtype)
    for k in range(K):
        start = k * dilation
        cols[:, :, k] = xp[start:start + stride * (T_out - 1) + 1:stride]
    return cols


def scatter_windows(gcols, T, K, stride, dilation, padding):
    """Adjoint of gather_windows: ``gcols [T', B, K, ...] -> g [T, B, ...]`` (sums overlaps)."""
    T_out = gcols.shape[0]
    left, _ = window_geometry(T, K, stride, dilation, padding)
    need = (T_out - 1) * stride + dilation * (K - 1) + 1 if T_out else 0
    right = max(need - left - T, 0)
    gp = np.zeros((left + T + right,) + gcols.shape[1:2] + gcols.shape[3:], gcols.dtype)
    for k in range(K):
        start = k * dilation
        gp[start:start + stride * (T_out - 1) + 1:stride] += gcols[:, :, k]
    return gp[left:left + T]


def window_validity(lengths, T, K, stride, dilation, padding) -> np.ndarray:
    """``bool [T', B, K]``: tap k of output frame t' reads a real frame of sequence b."""
    left, T_out = window_geometry(T, K, stride, dilation, padding)
    src = np.arange(T_out)[:, None] * stride - left + np.arange(K)[None, :] * dilation
    return (src[:, None, :] >= 0) & (src[:, None, :] < np.asarray(lengths)[None, :, None])
