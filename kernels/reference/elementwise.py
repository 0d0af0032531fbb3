"""Plain-numpy twins of the element-wise table (:mod:`asrkit.kernels.elementwise`).

Whole-array numpy expressions, written independently of the table's scalar functions, so the
tests compare the generated CPU ufuncs and CUDA kernels against them. Same signatures as the
other devices; results have the float dtype of the inputs.
"""

from __future__ import annotations

import math

import numpy as np

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _sigmoid(x):
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0, e) / (1.0 + e)


def _gelu_cdf(x):
    return 0.5 * (1.0 + _erf(x / math.sqrt(2.0)))


def _safe_div(a, b):
    return np.divide(a, b, out=np.zeros(np.broadcast_shapes(np.shape(a), np.shape(b))),
                     where=b != 0)


UNARY = {  # name: (forward(x, p, q), gradient(g, x, y, p, q))
    "neg": (lambda x, p, q: -x, lambda g, x, y, p, q: -g),
    "exp": (lambda x, p, q: np.exp(x), lambda g, x, y, p, q: g * y),
    "log": (lambda x, p, q: np.log(x), lambda g, x, y, p, q: _safe_div(g, x)),
    "sqrt": (lambda x, p, q: np.sqrt(x), lambda g, x, y, p, q: _safe_div(0.5 * g, y)),
    "abs": (lambda x, p, q: np.abs(x), lambda g, x, y, p, q: g * np.sign(x)),
    "tanh": (lambda x, p, q: np.tanh(x), lambda g, x, y, p, q: g * (1 - y * y)),
    "sigmoid": (lambda x, p, q: _sigmoid(x), lambda g, x, y, p, q: g * y * (1 - y)),
    "swish": (lambda x, p, q: x * _sigmoid(x),
              lambda g, x, y, p, q: g * _sigmoid(x) * (1 + x * (1 - _sigmoid(x)))),
    "relu": (lambda x, p, q: np.maximum(x, 0), lambda g, x, y, p, q: g * (x > 0)),
    "leaky_relu": (lambda x, p, q: np.where(x > 0, x, p * x),
                   lambda g, x, y, p, q: g * np.where(x > 0, 1.0, p)),
    "elu": (lambda x, p, q: np.where(x > 0, x, p * np.expm1(np.minimum(x, 0))),
            lambda g, x, y, p, q: g * np.where(x > 0, 1.0, y + p)),
    "softplus": (lambda x, p, q: np.logaddexp(0, x), lambda g, x, y, p, q: g * _sigmoid(x)),
    "gelu": (lambda x, p, q: x * _gelu_cdf(x),
             lambda g, x, y, p, q: g * (_gelu_cdf(x) + x * np.exp(-0.5 * x * x)
                                        / math.sqrt(2 * math.pi))),
    "clip": (lambda x, p, q: np.clip(x, p, q), lambda g, x, y, p, q: g * ((x >= p) & (x <= q))),
}


def _pow_grad_b(g, a, b, y):
    with np.errstate(divide="ignore", invalid="ignore"):
        return g * y * np.where(a > 0, np.log(np.where(a > 0, a, 1)), 0)


BINARY = {  # name: (forward(a, b), gradient for a, gradient for b) of (g, a, b, y)
    "add": (np.add, lambda g, a, b, y: g, lambda g, a, b, y: g),
    "sub": (np.subtract, lambda g, a, b, y: g, lambda g, a, b, y: -g),
    "mul": (np.multiply, lambda g, a, b, y: g * b, lambda g, a, b, y: g * a),
    "div": (np.divide, lambda g, a, b, y: _safe_div(g, b),
            lambda g, a, b, y: _safe_div(-g * y, b)),
    "pow": (np.power, lambda g, a, b, y: g * b * np.power(a, b - 1), _pow_grad_b),
    "maximum": (np.maximum, lambda g, a, b, y: g * (a >= b), lambda g, a, b, y: g * (a < b)),
    "minimum": (np.minimum, lambda g, a, b, y: g * (a <= b), lambda g, a, b, y: g * (a > b)),
}


def _float(*arrays):
    return np.result_type(*[a for a in arrays if a is not None], np.float32)


def _store(r, dtype, out):
    r = np.asarray(r, dtype)
    if out is None:
        return r
    out[...] = r
    return out


def unary(name, x, p=0.0, q=0.0, out=None):
    """Forward of unary row ``name``: ``x`` -> array like ``x`` (float)."""
    dt = _float(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        return _store(UNARY[name][0](np.asarray(x, dt), p, q), dt, out)


def unary_grad(name, g, x, y, p=0.0, q=0.0, out=None):
    """Gradient of unary row ``name`` from ``g`` and the input ``x`` / output ``y``."""
    return _store(UNARY[name][1](g, x, y, p, q), g.dtype, out)


def binary(name, a, b, out=None):
    """Forward of binary row ``name`` with numpy broadcasting."""
    dt = _float(a, b)
    with np.errstate(divide="ignore", invalid="ignore"):
        return _store(BINARY[name][0](np.asarray(a, dt), np.asarray(b, dt)), dt, out)


def binary_grad(name, g, a, b, y, want=(True, True), out=None):
    """Gradients ``(ga, gb)`` of binary row ``name`` at g's shape (None where not wanted;
    ``out`` is not used)."""
    _, fa, fb = BINARY[name]
    with np.errstate(divide="ignore", invalid="ignore"):
        return tuple(np.asarray(np.broadcast_to(f(g, a, b, y), g.shape), g.dtype) if w else None
                     for f, w in zip((fa, fb), want))


def glu(x, axis=-1):
    """Gated linear unit: ``a * sigmoid(b)`` of the halves ``a``, ``b`` of ``axis`` (even)."""
    a, b = np.split(np.asarray(x, _float(x)), 2, axis=axis)
    return a * _sigmoid(b)


def glu_backward(g, x, axis=-1):
    """Gradient of :func:`glu` with respect to ``x`` for the output gradient ``g``."""
    a, b = np.split(np.asarray(x, _float(x, g)), 2, axis=axis)
    s = _sigmoid(b)
    return np.concatenate([g * s, g * a * s * (1 - s)], axis=axis)
