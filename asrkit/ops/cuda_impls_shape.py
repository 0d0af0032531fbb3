"""CUDA forwards/backwards of the layout and sequence-axis ops (registered on import).

View ops (reshape, transpose, getitem/slice_axis, subsample_frames, identity, stop_gradient)
replay their numpy forward's layout on the device (:func:`asrkit.ops.cuda_layout.view_layout`);
``splice`` on any axis and ``stack`` are strided scatters; frame stacking reuses the conv1d window
kernels; splicing, reversal, per-sequence sums/means and softmax over time are the
``asrkit.kernels`` CUDA sequence kernels; delays, sequence_first/last/max and pooling have their
own kernels here. Lengths come from ``ctx`` (host ``int32[B]``) and are copied to the device.
"""

from __future__ import annotations

import importlib
import math

import numpy as np
from numba import cuda

from asrkit.ops import cuda_impls, elementwise, sequence_ops, shape_ops
from asrkit.ops._frames import window_geometry
from asrkit.ops.cuda_layout import (
    contiguous,
    empty,
    flat,
    gather,
    launch,
    scatter,
    view_layout,
    zeros,
)


def _seq_kernels():
    return importlib.import_module("asrkit.kernels.cuda.sequence")


def _dev_lengths(L):
    return cuda.to_device(np.ascontiguousarray(L, np.int32))


def _x_shape(ctx, x, g):
    """Input 0's runtime shape: its array when kept, else its static shape with the dynamic
    (leading) axes taken from ``g``."""
    if x is not None:
        return tuple(x.shape)
    return tuple(int(g.shape[i]) if d is None else int(d)
                 for i, d in enumerate(ctx.node.inputs[0].shape))


