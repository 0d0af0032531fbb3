"""Layer and batch normalisation on CUDA; same signatures and results as the numpy twins in
:mod:`asrkit.kernels.reference.normalization` (read its docstring).

Layer norm is one thread per row of ``D`` features. Batch norm reduces per-feature sums over
the leading axes (column sums) and brings its two ``[D]`` statistics to the host, where the ops
keep the running averages; applying and differentiating are element-wise kernels. Values go
through float64 registers.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from asrkit.kernels.cuda.layout import SUM, contiguous, empty, flat, launch, reduce_leading
from asrkit.kernels.cuda.sequence import fill_padding


def _rows(x):
    D = int(tuple(x.shape)[-1])
    return D, (x.size // D if D else 0)


def _device(a, dtype=np.float64):
    if hasattr(a, "copy_to_host"):
        return a
    return cuda.to_device(np.ascontiguousarray(a, dtype).reshape(-1))


@cuda.jit
def _layer_norm_rows(x, scale, bias, eps, y, xhat, rstd, D):
    r = cuda.grid(1)
    if r < x.size // D:
        base = r * D
        mu = 0.0
        for j in range(D):
            mu += x[base + j]
        mu /= D
        var = 0.0
        for j in range(D):
            d = float(x[base + j]) - mu
            var += d * d
        rs = 1.0 / math.sqrt(var / D + eps)
        rstd[r] = rs
        for j in range(D):
            h = (float(x[base + j]) - mu) * rs
            xhat[base + j] = h
            y[base + j] = h * scale[j % scale.size] + bias[j % bias.size]


@cuda.jit
def _layer_norm_rows_bwd(g, xhat, rstd, scale, gx, gscale, D):
    r = cuda.grid(1)
    if r < g.size // D:
        base = r * D
        m1 = 0.0
        m2 = 0.0
        for j in range(D):
            gh = float(g[base + j]) * scale[j % scale.size]
            m1 += gh
            m2 += gh * float(xhat[base + j])
        m1 /= D
        m2 /= D
        for j in range(D):
            gh = float(g[base + j]) * scale[j % scale.size]
            gx[base + j] = rstd[r] * (gh - m1 - float(xhat[base + j]) * m2)
            gscale[base + j] = float(g[base + j]) * float(xhat[base + j])


def layer_norm(x, scale, bias, eps=1e-5):
    """Layer norm over the last axis -> ``(y, state)``."""
    x = contiguous(x)
    D, R = _rows(x)
    y, xhat = empty(x.shape, x.dtype), empty(x.shape, x.dtype)
    rstd = empty((max(R, 1),), x.dtype)
    if R:
        _layer_norm_rows[launch(R)](flat(x), flat(contiguous(scale)), flat(contiguous(bias)),
                                    float(eps), flat(y), flat(xhat), rstd, D)
    return y, (xhat, rstd)


def layer_norm_backward(g, state, scale):
    """Gradients ``(gx, gscale, gbias)`` at x's shape."""
    xhat, rstd = state
    g = contiguous(g)
    D, R = _rows(g)
    gx, gscale = empty(g.shape, g.dtype), empty(g.shape, g.dtype)
    if R:
        _layer_norm_rows_bwd[launch(R)](flat(g), flat(xhat), rstd, flat(contiguous(scale)),
                                        flat(gx), flat(gscale), D)
    return gx, gscale, g


def _geometry(x, lengths):
    """(device lengths, B, F entries per frame, D, masked)."""
    D = int(tuple(x.shape)[-1])
    if lengths is None:
        return cuda.to_device(np.zeros(1, np.int32)), 1, max(x.size, 1), D, False
    T, B = tuple(x.shape[:2])
    return (cuda.to_device(np.asarray(lengths, np.int32)), B, x.size // max(T * B, 1), D,
            True)


@cuda.jit
def _centred_square(x, mu, L, B, F, D, masked, out):
    i = cuda.grid(1)
    if i < x.size:
        c = 0.0
        if not masked or i // (B * F) < L[(i // F) % B]:
            c = float(x[i]) - mu[i % D]
        out[i] = c * c


