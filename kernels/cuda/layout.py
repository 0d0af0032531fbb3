"""Device-side data movement and reductions (numba.cuda), for the graph engine and the ops.

Every layout op (reshape, transpose, slicing, subsampling, broadcasting, concatenation) is a
*strided gather*: output element ``i`` (C order over ``shape``) reads ``x.flat[offset + sum_d
idx_d * strides_d]`` with strides in elements (0 for a broadcast axis). Its adjoint is a strided
scatter-add. :func:`view_layout` gets ``(shape, strides, offset)`` of any numpy view op by running
it on a fake int8 array whose strides equal its element strides (nothing is ever read from it), so
the cuda path of a view op is its own numpy forward, replayed on the device.

Reductions: sums over leading axes are column sums with atomics; everything else moves the
reduced axes last (a gather) and reduces rows, one thread per row. Rows of a table are gathered
(``take_rows``) and scatter-added (``add_rows``) for embeddings. The numpy twins are
:mod:`asrkit.kernels.reference.layout`.
"""

from __future__ import annotations

import math

import numpy as np

from asrkit.kernels._device import DeviceUnavailableError, cuda_simulated

try:
    from numba import cuda
except ImportError as e:  # pragma: no cover - depends on the install
    raise DeviceUnavailableError(
        "device='cuda' needs numba-cuda: pip install 'asrkit[cuda]'") from e

THREADS = 32 if cuda_simulated() else 256  # simulated threads are Python threads
MAXD = 8  # rank limit of the strided kernels (shapes are passed as fixed-size tuples)
SUM, MAX, MIN = range(3)


