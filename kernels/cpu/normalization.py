"""Layer and batch normalisation on the CPU: numba kernels over the rows of the last axis,
the rows split into one contiguous block per kernel thread (``_gemm.row_blocks``).

Same signatures and results as the numpy twin :mod:`asrkit.kernels.reference.normalization`
(the specification the tests hold these to), except that the gradients of ``scale`` and
``bias`` come back summed to ``[D]`` (the twin returns them at x's shape for the engine to sum).
A row's statistics and the ``[D]`` sums are accumulated in float64. Where the twin makes one
numpy pass per term (mean, centring, variance, scaling, affine), a row here is read twice
and written once or twice, while it sits in L1: about six times faster on one thread.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from asrkit.kernels.cpu._gemm import row_blocks, run_blocks
from asrkit.kernels.reference import normalization as ref

_OPTS = {"cache": True, "nogil": True, "error_model": "numpy", "fastmath": {"contract", "reassoc"}}


def _dtype(*arrays):
    dt = np.result_type(*arrays)
    return dt if dt in (np.float32, np.float64) else np.dtype(np.float32)


def _rows(a, dt):
    """``a`` as a C-contiguous ``[rows, D]`` array of ``dt`` (a view where it already is)."""
    a = np.ascontiguousarray(a, dt)
    return a.reshape(-1, a.shape[-1])


def _vector(v, D, dt):
    """A per-feature parameter (``[D]`` or a scalar) as a contiguous ``[D]`` array of ``dt``."""
    return np.ascontiguousarray(np.broadcast_to(np.asarray(v, dt), (D,)))


def _partials(blocks, D):
    return np.zeros((max(len(blocks), 1), D))


# -- layer norm -------------------------------------------------------------------------------
@njit(**_OPTS)
def _ln_rows(x, scale, bias, eps, y, xhat, rstd, r0, r1):
    D = x.shape[1]
    for r in range(r0, r1):
        s = 0.0
        for d in range(D):
            s += x[r, d]
        mu = s / D
        v = 0.0
        for d in range(D):
            c = x[r, d] - mu
            v += c * c
        rs = 1.0 / np.sqrt(v / D + eps)
        rstd[r] = rs
        for d in range(D):
            h = (x[r, d] - mu) * rs
            xhat[r, d] = h
            y[r, d] = h * scale[d] + bias[d]


@njit(**_OPTS)
def _ln_grad_rows(g, xhat, rstd, scale, gx, gscale, gbias, r0, r1):
    """``gx`` of rows r0..r1, and their sums of ``g * xhat`` and ``g`` added into the float64
    ``gscale``, ``gbias [D]`` (this block's own)."""
    D = g.shape[1]
    for r in range(r0, r1):
        m1 = 0.0
        m2 = 0.0
        for d in range(D):
            gh = g[r, d] * scale[d]
            m1 += gh
            m2 += gh * xhat[r, d]
            gscale[d] += g[r, d] * xhat[r, d]
            gbias[d] += g[r, d]
        m1 /= D
        m2 /= D
        rs = rstd[r]
        for d in range(D):
            gx[r, d] = rs * (g[r, d] * scale[d] - m1 - xhat[r, d] * m2)


def layer_norm(x, scale, bias, eps=1e-5):
    """``(x - mean) / sqrt(var + eps) * scale + bias`` over the last axis -> ``(y, state)``;
    ``state = (xhat, rstd)`` as the twin's (``rstd`` of shape ``[..., 1]``)."""
    x = np.asarray(x)
    dt = _dtype(x, scale, bias)
    if x.size == 0:
        return ref.layer_norm(x.astype(dt), scale, bias, eps)
    D = x.shape[-1]
    x2 = _rows(x, dt)
    y = np.empty(x2.shape, dt)
    xhat = np.empty(x2.shape, dt)
    rstd = np.empty(x2.shape[0], dt)
    s, b = _vector(scale, D, dt), _vector(bias, D, dt)
    run_blocks(lambda r0, r1: _ln_rows(x2, s, b, float(eps), y, xhat, rstd, r0, r1),
               row_blocks(x2.shape[0], 3 * D))
    return y.reshape(x.shape), (xhat.reshape(x.shape), rstd.reshape(x.shape[:-1] + (1,)))


def layer_norm_backward(g, state, scale):
    """Gradients ``(gx, gscale [D], gbias [D])`` of :func:`layer_norm` for the output gradient
    ``g`` (the scale and bias gradients summed over every row)."""
    xhat, rstd = state
    g = np.asarray(g)
    dt = _dtype(g, xhat)
    D = g.shape[-1]
    if g.size == 0:
        return np.zeros(g.shape, dt), np.zeros(D, dt), np.zeros(D, dt)
    g2, h2 = _rows(g, dt), _rows(xhat, dt)
    rs = np.ascontiguousarray(rstd, dt).reshape(-1)
    s = _vector(scale, D, dt)
    gx = np.empty(g2.shape, dt)
    blocks = row_blocks(g2.shape[0], 4 * D)
    gs, gb = _partials(blocks, D), _partials(blocks, D)

    def rows(r0, r1):
        k = blocks.index((r0, r1))
        _ln_grad_rows(g2, h2, rs, s, gx, gs[k], gb[k], r0, r1)

    run_blocks(rows, blocks)
    return gx.reshape(g.shape), gs.sum(0).astype(dt), gb.sum(0).astype(dt)


# -- batch norm -------------------------------------------------------------------------------
def _valid_rows(shape, lengths):
    """uint8 ``[rows]``: 1 where row r of the ``[rows, D]`` view of ``shape`` is a valid frame
    (all 1 without lengths)."""
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    if lengths is None:
        return np.ones(rows, np.uint8)
    m = ref.valid_mask(np.empty(shape[:-1] + (1,), np.uint8), lengths)
    return np.ascontiguousarray(np.broadcast_to(m, shape[:-1] + (1,)), np.uint8).reshape(-1)


@njit(**_OPTS)
def _bn_sums_rows(x, valid, mean, s1, s2, r0, r1):
    """Adds ``x - mean`` into ``s1`` and its square into ``s2`` (float64 ``[D]``) over the
    valid rows r0..r1."""
    D = x.shape[1]
    for r in range(r0, r1):
        if valid[r]:
            for d in range(D):
                c = x[r, d] - mean[d]
                s1[d] += c
                s2[d] += c * c


def batch_stats(x, lengths=None):
    """Mean and (biased) variance per feature over the valid entries: ``(mean [D], var [D],
    n)`` as the twin's (float64 sums, centred on a first estimate of the mean)."""
    x = np.asarray(x)
    if x.ndim < 2 or x.size == 0:
        return ref.batch_stats(x, lengths)
    dt = _dtype(x)
    D = x.shape[-1]
    valid = _valid_rows(x.shape, lengths)
    n = float(valid.sum())
    if n < 1:
        raise ValueError("batch norm over an empty batch")
    x2 = _rows(x, dt)
    blocks = row_blocks(x2.shape[0], 2 * D)
    mean = np.zeros(D)
    for _ in range(2):  # the mean, then the centred sums about it
        s1, s2 = _partials(blocks, D), _partials(blocks, D)

        def rows(r0, r1, s1=s1, s2=s2, mean=mean):
            k = blocks.index((r0, r1))
            _bn_sums_rows(x2, valid, mean, s1[k], s2[k], r0, r1)

        run_blocks(rows, blocks)
        shift = s1.sum(0) / n
        var = s2.sum(0) / n - shift * shift
        mean = mean + shift
    return mean.astype(dt), np.maximum(var, 0.0).astype(dt), n


@njit(**_OPTS)
def _bn_rows(x, valid, scale, bias, mean, rstd, y, xhat, r0, r1):
    D = x.shape[1]
    for r in range(r0, r1):
        v = valid[r]
        for d in range(D):
            h = (x[r, d] - mean[d]) * rstd[d] if v else 0.0
            xhat[r, d] = h
            y[r, d] = h * scale[d] + bias[d]


def batch_norm(x, scale, bias, mean, rstd, lengths=None):
    """``xhat = (x - mean) * rstd`` (0 on padding frames when ``lengths`` are given) ->
    ``(xhat * scale + bias, xhat)``; mean and rstd are per feature ``[D]``."""
    x = np.asarray(x)
    if x.ndim < 2 or x.size == 0:
        return ref.batch_norm(x, scale, bias, mean, rstd, lengths)
    dt = _dtype(x, scale, bias, mean, rstd)
    D = x.shape[-1]
    x2 = _rows(x, dt)
    y, xhat = np.empty(x2.shape, dt), np.empty(x2.shape, dt)
    valid = _valid_rows(x.shape, lengths)
    p = [_vector(v, D, dt) for v in (scale, bias, mean, rstd)]
    run_blocks(lambda r0, r1: _bn_rows(x2, valid, *p, y, xhat, r0, r1),
               row_blocks(x2.shape[0], 3 * D))
    return y.reshape(x.shape), xhat.reshape(x.shape)


@njit(**_OPTS)
def _bn_grad_sums_rows(g, xhat, gscale, gbias, r0, r1):
    D = g.shape[1]
    for r in range(r0, r1):
        for d in range(D):
            gscale[d] += g[r, d] * xhat[r, d]
            gbias[d] += g[r, d]


@njit(**_OPTS)
def _bn_grad_rows(g, xhat, valid, scale, rstd, m1, m2, gx, r0, r1):
    """``gx = rstd * (g * scale - m1 - xhat * m2)`` on valid rows (0 elsewhere); ``m1``,
    ``m2 [D]`` the batch means of ``g * scale`` and ``g * scale * xhat`` (0 for fixed
    statistics)."""
    D = g.shape[1]
    for r in range(r0, r1):
        v = valid[r]
        for d in range(D):
            gx[r, d] = rstd[d] * (g[r, d] * scale[d] - m1[d] - xhat[r, d] * m2[d]) if v else 0.0


def batch_norm_backward(g, xhat, scale, rstd, lengths=None, n=None):
    """Gradients ``(gx, gscale [D], gbias [D])`` of :func:`batch_norm` through the batch
    statistics of ``n`` entries (``n=None``: fixed statistics, evaluation mode); ``g`` is zero
    on padding frames, as the graph engine keeps every gradient of a sequence."""
    g = np.asarray(g)
    if g.ndim < 2 or g.size == 0:
        return ref.batch_norm_backward(g, xhat, scale, rstd, lengths, n)
    dt = _dtype(g, xhat)
    D = g.shape[-1]
    g2, h2 = _rows(g, dt), _rows(xhat, dt)
    blocks = row_blocks(g2.shape[0], 2 * D)
    gs, gb = _partials(blocks, D), _partials(blocks, D)

    def sums(r0, r1):
        k = blocks.index((r0, r1))
        _bn_grad_sums_rows(g2, h2, gs[k], gb[k], r0, r1)

    run_blocks(sums, blocks)
    gscale, gbias = gs.sum(0), gb.sum(0)
    s, rs = _vector(scale, D, dt), _vector(rstd, D, dt)
    if n is None:
        m1 = m2 = np.zeros(D, dt)
        valid = np.ones(g2.shape[0], np.uint8)
    else:
        m1, m2 = (np.asarray(s * v / n, dt) for v in (gbias, gscale))
        valid = _valid_rows(g.shape, lengths)
    gx = np.empty(g2.shape, dt)
    run_blocks(lambda r0, r1: _bn_grad_rows(g2, h2, valid, s, rs, m1, m2, gx, r0, r1),
               row_blocks(g2.shape[0], 3 * D))
    return gx.reshape(g.shape), gscale.astype(dt), gbias.astype(dt)
