"""Sequence kernels on CUDA (numba.cuda); same signatures and results as the reference twin.

One thread per output element (or per row / column for the softmaxes and the sums). The
backward passes of splicing, stacking and subsampling are gathers, one thread per input element
summing the output blocks that read it, so no atomics are needed. Argument checks and
output-length rules are shared with :mod:`asrkit.kernels.reference.sequence`; lengths come back
as host ``int32`` arrays.
"""

from __future__ import annotations

import math

import numpy as np

from asrkit.kernels._device import DeviceUnavailableError
from asrkit.kernels.reference.sequence import (
    check_axis,
    check_sequences,
    check_splice,
    stacked_lengths,
    subsampled_lengths,
)

try:
    from numba import cuda
except ImportError as e:  # pragma: no cover - depends on the install
    raise DeviceUnavailableError(
        "device='cuda' needs numba-cuda: pip install 'asrkit[cuda]'") from e

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


@cuda.jit
def _stack(x, lengths, new_lengths, stack, stride, y):
    k = cuda.grid(1)
    T2, B, SD = y.shape
    D = x.shape[2]
    if k >= T2 * B * SD:
        return
    j, b, e = k // (B * SD), (k // SD) % B, k % SD
    if j >= new_lengths[b]:
        y[j, b, e] = 0
        return
    y[j, b, e] = x[min(j * stride + e // D, lengths[b] - 1), b, e % D]


@cuda.jit
def _stack_backward(dy, lengths, new_lengths, stack, stride, dx):
    """dx[t] = sum of dy[j, i] over windows j and offsets i with min(j*stride+i, L-1) == t."""
    k = cuda.grid(1)
    T, B, D = dx.shape
    if k >= T * B * D:
        return
    t, b, d = k // (B * D), (k // D) % B, k % D
    L, n = lengths[b], new_lengths[b]
    s = 0.0
    if t < L:
        for i in range(stack):
            if t < L - 1:
                if t >= i and (t - i) % stride == 0 and (t - i) // stride < n:
                    s += dy[(t - i) // stride, b, i * D + d]
            else:  # the last frame also stands in for every frame past the end
                j0 = max(0, (t - i + stride - 1) // stride) if t >= i else 0
                for j in range(j0, n):
                    s += dy[j, b, i * D + d]
    dx[t, b, d] = s


def stack_frames(x, lengths=None, stack=2, stride=None, mode="ceil"):
    """Stack ``stack`` frames every ``stride`` frames (see the reference twin for the rules).

    Returns ``(y [T', B, stack*D], lengths int32[B])``.
    """
    stride = stack if stride is None else stride
    x = _in(x)
    T, B, D = x.shape
    host, ld = _lengths(lengths, T, B)
    T2, new = stacked_lengths(host, T, stack, stride, mode)
    y = cuda.device_array((T2, B, stack * D), x.dtype)
    _launch(_stack, y.size, x, ld, cuda.to_device(new), stack, stride, y)
    return y, new


def stack_frames_backward(dy, lengths, T, stack=2, stride=None, mode="ceil"):
    """Gradient of :func:`stack_frames`: ``dy [T', B, stack*D] -> dx [T, B, D]``."""
    stride = stack if stride is None else stride
    dy = _in(dy)
    _, B, SD = dy.shape
    host, ld = _lengths(lengths, T, B)
    _, new = stacked_lengths(host, T, stack, stride, mode)
    dx = cuda.device_array((T, B, SD // stack), dy.dtype)
    _launch(_stack_backward, dx.size, dy, ld, cuda.to_device(new), stack, stride, dx)
    return dx


@cuda.jit
def _subsample(x, new_lengths, factor, offset, y):
    k = cuda.grid(1)
    T2, B, D = y.shape
    if k >= T2 * B * D:
        return
    j, b, d = k // (B * D), (k // D) % B, k % D
    y[j, b, d] = x[offset + j * factor, b, d] if j < new_lengths[b] else 0


@cuda.jit
def _subsample_backward(dy, new_lengths, factor, offset, dx):
    k = cuda.grid(1)
    T, B, D = dx.shape
    if k >= T * B * D:
        return
    t, b, d = k // (B * D), (k // D) % B, k % D
    j = (t - offset) // factor
    hit = t >= offset and (t - offset) % factor == 0 and j < new_lengths[b]
    dx[t, b, d] = dy[j, b, d] if hit else 0


def subsample_frames(x, lengths=None, factor=2, offset=0):
    """Keep frames ``offset, offset+factor, ...``; returns ``(y [T', B, D], lengths int32[B])``."""
    x = _in(x)
    T, B, D = x.shape
    host, _ = _lengths(lengths, T, B)
    T2, new = subsampled_lengths(host, T, factor, offset)
    y = cuda.device_array((T2, B, D), x.dtype)
    _launch(_subsample, y.size, x, cuda.to_device(new), factor, offset, y)
    return y, new


def subsample_frames_backward(dy, lengths, T, factor=2, offset=0):
    """Gradient of :func:`subsample_frames`: ``dy [T', B, D] -> dx [T, B, D]``."""
    dy = _in(dy)
    _, B, D = dy.shape
    host, _ = _lengths(lengths, T, B)
    _, new = subsampled_lengths(host, T, factor, offset)
    dx = cuda.device_array((T, B, D), dy.dtype)
    _launch(_subsample_backward, dx.size, dy, cuda.to_device(new), factor, offset, dx)
    return dx


# ---- padding -----------------------------------------------------------------------------------

@cuda.jit
def _fill(out, value):
    k = cuda.grid(1)
    T, B, F = out.shape
    if k < T * B * F:
        out[k // (B * F), (k // F) % B, k % F] = value


@cuda.jit
def _put_sequence(src, out, b):
    k = cuda.grid(1)
    L, F = src.shape
    if k < L * F:
        out[k // F, b, k % F] = src[k // F, k % F]


@cuda.jit
def _take_sequence(x, b, dst):
    k = cuda.grid(1)
    L, F = dst.shape
    if k < L * F:
        dst[k // F, k % F] = x[k // F, b, k % F]


def pad_sequences(seqs, pad_value=0.0, max_len=None):
    """List of ``[T_b, ...]`` arrays -> ``(x [T, B, ...], lengths int32[B])`` on the device."""
    seqs = [to_device(s) for s in seqs]
    lengths, feat = check_sequences(seqs)
    T = int(lengths.max()) if max_len is None else int(max_len)
    if lengths.max() > T:
        raise ValueError(f"pad_sequences: a sequence of {lengths.max()} frames > max_len={T}")
    dt = np.result_type(*(np.dtype(s.dtype) for s in seqs))
    F = int(np.prod(feat, dtype=np.int64))
    B = len(seqs)
    out = cuda.device_array((T, B, F), dt)
    _launch(_fill, out.size, out, dt.type(pad_value))
    for b, s in enumerate(seqs):
        if np.dtype(s.dtype) != dt:
            s = cuda.to_device(s.copy_to_host().astype(dt))
        _launch(_put_sequence, s.size, s.reshape(int(lengths[b]), F), out, b)
    return out.reshape(T, B, *feat), lengths


def unpad_sequences(x, lengths):
    """``x [T, B, ...]`` + ``lengths`` -> list of B device arrays ``[lengths[b], ...]``."""
    x = to_device(x)
    shape = tuple(x.shape)
    T, B, feat = shape[0], shape[1], shape[2:]
    host = host_lengths(lengths, T, B)
    F = int(np.prod(feat, dtype=np.int64))
    x3 = x.reshape(T, B, F)
    out = []
    for b, L in enumerate(host):
        dst = cuda.device_array((int(L), F), x.dtype)
        _launch(_take_sequence, dst.size, x3, b, dst)
        out.append(dst.reshape(int(L), *feat))
    return out
