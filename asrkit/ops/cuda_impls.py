"""CUDA forwards and backwards for the ops that dominate acoustic models.

Imported by the graph's cuda backend (never at ``import asrkit.ops``), it registers
``impls["cuda"]`` / ``impls["cuda_backward"]`` on: elementwise unary ops (neg, exp, log, tanh,
sigmoid, relu), add/sub/mul/div where each operand broadcasts as a suffix of the output (a bias),
``times`` and ``conv1d`` (GEMMs through ``asrkit.kernels.cuda.gemm``: cuBLAS when available),
softmax/log-softmax and cross-entropy over the last axis, ``layer_norm``, ``dropout`` (mask
drawn on the host from the run's generator), ``embedding``, ``sum_all``,
``splice`` on the last axis, ``lstm``, ``blstm`` and ``ctc_loss`` (the fused kernels on
device arrays). An impl returns ``NotImplemented`` for shapes it does not cover, and the backend
then runs the numpy op through the host. Kernels compute in float64 registers and store in the
arrays' dtype.
"""

from __future__ import annotations

import importlib
import math

import numpy as np
from numba import cuda

from asrkit.kernels._device import cuda_simulated
from asrkit.ops import (
    convolution,
    criteria,
    elementwise,
    linalg,
    normalization,
    recurrent,
    reductions,
    shape_ops,
)
from asrkit.ops._frames import window_geometry

THREADS = 32 if cuda_simulated() else 256  # simulated threads are Python threads


