"""Windows over time on CUDA: the kernels of convolution, pooling and frame stacking.

Same signatures and results as the numpy twins in :mod:`asrkit.kernels.reference.windows` (read
its docstring for the window geometry); arrays ``[T, B, ...]`` are handled as ``[T, B, C]``.
The window gather is one thread per output entry; its adjoint scatter-adds with atomics.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from asrkit.kernels.cuda.layout import contiguous, empty, flat, launch, zeros


def _as3(a):
    a = contiguous(a)
    T, B = tuple(a.shape[:2])
    return a.reshape((T, B, a.size // (T * B) if T * B else 1))


@cuda.jit(device=True)
def _source(i, T, B, C, K, stride, dilation, left):
    """The flat index of x ``[T, B, C]`` that entry ``i`` of cols ``[T', B, K, C]`` reads, or -1
    where its frame falls outside ``[0, T)``."""
    c = i % C
    k = (i // C) % K
    b = (i // (C * K)) % B
    to = i // (C * K * B)
    t = to * stride - left + k * dilation
    return (t * B + b) * C + c if 0 <= t < T else -1


@cuda.jit
def _gather(x, cols, T, B, C, K, stride, dilation, left):
    """cols[t', b, k, c] = x[t'*stride - left + k*dilation, b, c] (zero outside [0, T))."""
    i = cuda.grid(1)
    if i < cols.size:
        j = _source(i, T, B, C, K, stride, dilation, left)
        cols[i] = x[j] if j >= 0 else 0


@cuda.jit
def _scatter(gcols, gx, T, B, C, K, stride, dilation, left):
    i = cuda.grid(1)
    if i < gcols.size:
        j = _source(i, T, B, C, K, stride, dilation, left)
        if j >= 0:
            cuda.atomic.add(gx, j, gcols[i])


def gather_windows(x, K, stride, dilation, left, T_out):
    """``x [T, B, ...] -> cols [T_out, B, K, ...]`` (zeros outside ``[0, T)``)."""
    x3 = _as3(x)
    T, B, C = tuple(x3.shape)
    cols = empty((T_out, B, K) + tuple(x.shape[2:]), x.dtype)
    if cols.size:
        _gather[launch(cols.size)](flat(x3), flat(cols), T, B, C, K, stride, dilation, left)
    return cols


def scatter_windows(gcols, T, K, stride, dilation, left):
    """Adjoint of :func:`gather_windows`: ``gcols [T', B, K, ...] -> [T, B, ...]``."""
    B = int(gcols.shape[1])
    tail = tuple(gcols.shape[3:])
    C = int(np.prod(tail, dtype=np.int64))
    gx = zeros((T * B * C,), gcols.dtype)
    if gcols.size:
        _scatter[launch(gcols.size)](flat(contiguous(gcols)), gx, T, B, C, K, stride, dilation,
                                     left)
    return gx.reshape((T, B) + tail)


@cuda.jit
def _pool(x, L, y, arg, B, C, K, stride, left, is_max):
    i = cuda.grid(1)
    if i < y.size:
        c = i % C
        b = (i // C) % B
        to = i // (C * B)
        best = -math.inf
        pick = -1
        acc = 0.0
        cnt = 0
        for k in range(K):
            t = to * stride - left + k
            if t >= 0 and t < L[b]:
                v = float(x[(t * B + b) * C + c])
                cnt += 1
                acc += v
                if v > best or pick < 0:
                    best = v
                    pick = k
        if is_max:
            y[i] = best if pick >= 0 else 0.0
            arg[i] = pick
        else:
            y[i] = acc / max(cnt, 1)
            arg[i] = max(cnt, 1)


@cuda.jit
def _pool_bwd(g, arg, L, gx, B, C, K, stride, left, is_max):
    i = cuda.grid(1)
    if i < g.size:
        c = i % C
        b = (i // C) % B
        to = i // (C * B)
        for k in range(K):
            t = to * stride - left + k
            if t >= 0 and t < L[b]:
                if is_max:
                    if k == arg[i]:
                        cuda.atomic.add(gx, (t * B + b) * C + c, g[i])
                else:
                    cuda.atomic.add(gx, (t * B + b) * C + c, g[i] / arg[i])


def _lengths(lengths):
    return cuda.to_device(np.ascontiguousarray(lengths, np.int32))


def pool1d(x, lengths, kind, size, stride, left, T_out):
    """Max or mean over windows of real frames: ``x [T, B, ...] -> (y [T_out, B, ...], state)``
    (state: int32 per output, the picked tap or the count of real frames)."""
    x3 = _as3(x)
    T, B, C = tuple(x3.shape)
    y = empty((T_out,) + tuple(x.shape[1:]), x.dtype)
    arg = empty((max(y.size, 1),), np.int32)
    if y.size:
        _pool[launch(y.size)](flat(x3), _lengths(lengths), flat(y), arg, B, C, size, stride,
                              left, kind == "max")
    return y, arg


def pool1d_backward(g, state, lengths, T, kind, size, stride, left):
    """Gradient of :func:`pool1d`: ``g [T', B, ...] -> [T, B, ...]``."""
    B = int(g.shape[1])
    C = g.size // max(int(g.shape[0]) * B, 1) if g.size else 1
    gx = zeros((T,) + tuple(g.shape[1:]), g.dtype)
    if g.size:
        _pool_bwd[launch(g.size)](flat(contiguous(g)), state, _lengths(lengths), flat(gx), B, C,
                                  size, stride, left, kind == "max")
    return gx
