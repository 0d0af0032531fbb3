"""Sequence kernels on CUDA (numba.cuda); same signatures and results as the reference twin.

One thread per output element (or per row / column for the softmaxes, the sums and the maxima).
The backward of splicing is a gather, one thread per input element summing the output blocks
that read it, so no atomics are needed. Argument checks are shared with
:mod:`asrkit.kernels.reference.sequence`. Lengths may be host arrays or device arrays (a scan
copies them once, not per frame).
"""

from __future__ import annotations

import math

import numpy as np

from asrkit.kernels._device import DeviceUnavailableError
from asrkit.kernels.reference.sequence import check_axis, check_splice

try:
    from numba import cuda
except ImportError as e:  # pragma: no cover - depends on the install
    raise DeviceUnavailableError(
        "device='cuda' needs numba-cuda: pip install 'asrkit[cuda]'") from e

from asrkit.kernels.cuda.layout import broadcast_to, contiguous, zeros  # noqa: E402
from asrkit.kernels.cuda.lstm import THREADS, grid_size, host_lengths, to_device  # noqa: E402


def _in(x):
    x = to_device(x)
    if np.dtype(x.dtype) not in (np.float32, np.float64):
        raise ValueError(f"sequence kernels (cuda): need float32 or float64, got {x.dtype}")
    return x


def _lengths(lengths, T, B):
    host = host_lengths(lengths, T, B)
    return host, cuda.to_device(host)


def _launch(kernel, n, *args):
    if n > 0:
        kernel[grid_size(n), THREADS](*args)


# ---- softmax -----------------------------------------------------------------------------------

@cuda.jit
def _log_softmax_features(x, lengths, y, log):
    k = cuda.grid(1)
    T, B, D = x.shape
    if k >= T * B:
        return
    t, b = k // B, k % B
    if t >= lengths[b]:
        for d in range(D):
            y[t, b, d] = 0
        return
    mx = x[t, b, 0]
    for d in range(1, D):
        mx = max(mx, x[t, b, d])
    s = 0.0
    for d in range(D):
        s += math.exp(x[t, b, d] - mx)
    lse = mx + math.log(s)
    for d in range(D):
        y[t, b, d] = x[t, b, d] - lse if log else math.exp(x[t, b, d] - lse)


@cuda.jit
def _log_softmax_time(x, lengths, y, log):
    k = cuda.grid(1)
    T, B, D = x.shape
    if k >= B * D:
        return
    b, d = k // D, k % D
    L = lengths[b]
    for t in range(L, T):
        y[t, b, d] = 0
    if L == 0:
        return
    mx = x[0, b, d]
    for t in range(1, L):
        mx = max(mx, x[t, b, d])
    s = 0.0
    for t in range(L):
        s += math.exp(x[t, b, d] - mx)
    lse = mx + math.log(s)
    for t in range(L):
        y[t, b, d] = x[t, b, d] - lse if log else math.exp(x[t, b, d] - lse)


@cuda.jit
def _softmax_backward_features(dy, y, lengths, dx, log):
    k = cuda.grid(1)
    T, B, D = y.shape
    if k >= T * B:
        return
    t, b = k // B, k % B
    valid = t < lengths[b]
    s = 0.0
    if valid:
        for d in range(D):
            s += dy[t, b, d] if log else dy[t, b, d] * y[t, b, d]
    for d in range(D):
        if not valid:
            dx[t, b, d] = 0
        elif log:
            dx[t, b, d] = dy[t, b, d] - math.exp(y[t, b, d]) * s
        else:
            dx[t, b, d] = y[t, b, d] * (dy[t, b, d] - s)


@cuda.jit
def _softmax_backward_time(dy, y, lengths, dx, log):
    k = cuda.grid(1)
    T, B, D = y.shape
    if k >= B * D:
        return
    b, d = k // D, k % D
    L = lengths[b]
    s = 0.0
    for t in range(L):
        s += dy[t, b, d] if log else dy[t, b, d] * y[t, b, d]
    for t in range(T):
        if t >= L:
            dx[t, b, d] = 0
        elif log:
            dx[t, b, d] = dy[t, b, d] - math.exp(y[t, b, d]) * s
        else:
            dx[t, b, d] = y[t, b, d] * (dy[t, b, d] - s)


def _softmax(x, lengths, axis, log):
    x = _in(x)
    T, B, D = x.shape
    _, ld = _lengths(lengths, T, B)
    y = cuda.device_array(x.shape, x.dtype)
    if check_axis(axis) == 0:
        _launch(_log_softmax_time, B * D, x, ld, y, log)
    else:
        _launch(_log_softmax_features, T * B, x, ld, y, log)
    return y