def _as3(a):
    """``[T, B, ...]`` -> contiguous ``[T, B, F]`` view."""
    a = contiguous(a)
    T, B = tuple(a.shape[:2])
    return a.reshape((T, B, a.size // max(T * B, 1) if T * B else 1))


# -- view ops ---------------------------------------------------------------------------------
def _view_impl(prim):
    def layout(ctx, shape, attrs):
        return view_layout(lambda a: prim.forward(ctx, a, **attrs), shape)

    def fwd(ctx, x, **attrs):
        lay = layout(ctx, tuple(x.shape), attrs)
        if lay is None:
            return NotImplemented
        return gather(x, *lay)

    def bwd(ctx, g, y, x, **attrs):
        shape = _x_shape(ctx, x, g)
        lay = layout(ctx, shape, attrs)
        if lay is None:
            return NotImplemented
        _, strides, offset = lay
        gx = zeros(shape, g.dtype)
        scatter(g, flat(gx), strides, offset, accumulate=0 in strides)
        return (gx,)
    return fwd, bwd


def _reshape_fwd(ctx, x, shape):
    nd = len(ctx.node.dynamic_axes)
    return contiguous(x).reshape(tuple(x.shape[:nd]) + tuple(ctx.node.shape[nd:]))


def _reshape_bwd(ctx, g, y, x, shape):
    return (contiguous(g).reshape(tuple(x.shape)),)


def _copy_fwd(ctx, x):
    return cuda_impls.device_copy(x)


# -- splice on any axis, stack ----------------------------------------------------------------
def _join_layouts(ctx, shapes, axis, new_axis):
    full = shape_ops._join_axis(ctx, new_axis, axis)
    first = shapes[0]
    if new_axis:
        out_shape = first[:full] + (len(shapes),) + first[full:]
        keys = [(slice(None),) * full + (i,) for i in range(len(shapes))]
    else:
        out_shape = first[:full] + (sum(s[full] for s in shapes),) + first[full + 1:]
        cuts = np.cumsum([0] + [s[full] for s in shapes])
        keys = [(slice(None),) * full + (slice(int(a), int(b)),) for a, b in zip(cuts, cuts[1:])]
    return out_shape, [view_layout(lambda a, k=k: a[k], out_shape) for k in keys]


def _join_fwd(ctx, *xs, axis, new_axis):
    if len({x.dtype for x in xs}) != 1:
        return NotImplemented
    out_shape, lays = _join_layouts(ctx, [tuple(x.shape) for x in xs], axis, new_axis)
    out = empty(out_shape, xs[0].dtype)
    for x, (_, strides, offset) in zip(xs, lays):
        scatter(x, flat(out), strides, offset, accumulate=False)
    return out


def _join_bwd(ctx, g, y, *xs, axis, new_axis):
    full = shape_ops._join_axis(ctx, new_axis, axis)
    gs = tuple(g.shape)
    if new_axis:
        shapes = [gs[:full] + gs[full + 1:]] * len(ctx.node.inputs)
    else:
        shapes = [gs[:full] + (int(i.shape[full]),) + gs[full + 1:] for i in ctx.node.inputs]
    _, lays = _join_layouts(ctx, shapes, axis, new_axis)
    return tuple(gather(g, *lay) for lay in lays)


def _last_axis_splice(ctx, axis, new_axis):
    """The case cuda_impls' column-copy splice handles (concatenation on the last axis)."""
    rank, nd = len(ctx.node.shape), len(ctx.node.dynamic_axes)
    return not new_axis and axis % (rank - nd) == rank - 1 - nd


def _splice_fwd_any(ctx, *xs, axis, new_axis):
    if _last_axis_splice(ctx, axis, new_axis):
        res = cuda_impls._splice_fwd(ctx, *xs, axis=axis, new_axis=new_axis)
        if res is not NotImplemented:
            return res
    return _join_fwd(ctx, *xs, axis=axis, new_axis=new_axis)


def _splice_bwd_any(ctx, g, y, *xs, axis, new_axis):
    # the column kernels only for what their forward took: mixed dtypes went to _join_fwd
    if _last_axis_splice(ctx, axis, new_axis) and len({i.dtype for i in ctx.node.inputs}) == 1:
        return cuda_impls._splice_bwd(ctx, g, y, *xs, axis=axis, new_axis=new_axis)
    return _join_bwd(ctx, g, y, *xs, axis=axis, new_axis=new_axis)


# -- frame stacking / splicing / reversal (asrkit.kernels and the conv window kernels) --------
def _stack_fwd(ctx, x, size, stride):
    x = _as3(x)
    T, B, D = tuple(x.shape)
    T_out = -(-T // stride)
    out = empty((T_out, B, size * D), x.dtype)
    if out.size:
        cuda_impls._gather_windows[launch(out.size)](flat(x), flat(out), T, B, D, size, stride,
                                                     1, 0)
    return out


def _stack_bwd(ctx, g, y, x, size, stride):
    T, B, D = tuple(x.shape)
    gx = zeros((T * B * D,), g.dtype)
    if g.size:
        cuda_impls._scatter_windows[launch(g.size)](flat(contiguous(g)), gx, T, B, D, size,
                                                    stride, 1, 0)
    return (gx.reshape((T, B, D)),)


def _splice_frames_fwd(ctx, x, left, right):
    return _seq_kernels().splice_frames(_as3(x), ctx.in_lengths[0], left, right)


def _splice_frames_bwd(ctx, g, y, x, left, right):
    return (_seq_kernels().splice_frames_backward(contiguous(g), ctx.in_lengths[0], left,
                                                  right),)


def _reverse_fwd(ctx, x):
    return _seq_kernels().sequence_reverse(_as3(x), ctx.in_lengths[0]).reshape(tuple(x.shape))


def _reverse_bwd(ctx, g, y, x):
    return (_seq_kernels().sequence_reverse_backward(_as3(g), ctx.in_lengths[0])
            .reshape(tuple(g.shape)),)


# -- per-sequence sums, means and softmax over time -------------------------------------------
def _seq_sum_impl(mean):
    def fwd(ctx, x):
        if x.dtype.kind != "f":
            return NotImplemented
        k = _seq_kernels()
        out = (k.masked_mean if mean else k.masked_sum)(_as3(x), ctx.in_lengths[0])
        return out.reshape(tuple(x.shape[1:]))

    def bwd(ctx, g, y, x):
        k = _seq_kernels()
        B = tuple(g.shape)[0]
        g2 = contiguous(g).reshape((B, g.size // max(B, 1) if B else 1))
        fn = k.masked_mean_backward if mean else k.masked_sum_backward
        return (fn(g2, ctx.in_lengths[0], tuple(x.shape)[0]).reshape(tuple(x.shape)),)
    return fwd, bwd


def _seq_softmax_impl(log):
    def fwd(ctx, x):
        if x.dtype.kind != "f":
            return NotImplemented
        k = _seq_kernels()
        fn = k.masked_log_softmax if log else k.masked_softmax
        return fn(_as3(x), ctx.in_lengths[0], axis=0).reshape(tuple(x.shape))

    def bwd(ctx, g, y, x):
        k = _seq_kernels()
        fn = k.masked_log_softmax_backward if log else k.masked_softmax_backward
        return (fn(_as3(g), _as3(y), ctx.in_lengths[0], axis=0).reshape(tuple(g.shape)),)
    return fwd, bwd


# -- delays -----------------------------------------------------------------------------------
@cuda.jit
def _delay(x, init, L, out, B, F, k, future):
    i = cuda.grid(1)
    if i < out.size:
        t = i // (B * F)
        b = (i // F) % B
        if future:
            src = t + k
            ok = src < L[b]
        else:
            src = t - k
            ok = src >= 0
        out[i] = x[i + (src - t) * B * F] if ok else init[i % (B * F)]


@cuda.jit
def _delay_bwd(g, L, gx, T, B, F, k, future):
    i = cuda.grid(1)
    if i < gx.size:
        t = i // (B * F)
        b = (i // F) % B
        # gx[t] = g[t'] for the t' that read frame t: t' = t + k (past) or t - k (future)
        if future:
            ok = t >= k and t < L[b]
            dst = t - k
        else:
            ok = t + k < T
            dst = t + k
        gx[i] = g[i + (dst - t) * B * F] if ok else 0.0


@cuda.jit
def _delay_init_bwd(g, L, ginit, T, B, F, k, future):
    j = cuda.grid(1)
    if j < B * F:
        b = j // F
        acc = 0.0
        for t in range(T):
            used = (t + k >= L[b]) if future else (t < k)
            if used:
                acc += g[t * B * F + j]
        ginit[j] = acc


def _delay_impl(future):
    from asrkit.ops.cuda_layout import broadcast_to

    def fwd(ctx, x, init, time_step=1):
        if x.dtype.kind != "f":
            return NotImplemented
        x3 = _as3(x)
        T, B, F = tuple(x3.shape)
        frame = broadcast_to(init, tuple(x.shape[1:]), x.dtype)
        out = empty(x.shape, x.dtype)
        if out.size:
            _delay[launch(out.size)](flat(x3), flat(frame), _dev_lengths(ctx.in_lengths[0]),
                                     flat(out), B, F, int(time_step), bool(future))
        return out

    def bwd(ctx, g, y, x, init, time_step=1):
        g3 = _as3(g)
        T, B, F = tuple(g3.shape)
        L = _dev_lengths(ctx.in_lengths[0])
        gx = empty(g.shape, g.dtype)
        ginit = empty(tuple(g.shape[1:]), g.dtype)
        if gx.size:
            _delay_bwd[launch(gx.size)](flat(g3), L, flat(gx), T, B, F, int(time_step),
                                        bool(future))
            _delay_init_bwd[launch(B * F)](flat(g3), L, flat(ginit), T, B, F, int(time_step),
                                           bool(future))
        elif ginit.size:
            ginit = zeros(ginit.shape, g.dtype)
        return gx, ginit
    return fwd, bwd


# -- sequence_first / sequence_last / sequence_max --------------------------------------------
@cuda.jit
def _pick(x, idx, out, B, F):
    i = cuda.grid(1)
    if i < out.size:
        b = i // F
        t = idx[b]
        out[i] = x[(t * B + b) * F + i % F] if t >= 0 else 0.0


@cuda.jit
def _put(g, idx, gx, B, F):
    i = cuda.grid(1)
    if i < g.size:
        b = i // F
        t = idx[b]
        if t >= 0:
            gx[(t * B + b) * F + i % F] = g[i]


def _pick_index(ctx, last):
    L = np.asarray(ctx.in_lengths[0])
    return _dev_lengths(np.where(L > 0, L - 1, -1) if last else np.zeros_like(L))


def _pick_impl(last):
    def fwd(ctx, x):
        x3 = _as3(x)
        T, B, F = tuple(x3.shape)
        out = empty(tuple(x.shape[1:]), x.dtype)
        if out.size:
            if T == 0:
                return zeros(out.shape, x.dtype)
            _pick[launch(out.size)](flat(x3), _pick_index(ctx, last), flat(out), B, F)
        return out

    def bwd(ctx, g, y, x):
        T, B = tuple(x.shape[:2])
        F = g.size // max(B, 1) if B else 1
        gx = zeros(x.shape, g.dtype)
        if g.size and T:
            _put[launch(g.size)](flat(contiguous(g)), _pick_index(ctx, last), flat(gx), B, F)
        return (gx,)
    return fwd, bwd


@cuda.jit
def _seq_max(x, L, out, B, F):
    j = cuda.grid(1)
    if j < B * F:
        n = L[j // F]
        m = -math.inf
        for t in range(n):
            m = max(m, float(x[t * B * F + j]))
        out[j] = m if n > 0 and not math.isinf(m) else 0.0


@cuda.jit
def _seq_max_bwd(g, x, y, L, gx, T, B, F):
    j = cuda.grid(1)
    if j < B * F:
        n = L[j // F]
        hits = 0
        for t in range(n):
            if x[t * B * F + j] == y[j]:
                hits += 1
        share = g[j] / max(hits, 1)
        for t in range(T):
            gx[t * B * F + j] = share if t < n and x[t * B * F + j] == y[j] else 0.0


def _seq_max_fwd(ctx, x):
    if x.dtype.kind != "f":
        return NotImplemented
    x3 = _as3(x)
    T, B, F = tuple(x3.shape)
    out = empty(tuple(x.shape[1:]), x.dtype)
    if out.size:
        _seq_max[launch(B * F)](flat(x3), _dev_lengths(ctx.in_lengths[0]), flat(out), B, F)
    return out


def _seq_max_bwd_impl(ctx, g, y, x):
    x3 = _as3(x)
    T, B, F = tuple(x3.shape)
    gx = empty(x.shape, g.dtype)
    if gx.size:
        _seq_max_bwd[launch(B * F)](flat(contiguous(g)), flat(x3), flat(contiguous(y)),
                                    _dev_lengths(ctx.in_lengths[0]), flat(gx), T, B, F)
    return (gx,)


# -- pooling over time ------------------------------------------------------------------------
@cuda.jit
def _pool(x, L, y, arg, B, C, K, stride, left, is_max):
    i = cuda.grid(1)
    if i < y.size:
        c = i % C
        b = (i // C) % B
        to = i // (C * B)
        best = -math.inf
        pick = -1
        acc = 0.0
        cnt = 0
        for k in range(K):
            t = to * stride - left + k
            if t >= 0 and t < L[b]:
                v = float(x[(t * B + b) * C + c])
                cnt += 1
                acc += v
                if v > best or pick < 0:
                    best = v
                    pick = k
        if is_max:
            y[i] = best if pick >= 0 else 0.0
            arg[i] = pick
        else:
            y[i] = acc / max(cnt, 1)
            arg[i] = max(cnt, 1)


@cuda.jit
def _pool_bwd(g, arg, L, gx, B, C, K, stride, left, is_max):
    i = cuda.grid(1)
    if i < g.size:
        c = i % C
        b = (i // C) % B
        to = i // (C * B)
        for k in range(K):
            t = to * stride - left + k
            if t >= 0 and t < L[b]:
                if is_max:
                    if k == arg[i]:
                        cuda.atomic.add(gx, (t * B + b) * C + c, g[i])
                else:
                    cuda.atomic.add(gx, (t * B + b) * C + c, g[i] / arg[i])


def _pool_fwd(ctx, x, kind="max", size=2, stride=None, padding="valid"):
    if x.dtype.kind != "f":
        return NotImplemented
    stride = stride or size
    x3 = _as3(x)
    T, B, C = tuple(x3.shape)
    left, T_out = window_geometry(T, size, stride, 1, padding)
    y = empty((T_out,) + tuple(x.shape[1:]), x.dtype)
    arg = empty((max(y.size, 1),), np.int32)
    if y.size:
        _pool[launch(y.size)](flat(x3), _dev_lengths(ctx.in_lengths[0]), flat(y), arg, B, C,
                              size, stride, left, kind == "max")
    return y, arg


def _pool_bwd_impl(ctx, g, y, x, kind="max", size=2, stride=None, padding="valid", state=None):
    stride = stride or size
    T, B = tuple(x.shape[:2])
    C = x.size // max(T * B, 1) if T * B else 1
    left, _ = window_geometry(T, size, stride, 1, padding)
    gx = zeros(x.shape, g.dtype)
    if g.size:
        _pool_bwd[launch(g.size)](flat(contiguous(g)), state, _dev_lengths(ctx.in_lengths[0]),
                                  flat(gx), B, C, size, stride, left, kind == "max")
    return (gx,)


def register() -> None:
    """Attach these CUDA impls to their primitives (call after ``cuda_impls.register``)."""
    for prim in (shape_ops.transpose_p, shape_ops.getitem_p, sequence_ops.subsample_frames_p):
        fwd, bwd = _view_impl(prim)
        prim.impls.update(cuda=fwd, cuda_backward=bwd)
    shape_ops.reshape_p.impls.update(cuda=_reshape_fwd, cuda_backward=_reshape_bwd)
    elementwise.identity_p.impls.update(cuda=_copy_fwd,
                                        cuda_backward=lambda ctx, g, y, x: (g,))
    elementwise.stop_gradient_p.impls.update(cuda=_copy_fwd)
    sp = shape_ops.splice_p
    sp.impls.update(cuda=_splice_fwd_any, cuda_backward=_splice_bwd_any)
    so = sequence_ops
    so.stack_frames_p.impls.update(cuda=_stack_fwd, cuda_backward=_stack_bwd)
    so.splice_frames_p.impls.update(cuda=_splice_frames_fwd, cuda_backward=_splice_frames_bwd)
    so.sequence_reverse_p.impls.update(cuda=_reverse_fwd, cuda_backward=_reverse_bwd)
    for prim, mean in ((so.sequence_sum_p, False), (so.sequence_mean_p, True)):
        fwd, bwd = _seq_sum_impl(mean)
        prim.impls.update(cuda=fwd, cuda_backward=bwd)
    for prim, future in ((so.past_value_p, False), (so.future_value_p, True)):
        fwd, bwd = _delay_impl(future)
        prim.impls.update(cuda=fwd, cuda_backward=bwd)
    for prim, last in ((so.sequence_first_p, False), (so.sequence_last_p, True)):
        fwd, bwd = _pick_impl(last)
        prim.impls.update(cuda=fwd, cuda_backward=bwd)
    so.sequence_max_p.impls.update(cuda=_seq_max_fwd, cuda_backward=_seq_max_bwd_impl)
    so.sequence_lengths_p.impls.update(
        cuda=lambda ctx, x: cuda.to_device(np.asarray(ctx.in_lengths[0], np.float32)))
    softmax = importlib.import_module("asrkit.ops.softmax")
    for prim, log in ((softmax.sequence_softmax_p, False), (softmax.sequence_log_softmax_p, True)):
        fwd, bwd = _seq_softmax_impl(log)
        prim.impls.update(cuda=fwd, cuda_backward=bwd)
    conv = importlib.import_module("asrkit.ops.convolution")
    conv.pool1d_p.impls.update(cuda=_pool_fwd, cuda_backward=_pool_bwd_impl)


register()
