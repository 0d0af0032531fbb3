"""Plain-numpy kernels of the Conformer's convolutions: the specification the CUDA twins
(:mod:`asrkit.kernels.cuda.conv`) are tested against, and the CPU path of the ops.

* Depthwise convolution over time (the Conformer convolution module's ``depthwise_conv``):
  ``x [T, B, C]``, ``w [K, C]``, ``y[t, b, c] = sum_k x[t - left + k, b, c] * w[k, c]`` with
  zeros outside ``[0, T)``; ``left = (K-1)//2`` is torch's ``Conv1d(C, C, K, groups=C,
  padding=(K-1)//2)`` for odd K, ``left = K-1`` the causal form.
* 2-D windows (the Conv2d subsampling front end, as im2col): ``x [T, B, F, C]`` ->
  ``cols [T', B, F', Kt, Kf, C]`` with ``cols[t', b, f', i, j] = x[t'*st + i, b, f'*sf + j]``
  (no padding: torch's ``Conv2d(padding=0)``); :func:`fold2d` is its adjoint.
* :func:`scale_add_rows`, ``x * scale + pe[t]``: the Transformer's positional encoding.
"""

from __future__ import annotations

import numpy as np


def depthwise_conv1d(x, w, left):
    """``y [T, B, C]`` of the depthwise convolution (see the module docstring)."""
    T = x.shape[0]
    K = w.shape[0]
    xp = np.zeros((T + K - 1,) + x.shape[1:], np.result_type(x, w))
    xp[left:left + T] = x
    y = np.zeros(xp[:T].shape, xp.dtype)
    for k in range(K):
        y += xp[k:k + T] * w[k]
    return y


def depthwise_conv1d_backward(g, x, w, left):
    """``(gx [T, B, C], gw [K, C])`` of :func:`depthwise_conv1d` for the output gradient g."""
    T = x.shape[0]
    K = w.shape[0]
    dt = np.result_type(g, x, w)
    xp = np.zeros((T + K - 1,) + x.shape[1:], dt)
    xp[left:left + T] = x
    gxp = np.zeros_like(xp)
    gw = np.zeros(w.shape, dt)
    for k in range(K):
        gw[k] = np.einsum("tbc,tbc->c", xp[k:k + T], g)
        gxp[k:k + T] += g * w[k]
    return gxp[left:left + T], gw


def windows2d(T, F, Kt, Kf, st, sf) -> tuple[int, int]:
    """``(T', F')``: output frames and bins of a valid 2-D window (0 when it does not fit)."""
    return (max((T - Kt) // st + 1, 0) if T >= Kt else 0,
            max((F - Kf) // sf + 1, 0) if F >= Kf else 0)


def unfold2d(x, Kt, Kf, st, sf):
    """``x [T, B, F, C] -> cols [T', B, F', Kt, Kf, C]`` (see the module docstring)."""
    T, B, F, C = x.shape
    To, Fo = windows2d(T, F, Kt, Kf, st, sf)
    cols = np.empty((To, B, Fo, Kt, Kf, C), x.dtype)
    if To == 0 or Fo == 0 or B == 0:
        return cols
    for i in range(Kt):
        for j in range(Kf):
            cols[:, :, :, i, j] = x[i:i + st * (To - 1) + 1:st, :, j:j + sf * (Fo - 1) + 1:sf]
    return cols


def fold2d(gcols, T, F, st, sf):
    """Adjoint of :func:`unfold2d`: ``gcols [T', B, F', Kt, Kf, C] -> gx [T, B, F, C]`` (sums
    overlapping windows)."""
    To, B, Fo, Kt, Kf, C = gcols.shape
    gx = np.zeros((T, B, F, C), gcols.dtype)
    if To == 0 or Fo == 0 or B == 0:
        return gx
    for i in range(Kt):
        for j in range(Kf):
            gx[i:i + st * (To - 1) + 1:st, :, j:j + sf * (Fo - 1) + 1:sf] += gcols[:, :, :, i, j]
    return gx


def scale_add_rows(x, pe, scale):
    """``y [T, B, D] = x * scale + pe[t]`` for ``pe [T, D]`` (the positional encoding)."""
    return x * x.dtype.type(scale) + pe[:, None, :].astype(x.dtype)