def _softmax_backward(dy, y, lengths, axis, log):
    y = _in(y)
    dy = to_device(dy, y.dtype)
    T, B, D = y.shape
    _, ld = _lengths(lengths, T, B)
    dx = cuda.device_array(y.shape, y.dtype)
    if check_axis(axis) == 0:
        _launch(_softmax_backward_time, B * D, dy, y, ld, dx, log)
    else:
        _launch(_softmax_backward_features, T * B, dy, y, ld, dx, log)
    return dx


def masked_softmax(x, lengths=None, axis=-1):
    """Softmax of ``x [T, B, D]`` over features (-1) or valid frames (0); 0 on padding."""
    return _softmax(x, lengths, axis, False)


def masked_log_softmax(x, lengths=None, axis=-1):
    """Log-softmax of ``x [T, B, D]`` over features (-1) or valid frames (0); 0 on padding."""
    return _softmax(x, lengths, axis, True)


def masked_softmax_backward(dy, y, lengths=None, axis=-1):
    """Gradient of :func:`masked_softmax` from its output ``y [T, B, D]``."""
    return _softmax_backward(dy, y, lengths, axis, False)


def masked_log_softmax_backward(dy, y, lengths=None, axis=-1):
    """Gradient of :func:`masked_log_softmax` from its output ``y [T, B, D]``."""
    return _softmax_backward(dy, y, lengths, axis, True)


# ---- sums over time ----------------------------------------------------------------------------

@cuda.jit
def _masked_sum(x, lengths, mean, out):
    k = cuda.grid(1)
    T, B, D = x.shape
    if k >= B * D:
        return
    b, d = k // D, k % D
    L = lengths[b]
    s = 0.0
    for t in range(L):
        s += x[t, b, d]
    out[b, d] = s / L if mean and L > 0 else s


@cuda.jit
def _broadcast_time(dy, lengths, mean, dx):
    k = cuda.grid(1)
    T, B, D = dx.shape
    if k >= T * B * D:
        return
    t, b, d = k // (B * D), (k // D) % B, k % D
    L = lengths[b]
    if t >= L:
        dx[t, b, d] = 0
    else:
        dx[t, b, d] = dy[b, d] / L if mean else dy[b, d]


def _sum(x, lengths, mean):
    x = _in(x)
    T, B, D = x.shape
    _, ld = _lengths(lengths, T, B)
    out = cuda.device_array((B, D), x.dtype)
    _launch(_masked_sum, B * D, x, ld, mean, out)
    return out


def _sum_backward(dy, lengths, T, mean):
    dy = _in(dy)
    B, D = dy.shape
    _, ld = _lengths(lengths, T, B)
    dx = cuda.device_array((T, B, D), dy.dtype)
    _launch(_broadcast_time, T * B * D, dy, ld, mean, dx)
    return dx


def masked_sum(x, lengths=None):
    """Sum over valid frames: ``x [T, B, D] -> [B, D]``."""
    return _sum(x, lengths, False)


def masked_mean(x, lengths=None):
    """Mean over valid frames: ``x [T, B, D] -> [B, D]`` (0 for an empty sequence)."""
    return _sum(x, lengths, True)


def masked_sum_backward(dy, lengths, T):
    """Gradient of :func:`masked_sum`: ``dy [B, D] -> [T, B, D]`` on the valid frames."""
    return _sum_backward(dy, lengths, T, False)


def masked_mean_backward(dy, lengths, T):
    """Gradient of :func:`masked_mean`: ``dy / length`` on the valid frames."""
    return _sum_backward(dy, lengths, T, True)


# ---- reordering and resampling of frames -------------------------------------------------------

@cuda.jit
def _reverse(x, lengths, y):
    k = cuda.grid(1)
    T, B, D = y.shape
    if k >= T * B * D:
        return
    t, b, d = k // (B * D), (k // D) % B, k % D
    L = lengths[b]
    y[t, b, d] = x[L - 1 - t, b, d] if t < L else 0


def sequence_reverse(x, lengths=None):
    """Reverse each sequence of ``x [T, B, D]`` within its own length; 0 on padding."""
    x = _in(x)
    T, B, D = x.shape
    _, ld = _lengths(lengths, T, B)
    y = cuda.device_array(x.shape, x.dtype)
    _launch(_reverse, T * B * D, x, ld, y)
    return y


def sequence_reverse_backward(dy, lengths=None):
    """Gradient of :func:`sequence_reverse` (the same reversal)."""
    return sequence_reverse(dy, lengths)


