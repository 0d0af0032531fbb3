"""Elementwise math and activations: each op is its forward and a one-line gradient rule.

Binary ops broadcast like numpy; their gradients are returned at the output's shape and the
engine sums them back to each input's shape.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from asrkit.graph.broadcast import broadcast_type
from asrkit.graph.node import bind
from asrkit.graph.primitive import Primitive
from asrkit.ops._rules import float_dtype, same_type

SQRT_2 = math.sqrt(2.0)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


@njit(cache=True, nogil=True)
def _erf_flat(x, out):
    for i in range(x.size):
        out[i] = math.erf(x[i])


def _erf(x):
    """erf of a float array (numpy has none), elementwise, as a new array."""
    x = np.ascontiguousarray(x)
    out = np.empty_like(x)
    _erf_flat(x.reshape(-1), out.reshape(-1))
    return out


def _unary(name, fwd, grad, needs, keeps_zero, attrs=()):
    """Register unary op ``name``: ``fwd(x, out, **attrs)``, ``grad(g, y, x, out, **attrs)``.

    The gradient rule writes into ``out`` when given: the engine passes ``g`` itself when it may
    be overwritten (in-place backward), else None.
    """
    prim = Primitive(
        name, ("x",), same_type,
        forward=lambda ctx, x, out=None, **a: fwd(x, out, **a),
        backward=lambda ctx, g, y, x, **a: (grad(g, y, x, g if ctx.g_writable else None, **a),),
        needs=needs, keeps_padding_zero=keeps_zero, out_shape=lambda x, **a: x.shape,
        inplace=True, cheap=True)

    def op(x, name="", **kwargs):
        unknown = set(kwargs) - set(attrs)
        if unknown:
            raise TypeError(f"{prim.name}() got unexpected arguments {sorted(unknown)}")
        return bind(prim, [x], name=name, **kwargs)

    op.__name__ = name
    op.primitive = prim
    return op


# Gradient rules as single-pass numba loops over flat views: no temporaries, and they can write
# into g. Plain njit functions compile on first use and load fully from numba's cache; eager
# ``@vectorize`` ufuncs rebuilt their wrappers at every import of asrkit.ops (~1 s per
# signature, paid by every command that loads a model).
@njit(cache=True, nogil=True)
def _relu_grad(g, x, out):
    for i in range(g.size):
        out[i] = g[i] if x[i] > 0 else 0.0


@njit(cache=True, nogil=True)
def _tanh_grad(g, y, out):
    for i in range(g.size):
        out[i] = g[i] * (1.0 - y[i] * y[i])


@njit(cache=True, nogil=True)
def _sigmoid_grad(g, y, out):
    for i in range(g.size):
        out[i] = g[i] * y[i] * (1.0 - y[i])


def _ufunc_grad(fn, g, other, out):
    """``fn`` over ``g`` and ``other`` into ``out`` (or a new array); None where the arrays are
    not C-contiguous float32/float64 arrays of one dtype and shape (then the caller uses
    plain numpy)."""
    arrays = (g, other) if out is None else (g, other, out)
    if not all(isinstance(a, np.ndarray) and a.flags.c_contiguous for a in arrays):
        return None
    if g.dtype not in (np.float32, np.float64) or any(a.dtype != g.dtype or a.shape != g.shape
                                                       for a in arrays):
        return None
    res = np.empty_like(g) if out is None else out
    fn(g.reshape(-1), other.reshape(-1), res.reshape(-1))
    return res


def _or(result, fallback):
    return fallback() if result is None else result


def _f(x):
    return x if x.dtype.kind == "f" else x.astype(np.float32)


neg = _unary("neg", lambda x, out: np.negative(x, out=out),
             lambda g, y, x, out: np.negative(g, out=out), (), True)
exp = _unary("exp", lambda x, out: np.exp(_f(x), out=out),
             lambda g, y, x, out: np.multiply(g, y, out=out), ("out",), False)
log = _unary("log", lambda x, out: np.log(_f(x), out=out),
             lambda g, y, x, out: np.divide(g, x, out=out), (0,), False)
sqrt = _unary("sqrt", lambda x, out: np.sqrt(_f(x), out=out),
              lambda g, y, x, out: np.multiply(g, 0.5 / y, out=out), ("out",), False)
abs = _unary("abs", lambda x, out: np.abs(x, out=out),
             lambda g, y, x, out: np.multiply(g, np.sign(x), out=out), (0,), True)
tanh = _unary("tanh", lambda x, out: np.tanh(_f(x), out=out),
              lambda g, y, x, out: _or(_ufunc_grad(_tanh_grad, g, y, out), lambda: g * (1 - y * y)),
              ("out",), True)


def _sigmoid(x, out):
    x = _f(x)
    # Two branches keep exp() from overflowing for large |x|.
    e = np.exp(-np.abs(x))
    return np.divide(np.where(x >= 0, 1.0, e), 1.0 + e, out=out)


sigmoid = _unary("sigmoid", _sigmoid, lambda g, y, x, out: _or(
    _ufunc_grad(_sigmoid_grad, g, y, out), lambda: g * y * (1 - y)), ("out",), False)
relu = _unary("relu", lambda x, out: np.maximum(x, 0, out=out), lambda g, y, x, out: _or(
    _ufunc_grad(_relu_grad, g, x, out), lambda: g * (x > 0)), (0,), True)
leaky_relu = _unary(
    "leaky_relu", lambda x, out, alpha=0.01: np.where(x > 0, x, alpha * x),
    lambda g, y, x, out, alpha=0.01: np.multiply(g, np.where(x > 0, 1.0, alpha).astype(g.dtype),
                                                 out=out), (0,), True,
    attrs=("alpha",))
elu = _unary(
    "elu", lambda x, out, alpha=1.0: np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0))),
    lambda g, y, x, out, alpha=1.0: np.multiply(g, np.where(x > 0, 1.0, y + alpha).astype(g.dtype),
                                                out=out), (0, "out"),
    True, attrs=("alpha",))
softplus = _unary(
    "softplus", lambda x, out: np.add(np.log1p(np.exp(-np.abs(_f(x)))), np.maximum(x, 0), out=out),
    lambda g, y, x, out: np.multiply(g, _sigmoid(x, None), out=out), (0,), False)


def _gelu(x, out):
    x = _f(x)
    return np.multiply(x, 0.5 * (1.0 + _erf(x / x.dtype.type(SQRT_2))), out=out)


def _gelu_grad(g, y, x, out):
    cdf = 0.5 * (1.0 + _erf(x / x.dtype.type(SQRT_2)))
    return np.multiply(g, cdf + x * INV_SQRT_2PI * np.exp(-0.5 * x * x), out=out)


gelu = _unary("gelu", _gelu, _gelu_grad, (0,), True)
gelu.__doc__ = "Exact GELU ``x * Phi(x)`` (erf form, as torch.nn.GELU())."


def _clip_fwd(x, out, min_value=None, max_value=None):
    return np.clip(x, min_value, max_value, out=out)


def _clip_grad(g, y, x, out, min_value=None, max_value=None):
    keep = np.ones(x.shape, bool)
    if min_value is not None:
        keep &= x >= min_value
    if max_value is not None:
        keep &= x <= max_value
    return np.multiply(g, keep, out=out)


clip = _unary("clip", _clip_fwd, _clip_grad, (0,), False, attrs=("min_value", "max_value"))

for _op, _doc in [(neg, "-x"), (exp, "e**x"), (log, "natural log"), (sqrt, "square root"),
                  (abs, "|x|"), (tanh, "tanh"), (sigmoid, "logistic 1 / (1 + e**-x)"),
                  (relu, "max(x, 0)"), (leaky_relu, "x if x > 0 else alpha * x (alpha=0.01)"),
                  (elu, "x if x > 0 else alpha * (e**x - 1) (alpha=1)"),
                  (softplus, "log(1 + e**x), computed stably"),
                  (clip, "clip to [min_value, max_value] (gradient 0 outside)")]:
    _op.__doc__ = f"Elementwise {_doc}: node -> node of the same shape (float)."


# -- binary ---------------------------------------------------------------------------------
def _broadcast_rule(prim, a, b):
    t = broadcast_type(prim, a, b)
    if prim.name in ("div", "pow"):
        t.dtype = float_dtype(a, b)
    return t


def _out_shape(a, b):
    return np.broadcast_shapes(a.shape, b.shape)


def _want(ctx, k):
    return ctx.needs_grad is None or ctx.needs_grad[k]


def _binary(name, fwd, grad, needs, keeps_zero):
    prim = Primitive(
        name, ("a", "b"), _broadcast_rule,
        forward=lambda ctx, a, b, out=None: fwd(a, b, out),
        backward=lambda ctx, g, y, a, b: grad(ctx, g, y, a, b),
        needs=needs, keeps_padding_zero=keeps_zero, out_shape=_out_shape, inplace=True,
        cheap=True)

    def op(a, b, name=""):
        return bind(prim, [a, b], name=name)

    op.__name__ = name
    op.primitive = prim
    return op


add = _binary("add", lambda a, b, out: np.add(a, b, out=out), lambda c, g, y, a, b: (g, g),
              (), False)
sub = _binary("sub", lambda a, b, out: np.subtract(a, b, out=out),
              lambda c, g, y, a, b: (g, -g if _want(c, 1) else None), (), False)
def _mul_grad(c, g, y, a, b):
    gb = g * a if _want(c, 1) else None
    ga = np.multiply(g, b, out=g if c.g_writable else None) if _want(c, 0) else None
    return ga, gb


def _div_grad(c, g, y, a, b):
    gb = -g * y / b if _want(c, 1) else None
    ga = np.divide(g, b, out=g if c.g_writable else None) if _want(c, 0) else None
    return ga, gb


mul = _binary("mul", lambda a, b, out: np.multiply(a, b, out=out), _mul_grad, (0, 1), True)
div = _binary("div", lambda a, b, out: np.divide(_f(a), b, out=out), _div_grad, (1, "out"),
              False)


def _pow_grad(c, g, y, a, b):
    ga = g * b * np.power(a, b - 1) if _want(c, 0) else None
    gb = None
    if _want(c, 1):
        with np.errstate(divide="ignore", invalid="ignore"):
            gb = g * y * np.where(a > 0, np.log(np.where(a > 0, a, 1)), 0)
    return ga, gb


pow = _binary("pow", lambda a, b, out: np.power(_f(a), b, out=out), _pow_grad, (0, 1, "out"),
              False)


def _max_grad(c, g, y, a, b):
    pick_a = a >= b
    return (g * pick_a if _want(c, 0) else None, g * ~pick_a if _want(c, 1) else None)


def _min_grad(c, g, y, a, b):
    pick_a = a <= b
    return (g * pick_a if _want(c, 0) else None, g * ~pick_a if _want(c, 1) else None)


maximum = _binary("maximum", lambda a, b, out: np.maximum(a, b, out=out), _max_grad, (0, 1),
                  False)
minimum = _binary("minimum", lambda a, b, out: np.minimum(a, b, out=out), _min_grad, (0, 1),
                  False)

for _op, _doc in [(add, "a + b"), (sub, "a - b"), (mul, "a * b"), (div, "a / b"),
                  (pow, "a ** b (d/db uses log a, defined for a > 0)"),
                  (maximum, "max(a, b) (ties go to a)"), (minimum, "min(a, b) (ties go to a)")]:
    _op.__doc__ = f"Elementwise {_doc} with numpy broadcasting: nodes -> node."


def _stop_rule(prim, x):
    return x.type


stop_gradient_p = Primitive("stop_gradient", ("x",), _stop_rule, lambda ctx, x: x, None,
                            view=True, keeps_padding_zero=True)


def stop_gradient(x, name=""):
    """Identity in the forward pass; no gradient flows back through it."""
    return bind(stop_gradient_p, [x], name=name)


def _identity_bwd(ctx, g, y, x):
    return (g,)


identity_p = Primitive("identity", ("x",), _stop_rule, lambda ctx, x: x, _identity_bwd, needs=(),
                       view=True, keeps_padding_zero=True, cheap=True)


def identity(x, name=""):
    """Identity (useful to name a node): returns a node with ``x``'s value."""
    return bind(identity_p, [x], name=name)


def square(x, name=""):
    """Elementwise ``x * x``."""
    return mul(x, x, name=name)


def reciprocal(x, name=""):
    """Elementwise ``1 / x``."""
    return div(1.0, x, name=name)
