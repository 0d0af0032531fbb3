"""The Conformer's depthwise convolution over time on the CPU: numba kernels over blocks of
frames, one block per kernel thread (``_gemm.row_blocks``).

Same signatures and results as the numpy twin :mod:`asrkit.kernels.reference.conv` (which
makes K passes over the whole ``[T, B, C]`` array, one per tap): here each output row
``[t, b, :]`` is summed over its K taps in registers and written once, and the weight gradient
is summed per block of frames in the input dtype and added into float64 partial sums every
:data:`FLUSH_FRAMES` frames. The input gradient is the same kernel run on ``g`` with the taps
reversed. The 2-D windows of the subsampling front end keep the twin (they are a copy).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from asrkit.kernels.cpu._gemm import row_blocks, run_blocks
from asrkit.kernels.reference import conv as ref

_OPTS = {"cache": True, "nogil": True, "error_model": "numpy", "fastmath": {"contract"}}
FLUSH_FRAMES = 32  # frames summed in the input dtype before a float64 partial takes them


@njit(**_OPTS)
def _conv_rows(x, w, left, y, t0, t1):
    """``y[t, b, c] = sum_k x[t - left + k, b, c] * w[k, c]`` for frames t0..t1."""
    T, B, C = x.shape
    K = w.shape[0]
    acc = np.empty(C, y.dtype)
    for t in range(t0, t1):
        k0 = max(0, left - t)
        k1 = min(K, T + left - t)
        for b in range(B):
            acc[:] = 0
            for k in range(k0, k1):
                s = t - left + k
                for c in range(C):
                    acc[c] += x[s, b, c] * w[k, c]
            for c in range(C):
                y[t, b, c] = acc[c]


@njit(**_OPTS)
def _weight_grad_rows(x, g, left, K, gw, t0, t1):
    """``gw[k, c] += sum_{t, b} x[t - left + k, b, c] * g[t, b, c]`` over frames t0..t1 into
    the float64 ``gw [K, C]``."""
    T, B, C = x.shape
    acc = np.zeros((K, C), x.dtype)
    for f0 in range(t0, t1, FLUSH_FRAMES):
        for t in range(f0, min(f0 + FLUSH_FRAMES, t1)):
            k0 = max(0, left - t)
            k1 = min(K, T + left - t)
            for b in range(B):
                for k in range(k0, k1):
                    s = t - left + k
                    for c in range(C):
                        acc[k, c] += x[s, b, c] * g[t, b, c]
        for k in range(K):
            for c in range(C):
                gw[k, c] += acc[k, c]
                acc[k, c] = 0


def _dtype(*arrays):
    dt = np.result_type(*arrays)
    return dt if dt in (np.float32, np.float64) else np.dtype(np.float32)


def _conv(x, w, left):
    y = np.empty(x.shape, x.dtype)
    T, B, C = x.shape
    run_blocks(lambda t0, t1: _conv_rows(x, w, left, y, t0, t1),
               row_blocks(T, B * C * w.shape[0]))
    return y


def depthwise_conv1d(x, w, left):
    """``y [T, B, C]`` of the depthwise convolution: ``y[t, b, c] = sum_k x[t - left + k, b,
    c] * w[k, c]``, zeros outside ``[0, T)`` (see the twin)."""
    x = np.asarray(x)
    if x.ndim != 3 or x.size == 0 or np.asarray(w).shape[0] == 0:
        return ref.depthwise_conv1d(x, w, left)
    dt = _dtype(x, w)
    return _conv(np.ascontiguousarray(x, dt), np.ascontiguousarray(w, dt), int(left))


def depthwise_conv1d_backward(g, x, w, left):
    """``(gx [T, B, C], gw [K, C])`` of :func:`depthwise_conv1d` for the output gradient g."""
    g, x, w = np.asarray(g), np.asarray(x), np.asarray(w)
    if x.ndim != 3 or x.size == 0 or w.shape[0] == 0:
        return ref.depthwise_conv1d_backward(g, x, w, left)
    dt = _dtype(g, x, w)
    g, x = np.ascontiguousarray(g, dt), np.ascontiguousarray(x, dt)
    K = w.shape[0]
    # gx[s] = sum_k g[s + left - k] w[k]: the same convolution with the taps reversed
    gx = _conv(g, np.ascontiguousarray(np.asarray(w, dt)[::-1]), K - 1 - int(left))
    T, B, C = x.shape
    blocks = row_blocks(T, B * C * K)
    parts = np.zeros((max(len(blocks), 1), K, C))

    def rows(t0, t1):
        _weight_grad_rows(x, g, int(left), K, parts[blocks.index((t0, t1))], t0, t1)

    run_blocks(rows, blocks)
    return gx, parts.sum(0).astype(dt)
