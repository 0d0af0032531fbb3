"""CUDA forwards/backwards of the remaining math ops (registered on import).

Elementwise ops not in :mod:`asrkit.ops.cuda_impls` (abs, sqrt, clip, elu, gelu, leaky_relu,
softplus, pow, maximum, minimum, the division backward), binary ops under general numpy
broadcasting (operands that are not a suffix of the output are materialised with a strided
gather), reductions over static axes and over everything (padding excluded), ``matmul`` against
a matrix (one GEMM through ``asrkit.kernels.cuda.gemm``), ``batch_norm`` and the metrics.

Host work by design: batch norm brings its ``[D]`` statistics to the host to update the running
averages held in the (host) parameter arrays, as the cpu path does in place; ``ctc_greedy_errors``
takes the arg-max path ``int32 [T, B]`` to the host for the edit distances (a small dynamic
programme per sequence whose result is a ``[B]`` metric).
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from asrkit.ops import criteria, cuda_impls, elementwise, linalg, normalization, reductions
from asrkit.ops.cuda_impls import suffix_broadcasts
from asrkit.ops.cuda_layout import (
    MAX,
    MIN,
    SUM,
    broadcast_to,
    contiguous,
    empty,
    flat,
    full,
    launch,
    reduce_axes,
    reduce_leading,
)

INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)

# -- unary ops with parameters ----------------------------------------------------------------
ABS, SQRT, CLIP, ELU, GELU, LEAKY, SOFTPLUS = range(7)
UNARY = {"abs": ABS, "sqrt": SQRT, "clip": CLIP, "elu": ELU, "gelu": GELU, "leaky_relu": LEAKY,
         "softplus": SOFTPLUS}


@cuda.jit(device=True)
def _sigmoid(v):
    if v >= 0:
        return 1.0 / (1.0 + math.exp(-v))
    e = math.exp(v)
    return e / (1.0 + e)


@cuda.jit
def _unary_fwd(code, x, p, q, out):
    i = cuda.grid(1)
    if i < x.size:
        v = float(x[i])
        r = 0.0
        if code == ABS:
            r = abs(v)
        elif code == SQRT:
            r = math.sqrt(v) if v >= 0 else math.nan
        elif code == CLIP:
            r = min(max(v, p), q)
        elif code == ELU:
            r = v if v > 0 else p * math.expm1(v)
        elif code == GELU:
            r = v * 0.5 * (1.0 + math.erf(v / math.sqrt(2.0)))
        elif code == LEAKY:
            r = v if v > 0 else p * v
        elif code == SOFTPLUS:
            r = math.log1p(math.exp(-abs(v))) + max(v, 0.0)
        out[i] = r


@cuda.jit
def _unary_bwd(code, g, x, y, p, q, out):
    i = cuda.grid(1)
    if i < g.size:
        gi = float(g[i])
        r = 0.0
        if code == ABS:
            v = float(x[i])
            r = gi if v > 0 else (-gi if v < 0 else 0.0)
        elif code == SQRT:
            r = gi * 0.5 / float(y[i]) if y[i] != 0 else 0.0  # 0 only on masked padding
        elif code == CLIP:
            v = float(x[i])
            r = gi if (v >= p and v <= q) else 0.0
        elif code == ELU:
            r = gi if x[i] > 0 else gi * (float(y[i]) + p)
        elif code == GELU:
            v = float(x[i])
            cdf = 0.5 * (1.0 + math.erf(v / math.sqrt(2.0)))
            r = gi * (cdf + v * INV_SQRT_2PI * math.exp(-0.5 * v * v))
        elif code == LEAKY:
            r = gi if x[i] > 0 else gi * p
        elif code == SOFTPLUS:
            r = gi * _sigmoid(float(x[i]))
        out[i] = r


def _unary_params(code, attrs):
    if code == CLIP:
        lo, hi = attrs.get("min_value"), attrs.get("max_value")
        return (-math.inf if lo is None else float(lo)), (math.inf if hi is None else float(hi))
    if code == ELU:
        return float(attrs.get("alpha", 1.0)), 0.0
    if code == LEAKY:
        return float(attrs.get("alpha", 0.01)), 0.0
    return 0.0, 0.0


def _unary_impl(code):
    def fwd(ctx, x, **attrs):
        if x.dtype.kind != "f":
            return NotImplemented
        out = empty(x.shape, x.dtype)
        if x.size:
            _unary_fwd[launch(x.size)](code, flat(contiguous(x)), *_unary_params(code, attrs),
                                       flat(out))
        return out

    def bwd(ctx, g, y, x, **attrs):
        out = empty(g.shape, g.dtype)
        if g.size:
            g = flat(contiguous(g))
            _unary_bwd[launch(out.size)](code, g, g if x is None else flat(contiguous(x)),
                                         g if y is None else flat(contiguous(y)),
                                         *_unary_params(code, attrs), flat(out))
        return (out,)
    return fwd, bwd


# -- binary ops -------------------------------------------------------------------------------
POW, MAXIMUM, MINIMUM, DIV = range(4)
BINARY = {"pow": POW, "maximum": MAXIMUM, "minimum": MINIMUM}


@cuda.jit(device=True)
def _power(u, v):
    if u < 0 and v != math.floor(v):
        return math.nan
    if u == 0 and v < 0:
        return math.inf
    return math.pow(u, v)


@cuda.jit
def _binary_fwd(code, a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        u = float(a[i % a.size])
        v = float(b[i % b.size])
        r = 0.0
        if code == POW:
            r = _power(u, v)
        elif code == MAXIMUM:
            r = max(u, v)
        elif code == MINIMUM:
            r = min(u, v)
        out[i] = r


@cuda.jit
def _binary_bwd(code, g, a, b, y, ga, gb):
    """Gradients at the output's shape; a, b, y are read modulo their sizes (suffix shapes)."""
    i = cuda.grid(1)
    if i < g.size:
        gi = float(g[i])
        u = float(a[i % a.size])
        v = float(b[i % b.size])
        if code == DIV:  # v == 0 only on padding frames, which the engine masks
            ga[i] = gi / v if v != 0 else 0.0
            gb[i] = -gi * float(y[i % y.size]) / v if v != 0 else 0.0
        elif code == POW:
            ga[i] = gi * v * _power(u, v - 1.0)
            gb[i] = gi * float(y[i % y.size]) * math.log(u) if u > 0 else 0.0
        elif code == MAXIMUM:
            ga[i] = gi if u >= v else 0.0
            gb[i] = 0.0 if u >= v else gi
        elif code == MINIMUM:
            ga[i] = gi if u <= v else 0.0
            gb[i] = 0.0 if u <= v else gi