def _launch(n):
    return (max((n + THREADS - 1) // THREADS, 1), THREADS)


def _flat(a):
    return a.reshape(a.size) if a.ndim != 1 else a


def _empty(shape, dtype):
    return cuda.device_array(tuple(int(d) for d in shape), dtype=dtype)


# -- elementwise kernels ----------------------------------------------------------------------
NEG, EXP, LOG, TANH, SIGMOID, RELU = range(6)
UNARY = {"neg": NEG, "exp": EXP, "log": LOG, "tanh": TANH, "sigmoid": SIGMOID, "relu": RELU}


@cuda.jit
def _unary_fwd(code, x, out):
    i = cuda.grid(1)
    if i < x.size:
        v = float(x[i])
        r = 0.0
        if code == NEG:
            r = -v
        elif code == EXP:
            r = math.exp(v)
        elif code == LOG:
            r = math.log(v) if v > 0 else (-math.inf if v == 0 else math.nan)
        elif code == TANH:
            r = math.tanh(v)
        elif code == SIGMOID:
            if v >= 0:
                r = 1.0 / (1.0 + math.exp(-v))
            else:
                e = math.exp(v)
                r = e / (1.0 + e)
        elif code == RELU:
            r = v if v > 0 else 0.0
        out[i] = r


@cuda.jit
def _unary_bwd(code, g, x, y, out):
    i = cuda.grid(1)
    if i < g.size:
        gi = float(g[i])
        r = 0.0
        if code == NEG:
            r = -gi
        elif code == EXP:
            r = gi * y[i]
        elif code == LOG:
            r = gi / x[i] if x[i] != 0 else 0.0
        elif code == TANH:
            r = gi * (1.0 - float(y[i]) * float(y[i]))
        elif code == SIGMOID:
            r = gi * float(y[i]) * (1.0 - float(y[i]))
        elif code == RELU:
            r = gi if x[i] > 0 else 0.0
        out[i] = r


ADD, SUB, MUL, DIV = range(4)
BINARY = {"add": ADD, "sub": SUB, "mul": MUL, "div": DIV}


@cuda.jit
def _binary_fwd(code, a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        u = float(a[i % a.size])
        v = float(b[i % b.size])
        r = 0.0
        if code == ADD:
            r = u + v
        elif code == SUB:
            r = u - v
        elif code == MUL:
            r = u * v
        elif code == DIV:
            r = u / v if v != 0 else math.nan
        out[i] = r


@cuda.jit
def _binary_bwd(code, g, a, b, ga, gb):
    i = cuda.grid(1)
    if i < g.size:
        gi = float(g[i])
        u = float(a[i % a.size])
        v = float(b[i % b.size])
        if code == ADD:
            ga[i] = gi
            gb[i] = gi
        elif code == SUB:
            ga[i] = gi
            gb[i] = -gi
        elif code == MUL:
            ga[i] = gi * v
            gb[i] = gi * u
        elif code == DIV:
            ga[i] = gi / v if v != 0 else 0.0
            gb[i] = -gi * u / (v * v) if v != 0 else 0.0


@cuda.jit
def _column_sum(g, out, m, stride):
    """Thread t sums g[t], g[t + stride], ... (stride a multiple of m) into out[t % m]."""
    t = cuda.grid(1)
    if t < stride:
        acc = 0.0
        j = t
        while j < g.size:
            acc += g[j]
            j += stride
        cuda.atomic.add(out, t % m, acc)


@cuda.jit
def _fill_from(src, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = src[0]


@cuda.jit
def _zero_padding(x, lengths, B, F):
    i = cuda.grid(1)
    if i < x.size:
        t = i // (B * F)
        b = (i // F) % B
        if t >= lengths[b]:
            x[i] = 0


@cuda.jit
def _copy_columns(src, out, offset, w_src, w_out):
    i = cuda.grid(1)
    if i < src.size:
        r = i // w_src
        out[r * w_out + offset + i % w_src] = src[i]


@cuda.jit
def _take_columns(src, out, offset, w_src, w_out):
    i = cuda.grid(1)
    if i < out.size:
        r = i // w_out
        out[i] = src[r * w_src + offset + i % w_out]


@cuda.jit
def _scale_rows(grad, g, C, B, out):
    """out[t, b, c] = grad[t, b, c] * g[b] (the CTC backward)."""
    i = cuda.grid(1)
    if i < grad.size:
        out[i] = grad[i] * g[(i // C) % B]


# -- row-wise kernels over the last axis (one thread per row) ---------------------------------
@cuda.jit
def _log_softmax_rows(x, out, C):
    r = cuda.grid(1)
    if r < x.size // C:
        base = r * C
        m = -math.inf
        for j in range(C):
            m = max(m, float(x[base + j]))
        acc = 0.0
        for j in range(C):
            acc += math.exp(float(x[base + j]) - m)
        lse = m + math.log(acc)
        for j in range(C):
            out[base + j] = float(x[base + j]) - lse


@cuda.jit
def _log_softmax_rows_bwd(g, y, out, C):
    r = cuda.grid(1)
    if r < g.size // C:
        base = r * C
        s = 0.0
        for j in range(C):
            s += g[base + j]
        for j in range(C):
            out[base + j] = g[base + j] - math.exp(float(y[base + j])) * s


@cuda.jit
def _softmax_rows_bwd(g, y, out, C):
    r = cuda.grid(1)
    if r < g.size // C:
        base = r * C
        s = 0.0
        for j in range(C):
            s += float(g[base + j]) * float(y[base + j])
        for j in range(C):
            out[base + j] = float(y[base + j]) * (float(g[base + j]) - s)


@cuda.jit
def _cross_entropy_rows(z, labels, smoothing, loss, p, C):
    r = cuda.grid(1)
    if r < labels.size:
        base = r * C
        m = -math.inf
        for j in range(C):
            m = max(m, float(z[base + j]))
        acc = 0.0
        for j in range(C):
            acc += math.exp(float(z[base + j]) - m)
        lse = m + math.log(acc)
        total = 0.0
        for j in range(C):
            lp = float(z[base + j]) - lse
            p[base + j] = math.exp(lp)
            total += lp
        lab = labels[r]
        if lab < 0:
            loss[r] = 0.0
        else:
            loss[r] = -(1.0 - smoothing) * (float(z[base + lab]) - lse) - smoothing / C * total


@cuda.jit
def _cross_entropy_rows_bwd(g, p, labels, smoothing, out, C):
    i = cuda.grid(1)
    if i < p.size:
        r = i // C
        lab = labels[r]
        if lab < 0:
            out[i] = 0.0
        else:
            target = smoothing / C + (1.0 - smoothing if i - r * C == lab else 0.0)
            out[i] = (float(p[i]) - target) * float(g[r])


@cuda.jit
def _layer_norm_rows(x, scale, bias, eps, y, xhat, rstd, D):
    r = cuda.grid(1)
    if r < x.size // D:
        base = r * D
        mu = 0.0
        for j in range(D):
            mu += x[base + j]
        mu /= D
        var = 0.0
        for j in range(D):
            d = float(x[base + j]) - mu
            var += d * d
        rs = 1.0 / math.sqrt(var / D + eps)
        rstd[r] = rs
        for j in range(D):
            h = (float(x[base + j]) - mu) * rs
            xhat[base + j] = h
            y[base + j] = h * scale[j % scale.size] + bias[j % bias.size]


@cuda.jit
def _layer_norm_rows_bwd(g, xhat, rstd, scale, gx, gscale, D):
    r = cuda.grid(1)
    if r < g.size // D:
        base = r * D
        m1 = 0.0
        m2 = 0.0
        for j in range(D):
            gh = float(g[base + j]) * scale[j % scale.size]
            m1 += gh
            m2 += gh * float(xhat[base + j])
        m1 /= D
        m2 /= D
        for j in range(D):
            gh = float(g[base + j]) * scale[j % scale.size]
            gx[base + j] = rstd[r] * (gh - m1 - float(xhat[base + j]) * m2)
            gscale[base + j] = float(g[base + j]) * float(xhat[base + j])


@cuda.jit
def _gather_rows(table, ids, out, D, V, bad):
    i = cuda.grid(1)
    if i < out.size:
        k = ids[i // D]
        if k < 0 or k >= V:
            bad[0] = 1
        else:
            out[i] = table[k * D + i % D]


@cuda.jit
def _scatter_rows(g, ids, out, D):
    i = cuda.grid(1)
    if i < g.size:
        cuda.atomic.add(out, ids[i // D] * D + i % D, g[i])


@cuda.jit
def _gather_windows(x, cols, T, B, C, K, stride, dilation, left):
    """cols[t', b, k, c] = x[t'*stride - left + k*dilation, b, c] (zero outside [0, T))."""
    i = cuda.grid(1)
    if i < cols.size:
        c = i % C
        k = (i // C) % K
        b = (i // (C * K)) % B
        to = i // (C * K * B)
        t = to * stride - left + k * dilation
        if 0 <= t < T:
            cols[i] = x[(t * B + b) * C + c]
        else:
            cols[i] = 0


@cuda.jit
def _scatter_windows(gcols, gx, T, B, C, K, stride, dilation, left):
    i = cuda.grid(1)
    if i < gcols.size:
        c = i % C
        k = (i // C) % K
        b = (i // (C * K)) % B
        to = i // (C * K * B)
        t = to * stride - left + k * dilation
        if 0 <= t < T:
            cuda.atomic.add(gx, (t * B + b) * C + c, gcols[i])


# -- helpers the backend uses -----------------------------------------------------------------
def suffix_broadcasts(shape, out_shape) -> bool:
    """True when ``shape`` (leading 1s dropped) is a suffix of ``out_shape`` (flat modulo works)."""
    shape = tuple(shape)
    while shape and shape[0] == 1:
        shape = shape[1:]
    return shape == tuple(out_shape[len(out_shape) - len(shape):]) if shape else True


def device_sum_to(g, shape):
    """Sum device array ``g`` down to ``shape`` (a suffix of g's shape); None if not a suffix."""
    if not suffix_broadcasts(shape, g.shape):
        return None
    m = int(np.prod(shape)) if len(shape) else 1
    out = cuda.to_device(np.zeros(max(m, 1), g.dtype))
    if g.size:
        rows = max(1, min(g.size // max(m, 1), 4096))
        stride = m * rows
        _column_sum[_launch(stride)](_flat(g), out, m, stride)
    return out.reshape(tuple(shape)) if len(shape) else out.reshape(())


def device_zero_padding(x, lengths):
    """Zero frames ``t >= lengths[b]`` of device ``x [T, B, ...]`` in place."""
    T, B = x.shape[:2]
    F = x.size // max(T * B, 1)
    if x.size:
        _zero_padding[_launch(x.size)](_flat(x), cuda.to_device(np.asarray(lengths, np.int32)),
                                       B, F)
    return x


def device_add(a, b):
    """``a + b`` for equal-shaped device arrays (new array)."""
    out = _empty(a.shape, a.dtype)
    _binary_fwd[_launch(a.size)](ADD, _flat(a), _flat(b), _flat(out))
    return out


def device_copy(a):
    """A device copy of ``a``."""
    out = _empty(a.shape, a.dtype)
    out.copy_to_device(a)
    return out


# -- op impls ---------------------------------------------------------------------------------
def _unary_impl(code):
    def fwd(ctx, x, **attrs):
        if attrs or x.dtype.kind != "f":
            return NotImplemented
        out = _empty(x.shape, x.dtype)
        if x.size:
            _unary_fwd[_launch(x.size)](code, _flat(x), _flat(out))
        return out

    def bwd(ctx, g, y, x, **attrs):
        out = _empty(g.shape, g.dtype)
        if g.size:
            _unary_bwd[_launch(g.size)](code, _flat(g), _flat(x if x is not None else g),
                                        _flat(y if y is not None else g), _flat(out))
        return (out,)
    return fwd, bwd


def _binary_impl(code):
    def fwd(ctx, a, b):
        out_shape = np.broadcast_shapes(tuple(a.shape), tuple(b.shape))
        if a.dtype != b.dtype or a.dtype.kind != "f" or not (
                suffix_broadcasts(a.shape, out_shape) and suffix_broadcasts(b.shape, out_shape)):
            return NotImplemented
        out = _empty(out_shape, a.dtype)
        if out.size:
            _binary_fwd[_launch(out.size)](code, _flat(a), _flat(b), _flat(out))
        return out

    def bwd(ctx, g, y, a, b):
        if code == DIV:
            return NotImplemented  # reads (b, out): the host rule handles it
        if a is None or b is None:  # add/sub need no inputs: gradients are g and -g
            if code == ADD:
                return g, g
            out = _empty(g.shape, g.dtype)
            _unary_fwd[_launch(g.size)](NEG, _flat(g), _flat(out))
            return g, out
        ga, gb = _empty(g.shape, g.dtype), _empty(g.shape, g.dtype)
        if g.size:
            _binary_bwd[_launch(g.size)](code, _flat(g), _flat(a), _flat(b), _flat(ga),
                                         _flat(gb))
        return ga, gb
    return fwd, bwd


def _times_fwd(ctx, x, W):
    from asrkit.kernels.cuda.gemm import gemm

    if W.ndim != 2 or x.dtype != W.dtype:
        return NotImplemented
    n = x.size // tuple(x.shape)[-1] if tuple(x.shape)[-1] else 0
    y = gemm(x.reshape(n, tuple(x.shape)[-1]), W)
    return y.reshape(tuple(x.shape)[:-1] + (tuple(W.shape)[1],))


def _times_bwd(ctx, g, y, x, W):
    from asrkit.kernels.cuda.gemm import gemm

    n = g.size // tuple(g.shape)[-1] if tuple(g.shape)[-1] else 0
    g2 = g.reshape(n, tuple(g.shape)[-1])
    gx = gW = None
    if ctx.needs_grad[0]:
        gx = gemm(g2, W, trans_b=True).reshape(tuple(x.shape))
    if ctx.needs_grad[1]:
        gW = gemm(x.reshape(n, tuple(x.shape)[-1]), g2, trans_a=True)
    return gx, gW


def _sum_all_fwd(ctx, x):
    if x.dtype.kind != "f":
        return NotImplemented
    return device_sum_to(x, ())


def _sum_all_bwd(ctx, g, y, x):
    out = _empty(x.shape, g.dtype)
    if out.size:
        _fill_from[_launch(out.size)](g.reshape(1), _flat(out))
    return (out,)


def _splice_fwd(ctx, *xs, axis, new_axis):
    rank = len(ctx.node.shape)
    if new_axis or axis % (rank - len(ctx.node.dynamic_axes)) != rank - 1 - len(
            ctx.node.dynamic_axes) or len({x.dtype for x in xs}) != 1:
        return NotImplemented
    lead = tuple(xs[0].shape)[:-1]
    w_out = sum(int(tuple(x.shape)[-1]) for x in xs)
    out = _empty(lead + (w_out,), xs[0].dtype)
    off = 0
    for x in xs:
        if x.size:
            _copy_columns[_launch(x.size)](_flat(x), _flat(out), off, tuple(x.shape)[-1], w_out)
        off += int(tuple(x.shape)[-1])
    return out


def _splice_bwd(ctx, g, y, *xs, axis, new_axis):
    widths = [int(tuple(i.shape)[-1]) for i in ctx.node.inputs]
    lead = tuple((g.shape)[:-1])
    outs, off = [], 0
    for w in widths:
        o = _empty(lead + (w,), g.dtype)
        if o.size:
            _take_columns[_launch(o.size)](_flat(g), _flat(o), off, tuple(g.shape)[-1], w)
        outs.append(o)
        off += w
    return tuple(outs)


def _host(a):
    return a.copy_to_host() if hasattr(a, "copy_to_host") else np.asarray(a)


def _lstm_fwd(ctx, x, h0, c0, w_ih, w_hh, b_ih, b_hh, *w_hr, reverse=False):
    from asrkit.kernels.lstm import lstm_forward

    B = tuple(x.shape)[1]
    H = tuple(w_ih.shape)[0] // 4
    P = w_hr[0].shape[0] if w_hr else H
    h0 = cuda.to_device(np.ascontiguousarray(np.broadcast_to(_host(h0), (B, P)), x.dtype))
    c0 = cuda.to_device(np.ascontiguousarray(np.broadcast_to(_host(c0), (B, H)), x.dtype))
    y, _, _, cache = lstm_forward(x, h0, c0, w_ih, w_hh, b_ih, b_hh,
                                  lengths=np.asarray(ctx.in_lengths[0]), device="cuda",
                                  reverse=reverse, w_hr=w_hr[0] if w_hr else None)
    return y, cache


def _lstm_bwd(ctx, g, y, x, h0, c0, w_ih, w_hh, b_ih, b_hh, *w_hr, reverse=False, state=None):
    from asrkit.kernels.lstm import lstm_backward

    return tuple(lstm_backward(g, None, None, state, device="cuda"))


def _blstm_fwd(ctx, x, h0, c0, *ws):
    n = len(ws) // 2
    outs, caches = [], []
    for d in (0, 1):
        one = [ws[2 * k + d] for k in range(n)]
        y, cache = _lstm_fwd(ctx, x, h0, c0, *one, reverse=bool(d))
        outs.append(y)
        caches.append(cache)
    T, B, P = tuple(outs[0].shape)
    out = _empty((T, B, 2 * P), outs[0].dtype)
    for d, y in enumerate(outs):
        if y.size:
            _copy_columns[_launch(y.size)](_flat(y), _flat(out), d * P, P, 2 * P)
    return out, caches


def _blstm_bwd(ctx, g, y, x, h0, c0, *ws, state=None):
    from asrkit.kernels.lstm import lstm_backward

    T, B, P2 = tuple(g.shape)
    P = P2 // 2
    grads = []
    for d in (0, 1):
        gd = _empty((T, B, P), g.dtype)
        if gd.size:
            _take_columns[_launch(gd.size)](_flat(g), _flat(gd), d * P, P2, P)
        grads.append(lstm_backward(gd, None, None, state[d], device="cuda"))
    (dxf, dhf, dcf, *wf), (dxb, dhb, dcb, *wb) = grads
    out = [device_add(dxf, dxb), device_add(dhf, dhb), device_add(dcf, dcb)]
    for a, b in zip(wf, wb):
        out += [a, b]
    return tuple(out)


def _ctc_fwd(ctx, logits, labels, blank=0, zero_infinity=False):
    from asrkit.kernels import ctc_loss

    targets = np.ascontiguousarray(_host(labels).T, dtype=np.int32)
    costs, grad = ctc_loss(logits, targets, ctx.in_lengths[0], ctx.in_lengths[1], blank=blank,
                           device="cuda")
    if zero_infinity:
        c = _host(costs)
        if not np.all(np.isfinite(c)):
            costs = cuda.to_device(np.where(np.isfinite(c), c, 0).astype(c.dtype))
    return costs, grad


def _ctc_bwd(ctx, g, y, logits, labels, blank=0, zero_infinity=False, state=None):
    grad = state
    out = _empty(grad.shape, grad.dtype)
    if out.size:
        T, B, C = tuple(grad.shape)
        _scale_rows[_launch(out.size)](_flat(grad), g, C, B, _flat(out))
    return out, None


def _rows(x):
    C = tuple(x.shape)[-1]
    return C, (x.size // C if C else 0)


def _last_axis(ctx, axis):
    n = ctx.node.inputs[0]
    return axis % (len(n.shape) - len(n.dynamic_axes)) == len(n.shape) - len(n.dynamic_axes) - 1


def _log_softmax_fwd(ctx, x, axis=-1):
    if not _last_axis(ctx, axis) or x.dtype.kind != "f":
        return NotImplemented
    C, R = _rows(x)
    out = _empty(x.shape, x.dtype)
    if R:
        _log_softmax_rows[_launch(R)](_flat(x), _flat(out), C)
    return out


def _log_softmax_bwd(ctx, g, y, x, axis=-1):
    C, R = _rows(g)
    out = _empty(g.shape, g.dtype)
    if R:
        _log_softmax_rows_bwd[_launch(R)](_flat(g), _flat(y), _flat(out), C)
    return (out,)


def _softmax_fwd(ctx, x, axis=-1):
    out = _log_softmax_fwd(ctx, x, axis)
    if out is NotImplemented:
        return out
    _unary_fwd[_launch(out.size)](EXP, _flat(out), _flat(out))
    return out


def _softmax_bwd(ctx, g, y, x, axis=-1):
    C, R = _rows(g)
    out = _empty(g.shape, g.dtype)
    if R:
        _softmax_rows_bwd[_launch(R)](_flat(g), _flat(y), _flat(out), C)
    return (out,)


def _ce_fwd(ctx, z, labels, label_smoothing=0.0):
    if z.dtype.kind != "f":
        return NotImplemented
    C, R = _rows(z)
    lab = _host(labels)
    if lab.size and lab.max() >= C:
        raise ValueError(f"{ctx.where()}: label {int(lab.max())} is not below the number of "
                         f"classes {C}")
    lab_d = cuda.to_device(np.ascontiguousarray(lab, np.int32).reshape(-1))
    loss = _empty(tuple(z.shape)[:-1], z.dtype)
    p = _empty(z.shape, z.dtype)
    if R:
        _cross_entropy_rows[_launch(R)](_flat(z), lab_d, float(label_smoothing), _flat(loss),
                                        _flat(p), C)
    return loss, (p, lab_d)


def _ce_bwd(ctx, g, y, z, labels, label_smoothing=0.0, state=None):
    p, lab_d = state
    C, R = _rows(p)
    out = _empty(p.shape, p.dtype)
    if p.size:
        _cross_entropy_rows_bwd[_launch(p.size)](_flat(g), _flat(p), lab_d,
                                                 float(label_smoothing), _flat(out), C)
    return out, None


def _ln_fwd(ctx, x, scale, bias, eps=1e-5):
    if len({x.dtype, scale.dtype, bias.dtype}) != 1:
        return NotImplemented
    D, R = _rows(x)
    y, xhat = _empty(x.shape, x.dtype), _empty(x.shape, x.dtype)
    rstd = _empty((max(R, 1),), x.dtype)
    if R:
        _layer_norm_rows[_launch(R)](_flat(x), _flat(scale), _flat(bias), float(eps), _flat(y),
                                     _flat(xhat), rstd, D)
    return y, (xhat, rstd)


def _ln_bwd(ctx, g, y, x, scale, bias, eps=1e-5, state=None):
    xhat, rstd = state
    D, R = _rows(g)
    gx, gscale = _empty(g.shape, g.dtype), _empty(g.shape, g.dtype)
    if R:
        _layer_norm_rows_bwd[_launch(R)](_flat(g), _flat(xhat), rstd, _flat(scale), _flat(gx),
                                         _flat(gscale), D)
    return gx, gscale, g


def _dropout_fwd(ctx, x, rate):
    if not ctx.train or rate == 0.0:
        return x, None
    # The mask is drawn on the host from the run's generator, so cpu and cuda drop the same
    # entries for the same seed.
    keep = (ctx.rng.random(tuple(x.shape)) >= rate).astype(x.dtype)
    keep *= x.dtype.type(1.0 / (1.0 - rate))
    keep_d = cuda.to_device(keep)
    out = _empty(x.shape, x.dtype)
    if out.size:
        _binary_fwd[_launch(out.size)](MUL, _flat(x), _flat(keep_d), _flat(out))
    return out, keep_d


def _dropout_bwd(ctx, g, y, x, rate, state=None):
    if state is None:
        return (g,)
    out = _empty(g.shape, g.dtype)
    if out.size:
        _binary_fwd[_launch(out.size)](MUL, _flat(g), _flat(state), _flat(out))
    return (out,)


def _embedding_fwd(ctx, ids, table):
    V, D = tuple(table.shape)
    ids_d = cuda.to_device(np.ascontiguousarray(_host(ids), np.int32).reshape(-1))
    out = _empty(tuple(ids.shape) + (D,), table.dtype)
    bad = cuda.to_device(np.zeros(1, np.int32))
    if out.size:
        _gather_rows[_launch(out.size)](_flat(table), ids_d, _flat(out), D, V, bad)
    if bad.copy_to_host()[0]:
        h = _host(ids)
        k = h[(h < 0) | (h >= V)][0]
        raise ValueError(f"{ctx.where()}: id {int(k)} is outside the vocabulary [0, {V})")
    return out


def _embedding_bwd(ctx, g, y, ids, table):
    V, D = tuple(table.shape)
    ids_d = cuda.to_device(np.ascontiguousarray(_host(ids), np.int32).reshape(-1))
    out = cuda.to_device(np.zeros(V * D, g.dtype))
    if g.size:
        _scatter_rows[_launch(g.size)](_flat(g), ids_d, out, D)
    return None, out.reshape((V, D))


def _conv_geometry(x, W, stride, dilation, padding):
    T, B, C = tuple(x.shape)
    K, _, O = tuple(W.shape)
    left, T_out = window_geometry(T, K, stride, dilation, padding)
    return T, B, C, K, O, left, T_out


def _conv_fwd(ctx, x, W, stride=1, dilation=1, padding="same"):
    from asrkit.kernels.cuda.gemm import gemm

    if x.dtype != W.dtype:
        return NotImplemented
    T, B, C, K, O, left, T_out = _conv_geometry(x, W, stride, dilation, padding)
    cols = _empty((T_out * B, K * C), x.dtype)
    if cols.size:
        _gather_windows[_launch(cols.size)](_flat(x), _flat(cols), T, B, C, K, stride,
                                            dilation, left)
    if T_out * B == 0:
        return _empty((T_out, B, O), x.dtype)
    return gemm(cols, W.reshape(K * C, O)).reshape((T_out, B, O))


def _conv_bwd(ctx, g, y, x, W, stride=1, dilation=1, padding="same"):
    from asrkit.kernels.cuda.gemm import gemm

    T, B, C, K, O, left, T_out = _conv_geometry(x, W, stride, dilation, padding)
    if T_out * B == 0:
        return NotImplemented
    g2 = g.reshape((T_out * B, O))
    gx = gW = None
    if ctx.needs_grad[1]:
        cols = _empty((T_out * B, K * C), x.dtype)
        _gather_windows[_launch(cols.size)](_flat(x), _flat(cols), T, B, C, K, stride,
                                            dilation, left)
        gW = gemm(cols, g2, trans_a=True).reshape((K, C, O))
    if ctx.needs_grad[0]:
        gcols = gemm(g2, W.reshape(K * C, O), trans_b=True)
        gx = cuda.to_device(np.zeros(T * B * C, g.dtype))
        _scatter_windows[_launch(gcols.size)](_flat(gcols), gx, T, B, C, K, stride, dilation,
                                              left)
        gx = gx.reshape((T, B, C))
    return gx, gW


def register() -> None:
    """Attach the CUDA impls to their primitives (idempotent)."""
    for name, code in UNARY.items():
        fwd, bwd = _unary_impl(code)
        prim = getattr(elementwise, name).primitive
        prim.impls.update(cuda=fwd, cuda_backward=bwd)
    for name, code in BINARY.items():
        fwd, bwd = _binary_impl(code)
        getattr(elementwise, name).primitive.impls.update(cuda=fwd, cuda_backward=bwd)
    linalg.times_p.impls.update(cuda=_times_fwd, cuda_backward=_times_bwd)
    reductions.sum_all_p.impls.update(cuda=_sum_all_fwd, cuda_backward=_sum_all_bwd)
    shape_ops.splice_p.impls.update(cuda=_splice_fwd, cuda_backward=_splice_bwd)
    recurrent.lstm_p.impls.update(cuda=_lstm_fwd, cuda_backward=_lstm_bwd)
    recurrent.blstm_p.impls.update(cuda=_blstm_fwd, cuda_backward=_blstm_bwd)
    criteria.ctc_p.impls.update(cuda=_ctc_fwd, cuda_backward=_ctc_bwd)
    criteria.cross_entropy_p.impls.update(cuda=_ce_fwd, cuda_backward=_ce_bwd)
    # these modules share their names with functions exported by asrkit.ops
    softmax, dropout, embedding = (importlib.import_module(f"asrkit.ops.{m}")
                                   for m in ("softmax", "dropout", "embedding"))
    softmax.log_softmax_p.impls.update(cuda=_log_softmax_fwd, cuda_backward=_log_softmax_bwd)
    softmax.softmax_p.impls.update(cuda=_softmax_fwd, cuda_backward=_softmax_bwd)
    normalization.layer_norm_p.impls.update(cuda=_ln_fwd, cuda_backward=_ln_bwd)
    dropout.dropout_p.impls.update(cuda=_dropout_fwd, cuda_backward=_dropout_bwd)
    embedding.embedding_p.impls.update(cuda=_embedding_fwd, cuda_backward=_embedding_bwd)
    convolution.conv1d_p.impls.update(cuda=_conv_fwd, cuda_backward=_conv_bwd)


register()