def batch_stats(x, lengths=None):
    """Per-feature mean and biased variance over the valid entries -> ``(mean [D], var [D], n)``
    (host float64 arrays); ValueError when there are none."""
    x = contiguous(x)
    Ld, B, F, D, masked = _geometry(x, lengths)
    n = float(np.sum(lengths)) * (F // D) if masked else float(x.size // D)
    if n < 1:
        raise ValueError("batch norm over an empty batch")
    valid = fill_padding(x, lengths) if masked else x
    mu = reduce_leading(valid, x.ndim - 1, SUM).copy_to_host().astype(np.float64) / n
    sq = empty(x.shape, np.float64)
    _centred_square[launch(x.size)](flat(x), cuda.to_device(mu), Ld, B, F, D, masked, flat(sq))
    return mu, reduce_leading(sq, x.ndim - 1, SUM).copy_to_host() / n, n


@cuda.jit
def _apply(x, mu, rstd, scale, bias, L, B, F, D, masked, y, xhat):
    i = cuda.grid(1)
    if i < x.size:
        d = i % D
        h = 0.0
        if not masked or i // (B * F) < L[(i // F) % B]:
            h = (float(x[i]) - mu[d]) * rstd[d]
        xhat[i] = h
        y[i] = h * scale[d % scale.size] + bias[d % bias.size]


def batch_norm(x, scale, bias, mean, rstd, lengths=None):
    """``xhat = (x - mean) * rstd`` (0 on padding with ``lengths``) -> ``(y, xhat)``."""
    x = contiguous(x)
    Ld, B, F, D, masked = _geometry(x, lengths)
    y, xhat = empty(x.shape, x.dtype), empty(x.shape, x.dtype)
    if x.size:
        _apply[launch(x.size)](flat(x), _device(mean), _device(rstd), flat(contiguous(scale)),
                               flat(contiguous(bias)), Ld, B, F, D, masked, flat(y), flat(xhat))
    return y, xhat


@cuda.jit
def _terms(g, xhat, scale, D, gxhat, gxx, gscale):
    i = cuda.grid(1)
    if i < g.size:
        gh = float(g[i]) * scale[(i % D) % scale.size]
        gxhat[i] = gh
        gxx[i] = gh * float(xhat[i])
        gscale[i] = float(g[i]) * float(xhat[i])


@cuda.jit
def _grad_x(gxhat, xhat, s1, s2, rstd, n, L, B, F, D, masked, train, gx):
    i = cuda.grid(1)
    if i < gx.size:
        d = i % D
        if not train:
            gx[i] = gxhat[i] * rstd[d]
        elif not masked or i // (B * F) < L[(i // F) % B]:
            gx[i] = rstd[d] * (gxhat[i] - s1[d] / n - xhat[i] * s2[d] / n)
        else:
            gx[i] = 0.0


def batch_norm_backward(g, xhat, scale, rstd, lengths=None, n=None):
    """Gradients ``(gx, gscale, gbias)`` of :func:`batch_norm` (``n=None``: fixed statistics)."""
    g = contiguous(g)
    Ld, B, F, D, masked = _geometry(g, lengths)
    gxhat, gxx, gscale, gx = (empty(g.shape, g.dtype) for _ in range(4))
    rstd = _device(rstd)
    if g.size:
        _terms[launch(g.size)](flat(g), flat(xhat), flat(contiguous(scale)), D, flat(gxhat),
                               flat(gxx), flat(gscale))
        train = n is not None
        s1 = flat(reduce_leading(gxhat, g.ndim - 1, SUM)) if train else rstd
        s2 = flat(reduce_leading(gxx, g.ndim - 1, SUM)) if train else rstd
        _grad_x[launch(g.size)](flat(gxhat), flat(xhat), s1, s2, rstd,
                                float(n) if train else 1.0, Ld, B, F, D, masked, train, flat(gx))
    return gx, gscale, g