def _operands(shape, dtype, *arrays):
    """Each array as a suffix of ``shape`` in ``dtype`` (materialising general broadcasts)."""
    out = []
    for a in arrays:
        if a is None:
            out.append(None)
        elif suffix_broadcasts(a.shape, shape) and a.dtype == dtype:
            out.append(flat(contiguous(a)) if a.size else a)
        else:
            out.append(flat(broadcast_to(a, shape, dtype)))
    return out


def _binary_impl(code):
    def fwd(ctx, a, b):
        if a.dtype.kind != "f" or b.dtype.kind != "f":
            return NotImplemented
        shape = np.broadcast_shapes(tuple(a.shape), tuple(b.shape))
        dtype = np.result_type(a.dtype, b.dtype)
        out = empty(shape, dtype)
        if out.size:
            a, b = _operands(shape, dtype, a, b)
            _binary_fwd[launch(out.size)](code, a, b, flat(out))
        return out

    def bwd(ctx, g, y, a, b):
        shape = tuple(g.shape)
        ga, gb = empty(shape, g.dtype), empty(shape, g.dtype)
        if g.size:
            ones = full((1,), 1.0, g.dtype)
            a, b, y = _operands(shape, g.dtype, a, b, y)
            _binary_bwd[launch(g.size)](code, flat(contiguous(g)), ones if a is None else a,
                                        b, ones if y is None else y, flat(ga), flat(gb))
        return ga, gb
    return fwd, bwd


