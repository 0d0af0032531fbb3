"""Element-wise maths on the CPU: numba ufuncs generated from the table.

Each scalar function of :mod:`asrkit.kernels.elementwise` becomes a float32/float64 ufunc on
first use (compiled once, cached on disk), so a forward or a gradient is one pass over memory
that may write into a given buffer, and binary gradients broadcast like numpy. Rows with a
``numpy`` ufunc run that instead for the forward (SIMD loops; measured faster than a libm call
per element for exp, log, tanh). Integer inputs are computed in float32.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import vectorize

from asrkit.kernels.elementwise import BINARY, UNARY


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


def unary(name, x, p=0.0, q=0.0, out=None):
    """Forward of unary row ``name`` on ``x`` (into ``out`` when given)."""
    row = UNARY[name]
    x = _float(np.asarray(x))
    if row.numpy is not None:
        return _call(row.numpy, (x,), out)
    return _call(ufunc(row.fwd), (x, p, q), out)


def _like(a, g):
    if a is None:
        return g
    return a if a.dtype == g.dtype else a.astype(g.dtype)


def unary_grad(name, g, x, y, p=0.0, q=0.0, out=None):
    """Gradient of unary row ``name``: ``g``, input ``x`` and output ``y`` (None when unread)."""
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
