"""Layer and batch normalisation in numpy: the CPU path of the ops and the twins of
:mod:`asrkit.kernels.cuda.normalization`.

Both normalise over the last axis ``D``. Batch statistics count only the valid frames of a
padded batch ``x [T, B, ..., D]`` with ``lengths`` (every entry of a valid frame, the middle
axes too); ``lengths=None`` counts every entry.
"""

from __future__ import annotations

import numpy as np


def layer_norm(x, scale, bias, eps=1e-5):
    """``(x - mean) / sqrt(var + eps) * scale + bias`` over the last axis -> ``(y, state)``."""
    mu = x.mean(axis=-1, keepdims=True)
    xc = x - mu
    rstd = 1.0 / np.sqrt((xc * xc).mean(axis=-1, keepdims=True) + eps)
    xhat = xc * rstd
    return xhat * scale + bias, (xhat, rstd)


def layer_norm_backward(g, state, scale):
    """Gradients ``(gx, gscale, gbias)`` at x's shape (the engine sums the last two to [D])."""
    xhat, rstd = state
    gxhat = g * scale
    gx = rstd * (gxhat - gxhat.mean(axis=-1, keepdims=True)
                 - xhat * (gxhat * xhat).mean(axis=-1, keepdims=True))
    return gx, g * xhat, g


def valid_mask(x, lengths):
    """``[T, B, 1, ...]`` (x's rank) in x's dtype, 1 on valid frames; None without lengths."""
    if lengths is None:
        return None
    m = np.arange(x.shape[0])[:, None] < np.asarray(lengths)[None, :]
    return m.reshape(m.shape + (1,) * (x.ndim - 2)).astype(x.dtype)


def batch_stats(x, lengths=None):
    """Mean and (biased) variance per feature over the valid entries: ``(mean [D], var [D],
    n)``, n the number of entries counted; ValueError when there are none."""
    m = valid_mask(x, lengths)
    axes = tuple(range(x.ndim - 1))
    n = float(m.sum()) * int(np.prod(x.shape[2:-1])) if m is not None else \
        float(np.prod([x.shape[a] for a in axes]))
    if n < 1:
        raise ValueError("batch norm over an empty batch")
    mu = (x if m is None else x * m).sum(axis=axes) / n
    xc = x - mu if m is None else (x - mu) * m
    return mu, (xc * xc).sum(axis=axes) / n, n


def batch_norm(x, scale, bias, mean, rstd, lengths=None):
    """``xhat = (x - mean) * rstd`` (0 on padding frames when ``lengths`` are given) ->
    ``(xhat * scale + bias, xhat)``; mean and rstd are per feature ``[D]``."""
    m = valid_mask(x, lengths)
    xc = x - mean if m is None else (x - mean) * m
    xhat = xc * rstd
    return xhat * scale + bias, xhat


def batch_norm_backward(g, xhat, scale, rstd, lengths=None, n=None):
    """Gradients ``(gx, gscale, gbias)`` of :func:`batch_norm` through the batch statistics of
    ``n`` entries (``n=None``: fixed statistics, evaluation mode). ``g`` is zero on padding
    frames, as the graph engine keeps every gradient of a sequence."""
    gxhat = g * scale
    if n is None:
        return gxhat * rstd, g * xhat, g
    axes = tuple(range(g.ndim - 1))
    gx = rstd * (gxhat - gxhat.sum(axis=axes) / n - xhat * (gxhat * xhat).sum(axis=axes) / n)
    m = valid_mask(g, lengths)
    return (gx if m is None else gx * m), g * xhat, g