def launch(n):
    """Grid and block sizes for ``n`` threads."""
    return (max((n + THREADS - 1) // THREADS, 1), THREADS)


def flat(a):
    """A 1-D view of contiguous device array ``a``."""
    return a.reshape(a.size) if a.ndim != 1 else a


def empty(shape, dtype):
    """An uninitialised device array."""
    return cuda.device_array(tuple(int(d) for d in shape), dtype=np.dtype(dtype))


@cuda.jit
def _fill(out, value):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = value


def full(shape, value, dtype):
    """A device array filled with ``value`` (filled on the device, no host transfer)."""
    out = empty(shape, dtype)
    if out.size:
        _fill[launch(out.size)](flat(out), value)
    return out


def zeros(shape, dtype):
    """A device array of zeros."""
    return full(shape, 0, dtype)


def copy(a):
    """A device copy of ``a``."""
    out = empty(a.shape, a.dtype)
    out.copy_to_device(a)
    return out


def contiguous(a):
    """``a`` if it is C-contiguous, else a contiguous copy (a host round trip: every array the
    cuda impls make is contiguous, so this only meets foreign views)."""
    if a.is_c_contiguous():
        return a
    return cuda.to_device(np.ascontiguousarray(a.copy_to_host()))


def suffix_broadcasts(shape, out_shape) -> bool:
    """True when ``shape`` (leading 1s dropped) is a suffix of ``out_shape``: a flat array of
    that shape broadcasts to ``out_shape`` by indexing it modulo its size."""
    shape = tuple(shape)
    while shape and shape[0] == 1:
        shape = shape[1:]
    return shape == tuple(out_shape[len(out_shape) - len(shape):]) if shape else True


def _pad(t, fill):
    return tuple(int(v) for v in t) + (fill,) * (MAXD - len(t))


@cuda.jit
def _gather(x, out, shape, strides, offset, ndim):
    i = cuda.grid(1)
    if i < out.size:
        r = i
        src = offset
        for d in range(ndim - 1, -1, -1):
            src += (r % shape[d]) * strides[d]
            r //= shape[d]
        out[i] = x[src]


@cuda.jit
def _scatter(g, out, shape, strides, offset, ndim, accumulate):
    i = cuda.grid(1)
    if i < g.size:
        r = i
        dst = offset
        for d in range(ndim - 1, -1, -1):
            dst += (r % shape[d]) * strides[d]
            r //= shape[d]
        if accumulate:
            cuda.atomic.add(out, dst, g[i])
        else:
            out[dst] = g[i]


def _check_rank(shape):
    if len(shape) > MAXD:
        raise ValueError(f"cuda layout kernels handle rank <= {MAXD}; got shape {list(shape)}")


def gather(x, shape, strides, offset, dtype=None):
    """New contiguous ``[shape]`` array with ``out[idx] = x.flat[offset + idx . strides]``.

    x: device array, addressed as its flat C-order buffer;
    strides: in elements, one per axis of ``shape`` (0 broadcasts); dtype: of the result
    (default x's; values are converted).
    """
    _check_rank(shape)
    out = empty(shape, x.dtype if dtype is None else dtype)
    if out.size:
        _gather[launch(out.size)](flat(contiguous(x)), flat(out), _pad(shape, 1),
                                  _pad(strides, 0), int(offset), len(shape))
    return out


def scatter(g, out, strides, offset, accumulate=True):
    """Write contiguous ``g`` into flat device array ``out`` at ``offset + idx . strides``.

    ``accumulate=True`` adds with atomics (strides may repeat addresses); else plain stores.
    """
    _check_rank(g.shape)
    if g.size:
        _scatter[launch(g.size)](flat(contiguous(g)), flat(out), _pad(g.shape, 1),
                                 _pad(strides, 0), int(offset), len(g.shape), bool(accumulate))
    return out


def view_layout(fn, shape):
    """``(shape, strides, offset)`` in elements of the numpy view ``fn(a)`` of a C array ``a``
    of ``shape``; None when ``fn`` does not return a view."""
    base = np.zeros(1, np.int8)
    strides = tuple(int(np.prod(shape[i + 1:], dtype=np.int64)) for i in range(len(shape)))
    fake = np.lib.stride_tricks.as_strided(base, shape=tuple(shape), strides=strides,
                                           writeable=False)
    v = fn(fake)
    if not isinstance(v, np.ndarray) or v.flags.owndata:
        return None
    offset = v.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return tuple(v.shape), tuple(v.strides), offset


def broadcast_to(x, shape, dtype=None):
    """``x`` broadcast (numpy rules) to ``shape`` as a new contiguous device array (of
    ``dtype``, default x's)."""
    shape = tuple(int(d) for d in shape)
    xs = (1,) * (len(shape) - x.ndim) + tuple(x.shape)
    x = contiguous(x)
    c = [int(np.prod(xs[i + 1:], dtype=np.int64)) for i in range(len(xs))]
    strides = tuple(0 if xs[i] == 1 and shape[i] != 1 else c[i] for i in range(len(shape)))
    return gather(x, shape, strides, 0, dtype)


def permute(x, perm):
    """``x.transpose(perm)`` as a new contiguous device array."""
    x = contiguous(x)
    c = [int(np.prod(x.shape[i + 1:], dtype=np.int64)) for i in range(x.ndim)]
    return gather(x, tuple(x.shape[p] for p in perm), tuple(c[p] for p in perm), 0)


# -- reductions -------------------------------------------------------------------------------
@cuda.jit
def _reduce_rows(x, out, n, kind, scale):
    r = cuda.grid(1)
    if r < out.size:
        base = r * n
        if kind == SUM:
            acc = 0.0
            for j in range(n):
                acc += x[base + j]
        elif kind == MAX:
            acc = -math.inf
            for j in range(n):
                acc = max(acc, float(x[base + j]))
        else:
            acc = math.inf
            for j in range(n):
                acc = min(acc, float(x[base + j]))
        out[r] = acc * scale


@cuda.jit
def _reduce_columns(x, out, m, stride, kind):
    """Thread t reduces x[t], x[t + stride], ... (stride a multiple of m) into out[t % m]."""
    t = cuda.grid(1)
    if t < stride:
        j = t
        if kind == SUM:
            acc = 0.0
            while j < x.size:
                acc += x[j]
                j += stride
            cuda.atomic.add(out, t % m, acc)
        elif kind == MAX:
            acc = -math.inf
            while j < x.size:
                acc = max(acc, float(x[j]))
                j += stride
            cuda.atomic.max(out, t % m, acc)
        else:
            acc = math.inf
            while j < x.size:
                acc = min(acc, float(x[j]))
                j += stride
            cuda.atomic.min(out, t % m, acc)


def reduce_leading(x, k, kind=SUM):
    """Reduce device ``x`` over its first ``k`` axes -> ``x.shape[k:]`` (new array)."""
    rest = tuple(x.shape[k:])
    m = int(np.prod(rest, dtype=np.int64))
    init = {SUM: 0.0, MAX: -math.inf, MIN: math.inf}[kind]
    out = full((max(m, 1),), init, x.dtype)
    if x.size:
        rows = max(1, min(x.size // max(m, 1), 1024))
        stride = m * rows
        _reduce_columns[launch(stride)](flat(contiguous(x)), out, m, stride, kind)
    return out.reshape(rest) if rest else out.reshape(())


def reduce_axes(x, axes, kind=SUM, scale=1.0):
    """Reduce device ``x`` over ``axes`` (sum, max or min; the result times ``scale``).

    Returns a new device array of ``x``'s shape without ``axes``.
    """
    axes = tuple(sorted({a % x.ndim for a in axes}))
    keep = tuple(a for a in range(x.ndim) if a not in axes)
    out_shape = tuple(x.shape[a] for a in keep)
    if axes == tuple(range(len(axes))) and scale == 1.0:
        return reduce_leading(x, len(axes), kind)
    if axes != tuple(range(x.ndim - len(axes), x.ndim)):
        x = permute(x, keep + axes)
    x = contiguous(x)
    n = int(np.prod([x.shape[a] for a in range(len(keep), x.ndim)], dtype=np.int64))
    rows = int(np.prod(out_shape, dtype=np.int64))
    out = empty((max(rows, 1),), x.dtype)
    if rows:
        _reduce_rows[launch(rows)](flat(x), out, n, kind, float(scale))
    return out.reshape(out_shape) if out_shape else out.reshape(())


def sum_to_shape(g, shape):
    """Sum device ``g`` down to ``shape`` under numpy's broadcasting rules (the adjoint of
    broadcasting); returns a new device array of ``shape``."""
    shape = tuple(int(d) for d in shape)
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape)
                                      if d == 1 and g.shape[lead + i] != 1)
    out = reduce_axes(g, axes) if axes else contiguous(g)
    return out.reshape(shape) if shape else out.reshape(())


@cuda.jit
def _ties(x, yb, hits):
    i = cuda.grid(1)
    if i < x.size:
        hits[i] = 1.0 if x[i] == yb[i] else 0.0


@cuda.jit
def _share(x, yb, gb, count, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = gb[i] / max(count[i], 1.0) if x[i] == yb[i] else 0.0


def extreme_grad(x, y, g, axes):
    """Gradient of a max or min of ``x`` over ``axes``: ``g`` split evenly among the entries
    equal to the extreme ``y``. ``y`` and ``g`` have x's shape with ``axes`` kept as 1 (or
    x's shape); returns a new array of x's shape in g's dtype."""
    x = contiguous(x)
    shape = tuple(x.shape)
    yb, gb = broadcast_to(y, shape, x.dtype), broadcast_to(g, shape)
    out = empty(shape, g.dtype)
    if x.size:
        hits = empty(shape, g.dtype)
        _ties[launch(x.size)](flat(x), flat(yb), flat(hits))
        kept = tuple(1 if a in axes else d for a, d in enumerate(shape))
        count = broadcast_to(reduce_axes(hits, axes).reshape(kept), shape)
        _share[launch(x.size)](flat(x), flat(yb), flat(gb), flat(count), flat(out))
    return out


# -- rows of a table (embeddings) -------------------------------------------------------------
@cuda.jit
def _take_rows(table, ids, out, D, V, bad):
    i = cuda.grid(1)
    if i < out.size:
        k = ids[i // D]
        if k < 0 or k >= V:
            bad[0] = 1
        else:
            out[i] = table[k * D + i % D]


@cuda.jit
def _add_rows(g, ids, out, D):
    i = cuda.grid(1)
    if i < g.size:
        cuda.atomic.add(out, ids[i // D] * D + i % D, g[i])


def _ids(ids):
    host = ids.copy_to_host() if hasattr(ids, "copy_to_host") else np.asarray(ids)
    return host, cuda.to_device(np.ascontiguousarray(host, np.int32).reshape(-1))


def take_rows(table, ids):
    """``table [V, D]`` rows at integer ``ids [...]`` -> ``[..., D]``; an id outside ``[0, V)``
    raises ValueError naming it."""
    V, D = tuple(table.shape)
    host, ids_d = _ids(ids)
    out = empty(tuple(host.shape) + (D,), table.dtype)
    bad = cuda.to_device(np.zeros(1, np.int32))
    if out.size:
        _take_rows[launch(out.size)](flat(contiguous(table)), ids_d, flat(out), D, V, bad)
    if bad.copy_to_host()[0]:
        k = host[(host < 0) | (host >= V)][0]
        raise ValueError(f"id {int(k)} is outside the vocabulary [0, {V})")
    return out


def add_rows(g, ids, V):
    """Adjoint of :func:`take_rows`: ``g [..., D]`` summed into the rows ``ids`` of a new
    ``[V, D]`` array of zeros."""
    D = int(tuple(g.shape)[-1])
    _, ids_d = _ids(ids)
    out = zeros((V * D,), g.dtype)
    if g.size:
        _add_rows[launch(g.size)](flat(contiguous(g)), ids_d, out, D)
    return out.reshape((V, D))
