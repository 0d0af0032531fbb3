"""Plain-numpy twins of the layout and reduction kernels (:mod:`asrkit.kernels.cuda.layout`).

Arrays are addressed as in the CUDA kernels: a strided gather reads ``x.flat[offset +
idx . strides]`` (strides in elements, 0 broadcasts) and its adjoint scatter-adds there.
"""

from __future__ import annotations

import numpy as np

SUM, MAX, MIN = range(3)
_REDUCE = {SUM: np.sum, MAX: np.max, MIN: np.min}


def _addresses(shape, strides, offset):
    idx = np.indices(tuple(shape), dtype=np.int64) if len(shape) else np.zeros((0,), np.int64)
    return offset + sum((idx[d] * s for d, s in enumerate(strides)), np.zeros(shape, np.int64))


def gather(x, shape, strides, offset, dtype=None):
    """New ``[shape]`` array with ``out[idx] = x.flat[offset + idx . strides]``."""
    out = np.ravel(x)[_addresses(shape, strides, offset)]
    return out.astype(x.dtype if dtype is None else dtype)


def scatter(g, out, strides, offset, accumulate=True):
    """Write ``g`` into flat ``out`` at ``offset + idx . strides`` (adding when accumulating)."""
    where = _addresses(g.shape, strides, offset).ravel()
    if accumulate:
        np.add.at(out, where, np.ravel(g))
    else:
        out[where] = np.ravel(g)
    return out


def broadcast_to(x, shape, dtype=None):
    """``x`` broadcast to ``shape`` as a new array (of ``dtype``, default x's)."""
    return np.array(np.broadcast_to(x, tuple(shape)), dtype=x.dtype if dtype is None else dtype)


def permute(x, perm):
    """``x.transpose(perm)`` as a new contiguous array."""
    return np.ascontiguousarray(np.transpose(x, perm))


def reduce_axes(x, axes, kind=SUM, scale=1.0):
    """Reduce ``x`` over ``axes`` (sum, max or min), times ``scale``."""
    return (_REDUCE[kind](x, axis=tuple(axes)) * scale).astype(x.dtype)


def reduce_leading(x, k, kind=SUM):
    """Reduce ``x`` over its first ``k`` axes."""
    return reduce_axes(x, tuple(range(k)), kind)


def sum_to_shape(g, shape):
    """Sum ``g`` down to ``shape`` under numpy's broadcasting rules."""
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape)
                                      if d == 1 and g.shape[lead + i] != 1)
    return np.sum(g, axis=axes).reshape(shape).astype(g.dtype)


def extreme_grad(x, y, g, axes):
    """Gradient of a max or min over ``axes``: ``g`` split evenly among the ties with ``y``."""
    hits = x == y
    count = np.maximum(np.sum(hits, axis=tuple(axes), keepdims=True), 1)
    return np.broadcast_to(g * hits / count, x.shape).astype(g.dtype)


def take_rows(table, ids):
    """Rows of ``table [V, D]`` at ``ids [...]`` -> ``[..., D]``."""
    V = table.shape[0]
    if ids.size and (ids.min() < 0 or ids.max() >= V):
        bad = ids[(ids < 0) | (ids >= V)][0]
        raise ValueError(f"id {int(bad)} is outside the vocabulary [0, {V})")
    return table[ids]


def add_rows(g, ids, V):
    """Adjoint of :func:`take_rows`: ``g [..., D]`` summed into rows ``ids`` of ``[V, D]``."""
    out = np.zeros((V, g.shape[-1]), g.dtype)
    np.add.at(out, np.ravel(ids), g.reshape(-1, g.shape[-1]))
    return out
