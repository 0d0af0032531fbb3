"""The Conformer's convolutions on CUDA: depthwise convolution over time and 2-D windows (and
the positional encoding's scale-and-add).

Same signatures and results as the numpy twins in :mod:`asrkit.kernels.reference.conv` (read
its docstring for the geometry), on numba.cuda device arrays. Every kernel is one thread per
output entry and gathers what it sums (no atomics): the depthwise weight gradient is one thread
per weight, looping over the frames.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from asrkit.kernels.cuda.layout import launch
from asrkit.kernels.reference.conv import windows2d


def _dev(a, dtype):
    if hasattr(a, "copy_to_host"):
        return a if np.dtype(a.dtype) == np.dtype(dtype) else cuda.to_device(
            a.copy_to_host().astype(dtype))
    return cuda.to_device(np.ascontiguousarray(a, dtype))


@cuda.jit
def _dw_fwd(x, w, y, T, B, C, K, left):
    i = cuda.grid(1)
    if i < T * B * C:
        c = i % C
        b = (i // C) % B
        t = i // (C * B)
        acc = 0.0
        for k in range(K):
            s = t - left + k
            if 0 <= s < T:
                acc += x[s, b, c] * w[k, c]
        y[t, b, c] = acc


@cuda.jit
def _dw_bwd_x(g, w, gx, T, B, C, K, left):
    i = cuda.grid(1)
    if i < T * B * C:
        c = i % C
        b = (i // C) % B
        s = i // (C * B)
        acc = 0.0
        for k in range(K):
            t = s + left - k  # output frame t read input frame s through tap k
            if 0 <= t < T:
                acc += g[t, b, c] * w[k, c]
        gx[s, b, c] = acc


@cuda.jit
def _dw_bwd_w(g, x, gw, T, B, C, K, left):
    i = cuda.grid(1)
    if i < K * C:
        c = i % C
        k = i // C
        acc = 0.0
        for t in range(T):
            s = t - left + k
            if 0 <= s < T:
                for b in range(B):
                    acc += x[s, b, c] * g[t, b, c]
        gw[k, c] = acc


def depthwise_conv1d(x, w, left):
    """``y [T, B, C]`` of the depthwise convolution (device arrays)."""
    dt = np.dtype(x.dtype)
    T, B, C = tuple(x.shape)
    K = int(w.shape[0])
    y = cuda.device_array((T, B, C), dt)
    if y.size:
        _dw_fwd[launch(y.size)](x, _dev(w, dt), y, T, B, C, K, int(left))
    return y


def depthwise_conv1d_backward(g, x, w, left):
    """``(gx [T, B, C], gw [K, C])`` of :func:`depthwise_conv1d` (device arrays)."""
    dt = np.dtype(x.dtype)
    T, B, C = tuple(x.shape)
    K = int(w.shape[0])
    w = _dev(w, dt)
    gx = cuda.device_array((T, B, C), dt)
    gw = cuda.device_array((K, C), dt)
    if gx.size:
        _dw_bwd_x[launch(gx.size)](g, w, gx, T, B, C, K, int(left))
    _dw_bwd_w[launch(gw.size)](g, x, gw, T, B, C, K, int(left))
    return gx, gw


@cuda.jit
def _unfold(x, cols, To, B, Fo, Kt, Kf, C, st, sf):
    i = cuda.grid(1)
    if i < To * B * Fo * Kt * Kf * C:
        c = i % C
        j = (i // C) % Kf
        k = (i // (C * Kf)) % Kt
        fo = (i // (C * Kf * Kt)) % Fo
        b = (i // (C * Kf * Kt * Fo)) % B
        to = i // (C * Kf * Kt * Fo * B)
        cols[to, b, fo, k, j, c] = x[to * st + k, b, fo * sf + j, c]


@cuda.jit
def _fold(gcols, gx, T, B, F, C, To, Fo, Kt, Kf, st, sf):
    i = cuda.grid(1)
    if i < T * B * F * C:
        c = i % C
        f = (i // C) % F
        b = (i // (C * F)) % B
        t = i // (C * F * B)
        acc = 0.0
        for k in range(Kt):
            if t >= k and (t - k) % st == 0 and (t - k) // st < To:
                for j in range(Kf):
                    if f >= j and (f - j) % sf == 0 and (f - j) // sf < Fo:
                        acc += gcols[(t - k) // st, b, (f - j) // sf, k, j, c]
        gx[t, b, f, c] = acc


def unfold2d(x, Kt, Kf, st, sf):
    """``x [T, B, F, C] -> cols [T', B, F', Kt, Kf, C]`` (device arrays)."""
    T, B, F, C = tuple(x.shape)
    To, Fo = windows2d(T, F, Kt, Kf, st, sf)
    cols = cuda.device_array((To, B, Fo, Kt, Kf, C), np.dtype(x.dtype))
    if cols.size:
        _unfold[launch(cols.size)](x, cols, To, B, Fo, Kt, Kf, C, st, sf)
    return cols


def fold2d(gcols, T, F, st, sf):
    """Adjoint of :func:`unfold2d`: ``gcols [T', B, F', Kt, Kf, C] -> gx [T, B, F, C]``."""
    To, B, Fo, Kt, Kf, C = tuple(gcols.shape)
    gx = cuda.device_array((T, B, F, C), np.dtype(gcols.dtype))
    if gx.size:
        _fold[launch(gx.size)](gcols, gx, T, B, F, C, To, Fo, Kt, Kf, st, sf)
    return gx


@cuda.jit
def _scale_add_rows(x, pe, y, T, B, D, scale):
    i = cuda.grid(1)
    if i < T * B * D:
        d = i % D
        b = (i // D) % B
        t = i // (D * B)
        y[t, b, d] = x[t, b, d] * scale + pe[t, d]


def scale_add_rows(x, pe, scale):
    """``y [T, B, D] = x * scale + pe[t]`` for ``pe [T, D]`` (the positional encoding)."""
    T, B, D = tuple(x.shape)
    dt = np.dtype(x.dtype)
    y = cuda.device_array((T, B, D), dt)
    if y.size:
        _scale_add_rows[launch(y.size)](x, _dev(pe, dt), y, T, B, D, dt.type(scale))
    return y