def _broadcasting(old_fwd, old_bwd):
    """Wrap cuda_impls' suffix-only binary impls: general broadcasts are materialised first."""
    def fwd(ctx, a, b):
        res = old_fwd(ctx, a, b)
        if res is not NotImplemented or a.dtype.kind != "f" or b.dtype.kind != "f":
            return res
        shape = np.broadcast_shapes(tuple(a.shape), tuple(b.shape))
        dtype = np.result_type(a.dtype, b.dtype)
        return old_fwd(ctx, broadcast_to(a, shape, dtype), broadcast_to(b, shape, dtype))

    def bwd(ctx, g, y, a, b):
        shape = tuple(g.shape)
        if a is not None and not (suffix_broadcasts(a.shape, shape) and a.dtype == g.dtype):
            a = broadcast_to(a, shape, g.dtype)
        if b is not None and not (suffix_broadcasts(b.shape, shape) and b.dtype == g.dtype):
            b = broadcast_to(b, shape, g.dtype)
        return old_bwd(ctx, g, y, a, b)
    return fwd, bwd


def _div_bwd(ctx, g, y, a, b):
    shape = tuple(g.shape)
    ga, gb = empty(shape, g.dtype), empty(shape, g.dtype)
    if g.size:
        b, y = _operands(shape, g.dtype, b, y)
        _binary_bwd[launch(g.size)](DIV, flat(contiguous(g)), b, b, y, flat(ga), flat(gb))
    return ga, gb


# -- reductions -------------------------------------------------------------------------------
@cuda.jit
def _scale(x, s, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] * s


@cuda.jit
def _share(x, yb, gb, out):
    """out = gb * (x == yb): the gradient of a max/min before dividing among ties."""
    i = cuda.grid(1)
    if i < out.size:
        out[i] = gb[i] if x[i] == yb[i] else 0.0


