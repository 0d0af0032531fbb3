"""Element-wise maths: one table for every device, and the kernels it generates.

Each row of :data:`UNARY` and :data:`BINARY` gives an op's forward and gradient as scalar
functions of plain ``math``, which Numba compiles twice: into CPU ufuncs
(:mod:`asrkit.kernels.cpu.elementwise`) and into the one CUDA unary kernel pair and the one
binary pair, which pick the row by its index (:mod:`asrkit.kernels.cuda.elementwise`). The
numpy twins, the specification the tests hold both against, are
:mod:`asrkit.kernels.reference.elementwise`. The op catalogue (``asrkit.ops.elementwise``) makes
one primitive per row.

Signatures (values in float64 registers, stored in the arrays' dtype):

- unary ``fwd(x, p, q)``, ``grad(g, x, y, p, q)``: ``p``, ``q`` are the row's attributes
  (``params``: name and default; ``None`` defaults become -inf / +inf);
- binary ``fwd(a, b)``, ``grad_a(g, a, b, y)``, ``grad_b(g, a, b, y)``; a gradient of ``None``
  passes ``g`` through unchanged (add, and sub's ``a``).

``reads`` names what the gradients read (``x``/``y``; ``a``/``b``/``y``), so the engine keeps
only that; ``zero`` says that 0 maps to 0 and a zero ``g`` gives zero gradients (so padding
stays zero without masking). ``numpy``: a numpy ufunc with the same forward, which the CPU runs
instead of the generated ufunc (numpy's SIMD loops for exp, log, tanh, ... are faster than a
libm call per element). Divisions by zero give 0 in gradients: they only meet padding frames,
which the engine masks.

Every function here takes ``device=`` (``"reference"``, ``"cpu"``, ``"cuda"``; None follows the
arrays) like the other kernels.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from asrkit.kernels._device import resolve_device

INV_SQRT_2 = 1.0 / math.sqrt(2.0)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


class Unary(NamedTuple):
    """A row of :data:`UNARY` (see the module docstring)."""

    fwd: Callable
    grad: Callable
    reads: str
    zero: bool
    numpy: Callable | None = None
    params: tuple = ()


class Binary(NamedTuple):
    """A row of :data:`BINARY` (see the module docstring)."""

    fwd: Callable
    grad_a: Callable | None
    grad_b: Callable | None
    reads: str
    zero: bool
    numpy: Callable | None = None


# -- unary rows -------------------------------------------------------------------------------
def neg(x, p, q):
    return -x


def neg_grad(g, x, y, p, q):
    return -g


def exp(x, p, q):
    return math.exp(x)


def exp_grad(g, x, y, p, q):
    return g * y


def log(x, p, q):
    if x > 0:
        return math.log(x)
    return -math.inf if x == 0 else math.nan


def log_grad(g, x, y, p, q):
    return g / x if x != 0 else 0.0


def sqrt(x, p, q):
    return math.sqrt(x) if x >= 0 else math.nan


def sqrt_grad(g, x, y, p, q):
    return g * 0.5 / y if y != 0 else 0.0


def abs_(x, p, q):
    return abs(x)


def abs_grad(g, x, y, p, q):
    if x > 0:
        return g
    return -g if x < 0 else 0.0


def tanh(x, p, q):
    return math.tanh(x)


def tanh_grad(g, x, y, p, q):
    return g * (1.0 - y * y)


def sigmoid(x, p, q):
    if x >= 0:  # two branches keep exp() from overflowing
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def sigmoid_grad(g, x, y, p, q):
    return g * y * (1.0 - y)


def swish(x, p, q):  # x * sigmoid(x): SiLU
    if x >= 0:
        return x / (1.0 + math.exp(-x))
    e = math.exp(x)
    return x * e / (1.0 + e)


def swish_grad(g, x, y, p, q):  # sigmoid(x) * (1 + x * (1 - sigmoid(x)))
    if x >= 0:
        s = 1.0 / (1.0 + math.exp(-x))
    else:
        e = math.exp(x)
        s = e / (1.0 + e)
    return g * s * (1.0 + x * (1.0 - s))


def relu(x, p, q):
    return x if x > 0 else 0.0


def relu_grad(g, x, y, p, q):
    return g if x > 0 else 0.0


def leaky_relu(x, p, q):
    return x if x > 0 else p * x


def leaky_relu_grad(g, x, y, p, q):
    return g if x > 0 else g * p


def elu(x, p, q):
    return x if x > 0 else p * math.expm1(x)


def elu_grad(g, x, y, p, q):
    return g if x > 0 else g * (y + p)


def softplus(x, p, q):
    return math.log1p(math.exp(-abs(x))) + max(x, 0.0)


def softplus_grad(g, x, y, p, q):  # g * sigmoid(x)
    if x >= 0:
        return g / (1.0 + math.exp(-x))
    e = math.exp(x)
    return g * e / (1.0 + e)


def gelu(x, p, q):
    return x * 0.5 * (1.0 + math.erf(x * INV_SQRT_2))


def gelu_grad(g, x, y, p, q):
    cdf = 0.5 * (1.0 + math.erf(x * INV_SQRT_2))
    return g * (cdf + x * INV_SQRT_2PI * math.exp(-0.5 * x * x))


def clip(x, p, q):
    return min(max(x, p), q)


def clip_grad(g, x, y, p, q):
    return g if p <= x <= q else 0.0


UNARY: dict[str, Unary] = {
    "neg": Unary(neg, neg_grad, "", True, np.negative),
    "exp": Unary(exp, exp_grad, "y", False, np.exp),
    "log": Unary(log, log_grad, "x", False, np.log),
    "sqrt": Unary(sqrt, sqrt_grad, "y", False, np.sqrt),
    "abs": Unary(abs_, abs_grad, "x", True, np.abs),
    "tanh": Unary(tanh, tanh_grad, "y", True, np.tanh),
    "sigmoid": Unary(sigmoid, sigmoid_grad, "y", False),
    "swish": Unary(swish, swish_grad, "x", True),
    "relu": Unary(relu, relu_grad, "x", True),
    "leaky_relu": Unary(leaky_relu, leaky_relu_grad, "x", True, params=(("alpha", 0.01),)),
    "elu": Unary(elu, elu_grad, "xy", True, params=(("alpha", 1.0),)),
    "softplus": Unary(softplus, softplus_grad, "x", False),
    "gelu": Unary(gelu, gelu_grad, "x", True),
    "clip": Unary(clip, clip_grad, "x", False, params=(("min_value", None), ("max_value", None))),
}


# -- binary rows ------------------------------------------------------------------------------
def add(a, b):
    return a + b


def sub(a, b):
    return a - b


def sub_grad_b(g, a, b, y):
    return -g


def mul(a, b):
    return a * b


def mul_grad_a(g, a, b, y):
    return g * b


def mul_grad_b(g, a, b, y):
    return g * a


def div(a, b):
    if b != 0:
        return a / b
    if a == 0 or a != a:
        return math.nan
    return math.copysign(math.inf, a) * math.copysign(1.0, b)


def div_grad_a(g, a, b, y):
    return g / b if b != 0 else 0.0


def div_grad_b(g, a, b, y):
    return -g * y / b if b != 0 else 0.0


def pow_(a, b):
    if a < 0 and b != math.floor(b):
        return math.nan
    if a == 0 and b < 0:
        return math.inf
    return math.pow(a, b)


def pow_grad_a(g, a, b, y):
    e = b - 1.0
    if a < 0 and e != math.floor(e):
        return math.nan
    if a == 0 and e < 0:
        return g * b * math.inf
    return g * b * math.pow(a, e)


def pow_grad_b(g, a, b, y):  # d/db uses log a, defined for a > 0
    return g * y * math.log(a) if a > 0 else 0.0


def maximum(a, b):
    return a if a >= b else b


def maximum_grad_a(g, a, b, y):  # ties go to a
    return g if a >= b else 0.0


def maximum_grad_b(g, a, b, y):
    return 0.0 if a >= b else g


def minimum(a, b):
    return a if a <= b else b


def minimum_grad_a(g, a, b, y):
    return g if a <= b else 0.0


def minimum_grad_b(g, a, b, y):
    return 0.0 if a <= b else g


BINARY: dict[str, Binary] = {
    "add": Binary(add, None, None, "", False, np.add),
    "sub": Binary(sub, None, sub_grad_b, "", False, np.subtract),
    "mul": Binary(mul, mul_grad_a, mul_grad_b, "ab", True, np.multiply),
    "div": Binary(div, div_grad_a, div_grad_b, "by", False, np.divide),
    "pow": Binary(pow_, pow_grad_a, pow_grad_b, "aby", False, np.power),
    "maximum": Binary(maximum, maximum_grad_a, maximum_grad_b, "ab", False, np.maximum),
    "minimum": Binary(minimum, minimum_grad_a, minimum_grad_b, "ab", False, np.minimum),
}


def params(name: str, attrs: dict) -> tuple[float, float]:
    """The ``(p, q)`` scalars of unary row ``name`` from an op's attributes (defaults filled)."""
    vals = [attrs.get(k, d) for k, d in UNARY[name].params]
    vals = [(-math.inf if i == 0 else math.inf) if v is None else float(v)
            for i, v in enumerate(vals)]
    return tuple(vals + [0.0] * (2 - len(vals)))


