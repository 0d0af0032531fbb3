"""Element-wise maths on the CPU: numba ufuncs generated from the table, and vectorised kernels
for the rows that a network spends its time in.

Each scalar function of :mod:`asrkit.kernels.elementwise` becomes a float32/float64 ufunc on
first use (compiled once, cached on disk), so a forward or a gradient is one pass over memory
that may write into a given buffer, and binary gradients broadcast like numpy. Rows with a
``numpy`` ufunc run that instead for the forward (SIMD loops; measured faster than a libm call
per element for exp, log, tanh). Integer inputs are computed in float32.

A ufunc's loop calls the scalar function once per element, and a row built on ``math.exp``
calls libm once per element: the sigmoid of ``[500, 8, 1024]`` float32 took 17 ms. The rows
of :data:`FAST` (the sigmoid, Swish and its gradient) therefore have njit loops over
contiguous arrays instead, whose sigmoid takes ``e^-|x|`` from a polynomial that LLVM
vectorises (``attention.fast_exp``, relative error < 1e-7, so sigmoid and Swish keep their
relative precision where they are tiny; float64 through ``ctc._exp``): 1.3 ms there, and the
loop is split over the kernel threads (``_gemm.row_blocks``). Other layouts take the ufunc. The
GLU (``a * sigmoid(b)`` of the two halves of an axis) is one such loop forward and one backward.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import njit, types, vectorize
from numba.extending import overload

from asrkit.kernels.cpu._gemm import row_blocks, run_blocks
from asrkit.kernels.cpu.attention import fast_exp
from asrkit.kernels.elementwise import BINARY, UNARY

_OPTS = {"cache": True, "nogil": True, "error_model": "numpy", "fastmath": {"contract"}}


def _sigmoid(x):
    """Logistic sigmoid of a float32 or float64 scalar, vectorisable (njit only): ``1 / (1 +
    e^-x)`` with ``e^-|x|`` from the attention kernels' ``fast_exp`` (relative error < 1e-7),
    so it keeps its relative precision where it is tiny. (The LSTM cell's
    ``lstm.fast_sigmoid`` shares its rational tanh and is exact to 4e-7 absolute only: too
    coarse for the Swish of a large negative x.)"""
    return 1.0 / (1.0 + np.exp(-x))


@overload(_sigmoid)
def _sigmoid_impl(x):
    one = np.float32(1) if x == types.float32 else 1.0

    def sigmoid(x):
        e = fast_exp(-abs(x))
        d = one / (one + e)
        return d if x >= 0 else e * d
    return sigmoid


@functools.cache
def ufunc(fn):
    """The float32/float64 numba ufunc of scalar function ``fn`` (compiled on first call)."""
    n = fn.__code__.co_argcount
    sigs = [f"{t}({', '.join([t] * n)})" for t in ("float32", "float64")]
    return vectorize(sigs, cache=True)(fn)


def _float(x):
    return x if x.dtype.kind == "f" else x.astype(np.float32)


def _call(fn, args, out):
    return fn(*args, out=out) if out is not None else fn(*args)


# -- vectorised rows: njit loops over flat ranges [i0, i1) of contiguous arrays -----------------
# Each loop runs over slices from 0 (an index that numba cannot prove non-negative carries a
# wrap-around select per access, which keeps LLVM from vectorising the loop) and writes CHUNK
# results at a time into a scratch array before copying them out (a loop: a slice assignment
# is slower): the result may be written over an input (``out=g`` in the engine's in-place
# backward), and LLVM vectorises a loop only after a run-time check that its output does not
# overlap its inputs (a Swish gradient written over g ran scalar: 21 ms instead of 3.7 ms on
# [500, 8, 1024]).
CHUNK = 1024


@njit(**_OPTS)
def _sigmoid_rows(x, y, i0, i1, times_x=False):
    """``y = sigmoid(x)``, or ``x * sigmoid(x)`` (Swish) with ``times_x``."""
    buf = np.empty(CHUNK, y.dtype)
    for c in range(i0, i1, CHUNK):
        xs, ys = x[c:min(c + CHUNK, i1)], y[c:min(c + CHUNK, i1)]
        for i in range(xs.size):
            s = _sigmoid(xs[i])
            buf[i] = xs[i] * s if times_x else s
        for i in range(xs.size):
            ys[i] = buf[i]


@njit(**_OPTS)
def _swish_grad(g, x, y, gx, i0, i1):
    buf = np.empty(CHUNK, gx.dtype)
    for c in range(i0, i1, CHUNK):
        gs, xs = g[c:min(c + CHUNK, i1)], x[c:min(c + CHUNK, i1)]
        for i in range(gs.size):
            s = _sigmoid(xs[i])
            buf[i] = gs[i] * s * (1 + xs[i] * (1 - s))
        gxs = gx[c:min(c + CHUNK, i1)]
        for i in range(gs.size):
            gxs[i] = buf[i]


# row: (forward(x, y, i0, i1), gradient(g, x, y, gx, i0, i1) or None: the ufunc, which is as
# fast where the gradient needs no exp); a gradient kernel is passed g in place of an x or y
# that its row does not read
FAST = {"sigmoid": (_sigmoid_rows, None),
        "swish": (functools.partial(_sigmoid_rows, times_x=True), _swish_grad)}


def _flat(a, dtype, shape):
    """``a`` as a flat array when it is C-contiguous of ``dtype`` and ``shape``, else None."""
    if isinstance(a, np.ndarray) and a.dtype == dtype and a.shape == shape and \
            a.flags.c_contiguous:
        return a.reshape(-1)
    return None


def _fast(kernel, first, *others, out=None):
    """``kernel(*flat arrays, result, i0, i1)`` over the elements of ``first`` split into the
    kernel threads' blocks, when ``first``, ``others`` and ``out`` are all C-contiguous of one
    float dtype and shape; returns the result, or None (the caller takes the ufunc)."""
    if first.dtype not in (np.float32, np.float64):
        return None
    flats = [_flat(a, first.dtype, first.shape) for a in (first, *others)]
    res = np.empty(first.shape, first.dtype) if out is None else out
    rf = _flat(res, first.dtype, first.shape)
    if rf is None or any(f is None for f in flats):
        return None
    run_blocks(lambda i0, i1: kernel(*flats, rf, i0, i1), row_blocks(first.size))
    return res


def unary(name, x, p=0.0, q=0.0, out=None):
    """Forward of unary row ``name`` on ``x`` (into ``out`` when given)."""
    row = UNARY[name]
    x = _float(np.asarray(x))
    if name in FAST:
        y = _fast(FAST[name][0], x, out=out)
        if y is not None:
            return y
    if row.numpy is not None:
        return _call(row.numpy, (x,), out)
    return _call(ufunc(row.fwd), (x, p, q), out)


def _like(a, g):
    if a is None:
        return g
    return a if a.dtype == g.dtype else a.astype(g.dtype)


def unary_grad(name, g, x, y, p=0.0, q=0.0, out=None):
    """Gradient of unary row ``name``: ``g``, input ``x`` and output ``y`` (None when unread)."""
    if FAST.get(name, (None, None))[1] is not None:
        gx = _fast(FAST[name][1], g, g if x is None else x, g if y is None else y, out=out)
        if gx is not None:
            return gx
    return _call(ufunc(UNARY[name].grad), (g, _like(x, g), _like(y, g), p, q), out)


def binary(name, a, b, out=None):
    """Forward of binary row ``name`` (numpy broadcasting and dtypes)."""
    return _call(BINARY[name].numpy, (a, b), out)


def binary_grad(name, g, a, b, y, want=(True, True), out=None):
    """Gradients ``(ga, gb)`` of binary row ``name`` at g's shape; ``out``: where ``ga`` may be
    written (``g`` itself when the engine allows; ``gb`` is computed first)."""
    row = BINARY[name]
    args = (g, _like(a, g), _like(b, g), _like(y, g))
    grads = [None, None]
    for k in (1, 0):
        fn = (row.grad_a, row.grad_b)[k]
        if want[k]:
            grads[k] = g if fn is None else _call(ufunc(fn), args, out if k == 0 else None)
    return tuple(grads)


# -- GLU --------------------------------------------------------------------------------------
@njit(**_OPTS)
def _glu_fwd(x, y, r0, r1):
    """``y[r, m] = x[r, 0, m] * sigmoid(x[r, 1, m])`` for rows r0..r1 of ``x [R, 2, M]``."""
    M = y.shape[1]
    for r in range(r0, r1):
        for m in range(M):
            y[r, m] = x[r, 0, m] * _sigmoid(x[r, 1, m])


@njit(**_OPTS)
def _glu_grad(g, x, gx, r0, r1):
    M = g.shape[1]
    for r in range(r0, r1):
        for m in range(M):
            s = _sigmoid(x[r, 1, m])
            gx[r, 0, m] = g[r, m] * s
            gx[r, 1, m] = g[r, m] * x[r, 0, m] * s * (1 - s)


def _halves(shape, axis):
    """``(R, C * M)``: ``[..., 2C, ...]`` (2C at ``axis``) seen as ``[R, 2, C * M]``."""
    axis = axis % len(shape)
    R = int(np.prod(shape[:axis], dtype=np.int64))
    return R, int(np.prod(shape[axis + 1:], dtype=np.int64)) * (shape[axis] // 2)


def glu(x, axis=-1):
    """Gated linear unit: ``a * sigmoid(b)`` of the first and second halves ``a``, ``b`` of
    ``axis`` (even size) -> x's shape with that axis halved."""
    x = np.asarray(x)
    x = np.ascontiguousarray(x, x.dtype if x.dtype in (np.float32, np.float64) else np.float32)
    R, M = _halves(x.shape, axis)
    shape = list(x.shape)
    shape[axis] //= 2
    y = np.empty((R, M), x.dtype)
    x3 = x.reshape(R, 2, M)
    run_blocks(lambda r0, r1: _glu_fwd(x3, y, r0, r1), row_blocks(R, M))
    return y.reshape(shape)


def glu_backward(g, x, axis=-1):
    """Gradient of :func:`glu` with respect to ``x`` for the output gradient ``g``."""
    x = np.asarray(x)
    dt = np.result_type(g, x)
    dt = dt if dt in (np.float32, np.float64) else np.dtype(np.float32)
    R, M = _halves(x.shape, axis)
    g2 = np.ascontiguousarray(g, dt).reshape(R, M)
    x3 = np.ascontiguousarray(x, dt).reshape(R, 2, M)
    gx = np.empty((R, 2, M), dt)
    run_blocks(lambda r0, r1: _glu_grad(g2, x3, gx, r0, r1), row_blocks(R, 2 * M))
    return gx.reshape(x.shape)