@cuda.jit
def _splice(x, lengths, left, y):
    k = cuda.grid(1)
    T, B, KD = y.shape
    D = x.shape[2]
    if k >= T * B * KD:
        return
    t, b, e = k // (B * KD), (k // KD) % B, k % KD
    L = lengths[b]
    if t >= L:
        y[t, b, e] = 0
        return
    src = min(max(t + e // D - left, 0), L - 1)
    y[t, b, e] = x[src, b, e % D]


@cuda.jit
def _splice_backward(dy, lengths, left, right, dx):
    """dx[t] = sum over blocks k of dy[t', k] with clamp(t' + k - left) == t (a gather)."""
    i = cuda.grid(1)
    T, B, D = dx.shape
    if i >= T * B * D:
        return
    t, b, d = i // (B * D), (i // D) % B, i % D
    L = lengths[b]
    s = 0.0
    if t < L:
        for k in range(left + right + 1):
            # output frames u read frame t through block k when clamp(u + k - left) == t
            lo = 0 if t == 0 else t - k + left
            hi = L - 1 if t == L - 1 else t - k + left
            for u in range(max(lo, 0), min(hi, L - 1) + 1):
                s += dy[u, b, k * D + d]
    dx[t, b, d] = s


def splice_frames(x, lengths=None, left=0, right=0):
    """Kaldi ``splice-feats`` with edge replication: ``[T, B, D] -> [T, B, (left+1+right)*D]``."""
    check_splice(left, right)
    x = _in(x)
    T, B, D = x.shape
    _, ld = _lengths(lengths, T, B)
    y = cuda.device_array((T, B, (left + right + 1) * D), x.dtype)
    _launch(_splice, y.size, x, ld, left, y)
    return y


def splice_frames_backward(dy, lengths=None, left=0, right=0):
    """Gradient of :func:`splice_frames`: ``dy [T, B, K*D] -> dx [T, B, D]``."""
    check_splice(left, right)
    dy = _in(dy)
    T, B, KD = dy.shape
    _, ld = _lengths(lengths, T, B)
    dx = cuda.device_array((T, B, KD // (left + right + 1)), dy.dtype)
    _launch(_splice_backward, dx.size, dy, ld, left, right, dx)
    return dx


# ---- padding, delays, single frames, maxima ---------------------------------------------------

def _dev_lengths(lengths):
    if hasattr(lengths, "copy_to_host"):
        return lengths
    return cuda.to_device(np.ascontiguousarray(lengths, np.int32))


def _flat3(x):
    """``[T, B, ...]`` -> flat contiguous array and ``(T, B, F)``."""
    T, B = int(x.shape[0]), int(x.shape[1])
    F = x.size // (T * B) if T * B else 1
    x = _contiguous(x)
    return x.reshape(x.size), T, B, F


def _contiguous(a):
    return contiguous(to_device(a))


@cuda.jit
def _fill_padding(x, lengths, B, F, value, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] if i // (B * F) < lengths[(i // F) % B] else value


def fill_padding(x, lengths, value=0.0, out=None):
    """``x [T, B, ...]`` with ``value`` on the padding frames; into ``out`` (may be ``x``)."""
    xf, T, B, F = _flat3(x)
    out = cuda.device_array(x.shape, x.dtype) if out is None else out
    _launch(_fill_padding, xf.size, xf, _dev_lengths(lengths), B, F, value, out.reshape(xf.size))
    return out


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
            if (t + k >= L[b]) if future else (t < k):
                acc += g[t * B * F + j]
        ginit[j] = acc


def delay(x, init, lengths, k, future):
    """``past_value`` / ``future_value`` of ``x [T, B, ...]``; ``init`` broadcasts to a frame
    ``[B, ...]``."""
    xf, T, B, F = _flat3(x)
    frame = broadcast_to(to_device(init), tuple(x.shape[1:]), x.dtype)
    out = cuda.device_array(x.shape, x.dtype)
    _launch(_delay, xf.size, xf, frame.reshape(B * F), _dev_lengths(lengths),
            out.reshape(xf.size), B, F, int(k), bool(future))
    return out


def delay_backward(g, lengths, k, future):
    """Gradients ``(gx [T, B, ...], ginit [B, ...])`` of :func:`delay`."""
    gf, T, B, F = _flat3(g)
    L = _dev_lengths(lengths)
    gx = cuda.device_array(g.shape, g.dtype)
    ginit = cuda.device_array((B * F,), g.dtype)
    _launch(_delay_bwd, gf.size, gf, L, gx.reshape(gf.size), T, B, F, int(k), bool(future))
    _launch(_delay_init_bwd, B * F, gf, L, ginit, T, B, F, int(k), bool(future))
    if not gf.size and ginit.size:
        ginit = zeros(ginit.shape, g.dtype)
    return gx, ginit.reshape(tuple(g.shape[1:]))


@cuda.jit
def _take(x, idx, out, B, F):
    i = cuda.grid(1)
    if i < out.size:
        b = i // F
        t = idx[b]
        out[i] = x[(t * B + b) * F + i % F] if t >= 0 else 0.0


@cuda.jit
def _put(g, idx, gx, B, F):
    i = cuda.grid(1)
    if i < gx.size:
        t = i // (B * F)
        b = (i // F) % B
        gx[i] = g[b * F + i % F] if idx[b] == t else 0.0


def take_frame(x, index):
    """``y[b] = x[index[b], b]`` (0 where ``index[b] < 0``): ``x [T, B, ...] -> [B, ...]``."""
    xf, T, B, F = _flat3(x)
    out = cuda.device_array(tuple(x.shape[1:]), x.dtype)
    if T == 0:
        return zeros(out.shape, x.dtype)
    _launch(_take, out.size, xf, _dev_lengths(index), out.reshape(out.size), B, F)
    return out


def put_frame(g, index, T):
    """Adjoint of :func:`take_frame`: ``g [B, ...] -> [T, B, ...]``."""
    B = int(g.shape[0])
    F = g.size // B if B else 1
    gx = cuda.device_array((T,) + tuple(g.shape), g.dtype)
    _launch(_put, gx.size, _contiguous(g).reshape(g.size), _dev_lengths(index),
            gx.reshape(gx.size), B, F)
    return gx


@cuda.jit
def _masked_max(x, L, out, B, F):
    j = cuda.grid(1)
    if j < B * F:
        n = L[j // F]
        m = -math.inf
        for t in range(n):
            m = max(m, float(x[t * B * F + j]))
        out[j] = m if n > 0 and not math.isinf(m) else 0.0


@cuda.jit
def _masked_max_bwd(g, x, y, L, gx, T, B, F):
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


def masked_max(x, lengths):
    """Max over each sequence's valid frames: ``[T, B, ...] -> [B, ...]`` (0 when empty)."""
    xf, T, B, F = _flat3(x)
    out = cuda.device_array(tuple(x.shape[1:]), x.dtype)
    _launch(_masked_max, B * F, xf, _dev_lengths(lengths), out.reshape(out.size), B, F)
    return out


def masked_max_backward(g, x, y, lengths):
    """Gradient of :func:`masked_max`: ``g`` split evenly among each sequence's maxima."""
    xf, T, B, F = _flat3(x)
    gx = cuda.device_array(x.shape, g.dtype)
    _launch(_masked_max_bwd, B * F, _contiguous(g).reshape(g.size), xf,
            _contiguous(y).reshape(y.size), _dev_lengths(lengths), gx.reshape(gx.size), T, B, F)
    return gx


# ---- one step of a scan (recurrence) over [B, ...] states --------------------------------------

@cuda.jit
def _select_frame(h_new, h_prev, lengths, t, F, h_out, y):
    i = cuda.grid(1)
    if i < h_out.size:
        if t < lengths[i // F]:
            v = h_new[i]
            h_out[i] = v
            y[i] = v
        else:
            h_out[i] = h_prev[i]
            y[i] = 0


@cuda.jit
def _seed_grad(g, gh, lengths, t, F, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = g[i] + gh[i] if t < lengths[i // F] else 0


@cuda.jit
def _carry_grad(gh_new, gh, lengths, t, F, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = gh_new[i] if t < lengths[i // F] else gh[i]


def _rows(a):
    B = int(a.shape[0])
    return a.size // B if B else 1


def select_frame(h_new, h_prev, lengths, t, h_out=None, y_out=None):
    """``(h, y)``: ``h_new`` where frame ``t`` is valid for the row's sequence, else the old
    state and 0; into ``h_out``, ``y_out`` when given."""
    h_out = cuda.device_array(h_prev.shape, h_prev.dtype) if h_out is None else h_out
    y_out = cuda.device_array(h_prev.shape, h_prev.dtype) if y_out is None else y_out
    n = h_prev.size
    _launch(_select_frame, n, _contiguous(h_new).reshape(n), _contiguous(h_prev).reshape(n),
            _dev_lengths(lengths), int(t), _rows(h_prev), h_out.reshape(n), y_out.reshape(n))
    return h_out, y_out


def seed_grad(g, gh, lengths, t):
    """``g + gh`` on the rows whose frame ``t`` is valid, 0 on the others."""
    out = cuda.device_array(gh.shape, gh.dtype)
    n = gh.size
    _launch(_seed_grad, n, _contiguous(g).reshape(n), _contiguous(gh).reshape(n),
            _dev_lengths(lengths), int(t), _rows(gh), out.reshape(n))
    return out


def carry_grad(gh_new, gh, lengths, t):
    """``gh_new`` on the rows whose frame ``t`` is valid; an ended sequence keeps ``gh``."""
    out = cuda.device_array(gh.shape, gh.dtype)
    n = gh.size
    _launch(_carry_grad, n, _contiguous(gh_new).reshape(n), _contiguous(gh).reshape(n),
            _dev_lengths(lengths), int(t), _rows(gh), out.reshape(n))
    return out