# -- dispatch ---------------------------------------------------------------------------------
def _module(device, *arrays):
    dev = resolve_device(device, *(a for a in arrays if a is not None))
    return importlib.import_module(f"asrkit.kernels.{dev}.elementwise")


def unary(name, x, p=0.0, q=0.0, out=None, device=None):
    """Row ``name`` of :data:`UNARY` on float array ``x`` (any shape) -> array like ``x``.

    out: an array of x's shape and dtype to write into (may be ``x``).
    """
    return _module(device, x).unary(name, x, p, q, out)


def unary_grad(name, g, x, y, p=0.0, q=0.0, out=None, device=None):
    """Gradient of :func:`unary`: ``g`` (the output's gradient), ``x`` the input and ``y`` the
    output, each of g's shape (None when the row does not read it) -> array like ``g``."""
    return _module(device, g).unary_grad(name, g, x, y, p, q, out)


def binary(name, a, b, out=None, device=None):
    """Row ``name`` of :data:`BINARY` with numpy broadcasting -> array of the broadcast shape."""
    return _module(device, a, b).binary(name, a, b, out)


def binary_grad(name, g, a, b, y, want=(True, True), out=None, device=None):
    """Gradients ``(ga, gb)`` of :func:`binary` at the output's (g's) shape; ``a``, ``b``, ``y``
    broadcast against ``g`` (None when the row does not read them); ``want[k]`` False gives
    None for that input. A pass-through gradient is ``g`` itself. out: where the cpu may write
    ``ga`` (``g`` itself, when its owner allows)."""
    return _module(device, g).binary_grad(name, g, a, b, y, want, out)


def glu(x, axis=-1, device=None):
    """Gated linear unit ``a * sigmoid(b)`` of the first and second halves ``a``, ``b`` of
    ``axis`` of float array ``x`` (even size there) -> x's shape with that axis halved."""
    return _module(device, x).glu(x, axis)


def glu_backward(g, x, axis=-1, device=None):
    """Gradient of :func:`glu` with respect to ``x`` (x's shape) for the output gradient
    ``g``."""
    return _module(device, g, x).glu_backward(g, x, axis)