@cuda.jit
def _hits(x, yb, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = 1.0 if x[i] == yb[i] else 0.0


@cuda.jit
def _divide(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] / b[i] if b[i] != 0 else 0.0


@cuda.jit
def _mask_padding(x, L, B, F, fill, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] if i // (B * F) < L[(i // F) % B] else fill


def _scaled(x, s):
    out = empty(x.shape, x.dtype)
    if x.size:
        _scale[launch(x.size)](flat(contiguous(x)), float(s), flat(out))
    return out


def _kept_shape(shape, axes):
    return tuple(1 if i in axes else d for i, d in enumerate(shape))


def _reduce_impl(kind, mean=False):
    def fwd(ctx, x, axis=(-1,), keepdims=False):
        if x.dtype.kind != "f":
            return NotImplemented
        axes = reductions._full_axes(x, axis, reductions._nd(ctx))
        n = int(np.prod([x.shape[a] for a in axes]))
        y = reduce_axes(x, axes, kind, 1.0 / max(n, 1) if mean else 1.0)
        return y.reshape(_kept_shape(x.shape, axes)) if keepdims else y

    def bwd(ctx, g, y, x, axis=(-1,), keepdims=False):
        axes = reductions._full_axes(x, axis, reductions._nd(ctx))
        kept = _kept_shape(x.shape, axes)
        gb = broadcast_to(contiguous(g).reshape(kept), x.shape)
        if kind == SUM:
            n = int(np.prod([x.shape[a] for a in axes]))
            return (_scaled(gb, 1.0 / max(n, 1)) if mean else gb,)
        return (_extreme_grad(contiguous(x), broadcast_to(contiguous(y).reshape(kept), x.shape),
                              gb, axes),)
    return fwd, bwd


def _extreme_grad(x, yb, gb, axes):
    """``gb * (x == yb) / (number of ties)`` with ties counted over ``axes``; all of x's shape."""
    hits = empty(x.shape, x.dtype)
    picked = empty(x.shape, gb.dtype)
    out = empty(x.shape, gb.dtype)
    if x.size:
        _hits[launch(x.size)](flat(x), flat(yb), flat(hits))
        _share[launch(x.size)](flat(x), flat(yb), flat(gb), flat(picked))
        count = reduce_axes(hits, axes, SUM)
        kept = _kept_shape(x.shape, axes)
        cb = broadcast_to(count.reshape(kept), x.shape, gb.dtype)
        _divide[launch(x.size)](flat(picked), flat(cb), flat(out))
    return out


def _mean_all_fwd(ctx, x):
    if x.dtype.kind != "f":
        return NotImplemented
    y = reduce_leading(x, x.ndim, SUM)
    return _scaled(y, 1.0 / max(reductions._count(ctx, x), 1))


def _mean_all_bwd(ctx, g, y, x):
    gb = broadcast_to(contiguous(g).reshape((1,) * x.ndim), x.shape)
    return (_scaled(gb, 1.0 / max(reductions._count(ctx, x), 1)),)


def _masked_for_max(ctx, x):
    L = ctx.in_lengths[0]
    x = contiguous(x)
    if L is None or not x.size:
        return x
    T, B = tuple(x.shape[:2])
    F = x.size // max(T * B, 1)
    out = empty(x.shape, x.dtype)
    _mask_padding[launch(x.size)](flat(x), cuda.to_device(np.asarray(L, np.int32)), B, F,
                                  -math.inf, flat(out))
    return out


def _max_all_fwd(ctx, x):
    if x.dtype.kind != "f":
        return NotImplemented
    return reduce_leading(_masked_for_max(ctx, x), x.ndim, MAX)


def _max_all_bwd(ctx, g, y, x):
    z = _masked_for_max(ctx, x)
    shape = tuple(x.shape)
    ones = (1,) * x.ndim
    return (_extreme_grad(z, broadcast_to(contiguous(y).reshape(ones), shape),
                          broadcast_to(contiguous(g).reshape(ones), shape),
                          tuple(range(x.ndim))),)


# -- matmul -----------------------------------------------------------------------------------
def _matmul_fwd(ctx, a, b):
    from asrkit.kernels.cuda.gemm import gemm

    if b.ndim != 2 or a.dtype != b.dtype or a.dtype.kind != "f":
        return NotImplemented
    n, k = tuple(a.shape[-2:])
    rows = a.size // max(k, 1) if k else int(np.prod(a.shape[:-1]))
    y = gemm(contiguous(a).reshape((rows, k)), contiguous(b))
    return y.reshape(tuple(a.shape[:-1]) + (int(b.shape[1]),))


def _matmul_bwd(ctx, g, y, a, b):
    from asrkit.kernels.cuda.gemm import gemm

    if b.ndim != 2:
        return NotImplemented
    k, m = tuple(b.shape)
    g2 = contiguous(g).reshape((g.size // max(m, 1), m))
    ga = gb = None
    if ctx.needs_grad[0]:
        ga = gemm(g2, contiguous(b), trans_b=True).reshape(tuple(a.shape))
    if ctx.needs_grad[1]:
        gb = gemm(contiguous(a).reshape((g2.shape[0], k)), g2, trans_a=True)
    return ga, gb


# -- batch norm -------------------------------------------------------------------------------
@cuda.jit
def _bn_apply(x, mu, rstd, scale, bias, L, B, F, D, masked, y, xhat):
    i = cuda.grid(1)
    if i < x.size:
        d = i % D
        h = 0.0
        if not masked or i // (B * F) < L[(i // F) % B]:
            h = (float(x[i]) - mu[d]) * rstd[d]
        xhat[i] = h
        y[i] = h * scale[d % scale.size] + bias[d % bias.size]


@cuda.jit
def _centred_square(x, mu, L, B, F, D, masked, out):
    i = cuda.grid(1)
    if i < x.size:
        c = 0.0
        if not masked or i // (B * F) < L[(i // F) % B]:
            c = float(x[i]) - mu[i % D]
        out[i] = c * c


@cuda.jit
def _bn_terms(g, xhat, scale, D, gxhat, gxx, gscale):
    i = cuda.grid(1)
    if i < g.size:
        gh = float(g[i]) * scale[(i % D) % scale.size]
        gxhat[i] = gh
        gxx[i] = gh * float(xhat[i])
        gscale[i] = float(g[i]) * float(xhat[i])


@cuda.jit
def _bn_grad_x(gxhat, xhat, s1, s2, rstd, n, L, B, F, D, masked, train, gx):
    i = cuda.grid(1)
    if i < gx.size:
        d = i % D
        if not train:
            gx[i] = gxhat[i] * rstd[d]
        elif not masked or i // (B * F) < L[(i // F) % B]:
            gx[i] = rstd[d] * (gxhat[i] - s1[d] / n - xhat[i] * s2[d] / n)
        else:
            gx[i] = 0.0


def _bn_geometry(ctx, x):
    L = ctx.in_lengths[0]
    D = int(tuple(x.shape)[-1])
    if L is None:
        return None, 1, max(x.size, 1), D
    T, B = tuple(x.shape[:2])
    return cuda.to_device(np.asarray(L, np.int32)), B, x.size // max(T * B, 1), D


def _bn_fwd(ctx, x, scale, bias, running_mean, running_var, eps=1e-5, momentum=0.1):
    if x.dtype.kind != "f" or len({x.dtype, scale.dtype, bias.dtype}) != 1:
        return NotImplemented
    x = contiguous(x)
    Ld, B, F, D = _bn_geometry(ctx, x)
    masked = Ld is not None
    Ld = Ld if masked else cuda.to_device(np.zeros(1, np.int32))
    if not ctx.train:
        mu = running_mean.copy_to_host().astype(np.float64)
        rstd = 1.0 / np.sqrt(running_var.copy_to_host().astype(np.float64) + eps)
        n = False
    else:
        L = ctx.in_lengths[0]
        n = float(L.sum()) * (F // D) if masked else float(x.size // D)
        if n < 1:
            raise ValueError(f"{ctx.where()}: batch norm over an empty batch")
        mu = reduce_leading(x, x.ndim - 1, SUM).copy_to_host().astype(np.float64) / n
        mu_d = cuda.to_device(mu)
        sq = empty(x.shape, np.float64)
        _centred_square[launch(x.size)](flat(x), mu_d, Ld, B, F, D, masked, flat(sq))
        var = reduce_leading(sq, x.ndim - 1, SUM).copy_to_host() / n
        rstd = 1.0 / np.sqrt(var + eps)
        _update_running(ctx, x.dtype, mu, var * (n / max(n - 1.0, 1.0)), momentum)
    mu_d, rstd_d = cuda.to_device(mu), cuda.to_device(rstd)
    y, xhat = empty(x.shape, x.dtype), empty(x.shape, x.dtype)
    if x.size:
        _bn_apply[launch(x.size)](flat(x), mu_d, rstd_d, flat(scale), flat(bias), Ld, B, F, D,
                                  masked and bool(n), flat(y), flat(xhat))
    return y, (xhat, rstd_d, n)


def _update_running(ctx, dtype, mu, var_unbiased, momentum):
    """Update the running statistics in the host parameter arrays, in place as on the cpu."""
    for node, stat in zip(ctx.node.inputs[3:5], (mu, var_unbiased)):
        value = getattr(node, "value", None)
        if isinstance(value, np.ndarray) and value.dtype == dtype:
            value *= 1.0 - momentum
            value += (momentum * stat).astype(dtype)


def _bn_bwd(ctx, g, y, x, scale, bias, running_mean, running_var, eps=1e-5, momentum=0.1,
            state=None):
    xhat, rstd, n = state
    g = contiguous(g)
    Ld, B, F, D = _bn_geometry(ctx, g)
    masked = Ld is not None
    Ld = Ld if masked else cuda.to_device(np.zeros(1, np.int32))
    gxhat, gxx, gscale = (empty(g.shape, g.dtype) for _ in range(3))
    gx = empty(g.shape, g.dtype)
    if g.size:
        _bn_terms[launch(g.size)](flat(g), flat(xhat), flat(scale), D, flat(gxhat), flat(gxx),
                                  flat(gscale))
        train = n is not False
        s1 = reduce_leading(gxhat, g.ndim - 1, SUM) if train else rstd
        s2 = reduce_leading(gxx, g.ndim - 1, SUM) if train else rstd
        _bn_grad_x[launch(g.size)](flat(gxhat), flat(xhat), flat(s1), flat(s2), rstd,
                                   float(n) if train else 1.0, Ld, B, F, D, masked, train,
                                   flat(gx))
    return gx, gscale, g, None, None


# -- metrics ----------------------------------------------------------------------------------
@cuda.jit
def _argmax_rows(z, C, out):
    r = cuda.grid(1)
    if r < out.size:
        best = 0
        for j in range(1, C):
            if z[r * C + j] > z[r * C + best]:
                best = j
        out[r] = best


@cuda.jit
def _row_errors(best, labels, out):
    r = cuda.grid(1)
    if r < out.size:
        lab = labels[r]
        out[r] = 1.0 if lab >= 0 and best[r] != lab else 0.0


def _argmax(z):
    C = int(tuple(z.shape)[-1])
    rows = z.size // max(C, 1) if C else 0
    best = empty((max(rows, 1),), np.int32)
    if rows:
        _argmax_rows[launch(rows)](flat(contiguous(z)), C, best)
    return best, rows


def _err_fwd(ctx, z, labels):
    if z.dtype.kind != "f" or labels.dtype.kind not in "iu":
        return NotImplemented
    best, rows = _argmax(z)
    out = empty(tuple(z.shape[:-1]), z.dtype)
    if rows:
        lab = flat(contiguous(labels))
        if lab.dtype != np.int32:
            lab = cuda.to_device(lab.copy_to_host().astype(np.int32))
        _row_errors[launch(rows)](best, lab, flat(out))
    return out


def _greedy_fwd(ctx, logits, labels, blank=0):
    if logits.dtype.kind != "f":
        return NotImplemented
    T, B = tuple(logits.shape[:2])
    best, rows = _argmax(logits)
    path = best.copy_to_host()[:rows].reshape(T, B)
    lab = labels.copy_to_host() if hasattr(labels, "copy_to_host") else np.asarray(labels)
    errs = np.zeros(B, logits.dtype)
    for b, (n, m) in enumerate(zip(ctx.in_lengths[0], ctx.in_lengths[1])):
        p = path[: int(n), b]
        p = p[np.r_[True, p[1:] != p[:-1]]] if len(p) else p
        errs[b] = criteria.edit_distance(lab[: int(m), b], p[p != blank])
    return cuda.to_device(errs)


def register() -> None:
    """Attach these CUDA impls to their primitives (call after ``cuda_impls.register``)."""
    for name, code in UNARY.items():
        fwd, bwd = _unary_impl(code)
        getattr(elementwise, name).primitive.impls.update(cuda=fwd, cuda_backward=bwd)
    for name, code in BINARY.items():
        fwd, bwd = _binary_impl(code)
        getattr(elementwise, name).primitive.impls.update(cuda=fwd, cuda_backward=bwd)
    for name in cuda_impls.BINARY:
        prim = getattr(elementwise, name).primitive
        fwd, bwd = _broadcasting(cuda_impls._binary_impl(cuda_impls.BINARY[name])[0],
                                 _div_bwd if name == "div" else
                                 cuda_impls._binary_impl(cuda_impls.BINARY[name])[1])
        prim.impls.update(cuda=fwd, cuda_backward=bwd)
    r = reductions
    for prim, kind, mean in ((r.reduce_sum_p, SUM, False), (r.reduce_mean_p, SUM, True),
                             (r.reduce_max_p, MAX, False), (r.reduce_min_p, MIN, False)):
        fwd, bwd = _reduce_impl(kind, mean)
        prim.impls.update(cuda=fwd, cuda_backward=bwd)
    r.mean_all_p.impls.update(cuda=_mean_all_fwd, cuda_backward=_mean_all_bwd)
    r.max_all_p.impls.update(cuda=_max_all_fwd, cuda_backward=_max_all_bwd)
    linalg.matmul_p.impls.update(cuda=_matmul_fwd, cuda_backward=_matmul_bwd)
    normalization.batch_norm_p.impls.update(cuda=_bn_fwd, cuda_backward=_bn_bwd)
    criteria.classification_error_p.impls.update(cuda=_err_fwd)
    criteria.ctc_greedy_errors_p.impls.update(cuda=_greedy_fwd)


register()
