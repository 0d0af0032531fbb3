"""Elementwise math and activations: one primitive per row of the kernels' element-wise table.

The table (:mod:`asrkit.kernels.elementwise`) holds each op's forward, gradient, what the
gradient reads and whether zeros stay zeros; the same functions run on every device (numba
ufuncs on the CPU, the generated kernel pair on CUDA). Binary ops broadcast like numpy; their
gradients are returned at the output's shape and the engine sums them back to each input's.
"""

from __future__ import annotations

import numpy as np

from asrkit.graph.broadcast import broadcast_type
from asrkit.graph.node import bind
from asrkit.graph.primitive import Primitive
from asrkit.kernels import elementwise as ew
from asrkit.ops._rules import float_dtype, same_type


def _f(x):
    return x if x.dtype.kind == "f" else x.astype(np.float32)


def _needs(reads, names):
    return tuple(names[c] for c in reads)


def _floats(*arrays):
    return all(a is None or np.dtype(a.dtype).kind == "f" for a in arrays)


def _unary(name, doc):
    """Register unary row ``name`` of the table; returns its public function."""
    row = ew.UNARY[name]
    attrs = tuple(k for k, _ in row.params)

    def fwd(ctx, x, out=None, **a):
        return ew.unary(name, _f(x), *ew.params(name, a), out=out, device=ctx.device)

    def bwd(ctx, g, y, x, **a):
        # the gradient may overwrite g when the engine allows (in-place backward)
        out = g if ctx.g_writable else None
        return (ew.unary_grad(name, g, x, y, *ew.params(name, a), out=out, device=ctx.device),)

    def cuda_fwd(ctx, x, **a):
        return fwd(ctx, x, **a) if _floats(x) else NotImplemented

    prim = Primitive(name, ("x",), same_type, fwd, bwd,
                     needs=_needs(row.reads, {"x": 0, "y": "out"}), keeps_padding_zero=row.zero,
                     out_shape=lambda x, **a: x.shape, inplace=True, cheap=True,
                     cuda=cuda_fwd, cuda_backward=bwd)

    def op(x, name="", **kwargs):
        unknown = set(kwargs) - set(attrs)
        if unknown:
            raise TypeError(f"{prim.name}() got unexpected arguments {sorted(unknown)}")
        return bind(prim, [x], name=name, **kwargs)

    op.__name__ = name
    op.__doc__ = f"Elementwise {doc}: node -> node of the same shape (float)."
    op.primitive = prim
    return op


neg = _unary("neg", "-x")
exp = _unary("exp", "e**x")
log = _unary("log", "natural log")
sqrt = _unary("sqrt", "square root")
abs = _unary("abs", "|x|")
tanh = _unary("tanh", "tanh")
sigmoid = _unary("sigmoid", "logistic 1 / (1 + e**-x)")
swish = _unary("swish", "Swish / SiLU ``x * sigmoid(x)`` (torch.nn.SiLU, ESPnet's ``Swish``)")
relu = _unary("relu", "max(x, 0)")
leaky_relu = _unary("leaky_relu", "x if x > 0 else alpha * x (alpha=0.01)")
elu = _unary("elu", "x if x > 0 else alpha * (e**x - 1) (alpha=1)")
softplus = _unary("softplus", "log(1 + e**x), computed stably")
gelu = _unary("gelu", "exact GELU ``x * Phi(x)`` (erf form, as torch.nn.GELU())")
clip = _unary("clip", "clip to [min_value, max_value] (gradient 0 outside)")


# -- binary ---------------------------------------------------------------------------------
_FLOAT_RESULT = ("div", "pow")  # integer inputs give floats


def _broadcast_rule(prim, a, b):
    t = broadcast_type(prim, a, b)
    if prim.name in _FLOAT_RESULT:
        t.dtype = float_dtype(a, b)
    return t


def _out_shape(a, b):
    return np.broadcast_shapes(a.shape, b.shape)


def _binary(name, doc):
    row = ew.BINARY[name]

    def fwd(ctx, a, b, out=None):
        a = _f(a) if name in _FLOAT_RESULT else a
        return ew.binary(name, a, b, out=out, device=ctx.device)

    def bwd(ctx, g, y, a, b):
        want = (True, True) if ctx.needs_grad is None else tuple(ctx.needs_grad)
        return ew.binary_grad(name, g, a, b, y, want, out=g if ctx.g_writable else None,
                              device=ctx.device)

    def cuda_fwd(ctx, a, b):
        return fwd(ctx, a, b) if _floats(a, b) else NotImplemented

    # gradients that pass g on (None) or negate it are zero wherever g is, whatever the forward
    # does to padding (a bias)
    passes_g = all(f is None or f is ew.sub_grad_b for f in (row.grad_a, row.grad_b))
    prim = Primitive(name, ("a", "b"), _broadcast_rule, fwd, bwd,
                     needs=_needs(row.reads, {"a": 0, "b": 1, "y": "out"}),
                     keeps_padding_zero=row.zero, grad_keeps_padding_zero=row.zero or passes_g,
                     out_shape=_out_shape, inplace=True, cheap=True, cuda=cuda_fwd,
                     cuda_backward=bwd)

    def op(a, b, name=""):
        return bind(prim, [a, b], name=name)

    op.__name__ = name
    op.__doc__ = f"Elementwise {doc} with numpy broadcasting: nodes -> node."
    op.primitive = prim
    return op


add = _binary("add", "a + b")
sub = _binary("sub", "a - b")
mul = _binary("mul", "a * b")
div = _binary("div", "a / b")
pow = _binary("pow", "a ** b (d/db uses log a, defined for a > 0)")
maximum = _binary("maximum", "max(a, b) (ties go to a)")
minimum = _binary("minimum", "min(a, b) (ties go to a)")


# -- identities ------------------------------------------------------------------------------
def _stop_rule(prim, x):
    return x.type


def _copy_cuda(ctx, x):
    from asrkit.kernels.cuda.layout import copy

    return copy(x)


stop_gradient_p = Primitive("stop_gradient", ("x",), _stop_rule, lambda ctx, x: x, None,
                            view=True, keeps_padding_zero=True, cuda=_copy_cuda)


def stop_gradient(x, name=""):
    """Identity in the forward pass; no gradient flows back through it."""
    return bind(stop_gradient_p, [x], name=name)


def _identity_bwd(ctx, g, y, x):
    return (g,)


identity_p = Primitive("identity", ("x",), _stop_rule, lambda ctx, x: x, _identity_bwd, needs=(),
                       view=True, keeps_padding_zero=True, cheap=True, cuda=_copy_cuda,
                       cuda_backward=_identity_bwd)


def identity(x, name=""):
    """Identity (useful to name a node): returns a node with ``x``'s value."""
    return bind(identity_p, [x], name=name)


def square(x, name=""):
    """Elementwise ``x * x``."""
    return mul(x, x, name=name)


def reciprocal(x, name=""):
    """Elementwise ``1 / x``."""
    return div(1.0, x, name=name)
