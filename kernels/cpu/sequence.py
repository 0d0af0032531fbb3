"""Sequence kernels on the CPU (numba.njit); same signatures and results as the reference twin.

Argument checks and output-length rules are shared with :mod:`asrkit.kernels.reference.sequence`.
Softmaxes run one (frame, sequence) row or one (sequence, feature) column at a time with the
max-shift for stability; padded frames are written as zeros and never read.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from asrkit.kernels.reference.lstm import check_lengths
from asrkit.kernels.reference.sequence import (
    check_axis,
    check_sequences,
    check_splice,
    stacked_lengths,
    subsampled_lengths,
)


def _f(x):
    x = np.asarray(x)
    if x.dtype not in (np.float32, np.float64):
        x = x.astype(np.float32)
    return np.ascontiguousarray(x)


@njit(cache=True, nogil=True)
def _log_softmax_features(x, lengths, y, log):
    T, B, D = x.shape
    for b in range(B):
        for t in range(lengths[b]):
            mx = -np.inf
            for d in range(D):
                mx = max(mx, x[t, b, d])
            s = 0.0
            for d in range(D):
                s += np.exp(x[t, b, d] - mx)
            lse = mx + np.log(s)
            for d in range(D):
                y[t, b, d] = x[t, b, d] - lse if log else np.exp(x[t, b, d] - lse)


@njit(cache=True, nogil=True)
def _log_softmax_time(x, lengths, y, log):
    T, B, D = x.shape
    for b in range(B):
        L = lengths[b]
        if L == 0:
            continue
        for d in range(D):
            mx = -np.inf
            for t in range(L):
                mx = max(mx, x[t, b, d])
            s = 0.0
            for t in range(L):
                s += np.exp(x[t, b, d] - mx)
            lse = mx + np.log(s)
            for t in range(L):
                y[t, b, d] = x[t, b, d] - lse if log else np.exp(x[t, b, d] - lse)


@njit(cache=True, nogil=True)
def _softmax_backward_features(dy, y, lengths, dx, log):
    T, B, D = y.shape
    for b in range(B):
        for t in range(lengths[b]):
            s = 0.0
            for d in range(D):
                s += dy[t, b, d] if log else dy[t, b, d] * y[t, b, d]
            for d in range(D):
                if log:
                    dx[t, b, d] = dy[t, b, d] - np.exp(y[t, b, d]) * s
                else:
                    dx[t, b, d] = y[t, b, d] * (dy[t, b, d] - s)


@njit(cache=True, nogil=True)
def _softmax_backward_time(dy, y, lengths, dx, log):
    T, B, D = y.shape
    for b in range(B):
        L = lengths[b]
        for d in range(D):
            s = 0.0
            for t in range(L):
                s += dy[t, b, d] if log else dy[t, b, d] * y[t, b, d]
            for t in range(L):
                if log:
                    dx[t, b, d] = dy[t, b, d] - np.exp(y[t, b, d]) * s
                else:
                    dx[t, b, d] = y[t, b, d] * (dy[t, b, d] - s)


def _softmax(x, lengths, axis, log):
    x = _f(x)
    lengths = check_lengths(lengths, x.shape[0], x.shape[1])
    y = np.zeros_like(x)
    kernel = _log_softmax_time if check_axis(axis) == 0 else _log_softmax_features
    kernel(x, lengths, y, log)
    return y


def _softmax_backward(dy, y, lengths, axis, log):
    y = _f(y)
    dy = np.ascontiguousarray(dy, dtype=y.dtype)
    lengths = check_lengths(lengths, y.shape[0], y.shape[1])
    dx = np.zeros_like(y)
    kernel = _softmax_backward_time if check_axis(axis) == 0 else _softmax_backward_features
    kernel(dy, y, lengths, dx, log)
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


@njit(cache=True, nogil=True)
def _masked_sum(x, lengths, scale_by_length, out):
    T, B, D = x.shape
    for b in range(B):
        L = lengths[b]
        for t in range(L):
            for d in range(D):
                out[b, d] += x[t, b, d]
        if scale_by_length and L > 0:
            for d in range(D):
                out[b, d] /= L


@njit(cache=True, nogil=True)
def _broadcast_time(dy, lengths, scale_by_length, dx):
    T, B, D = dx.shape
    for b in range(B):
        L = lengths[b]
        for t in range(L):
            for d in range(D):
                dx[t, b, d] = dy[b, d] / L if scale_by_length else dy[b, d]


def masked_sum(x, lengths=None):
    """Sum over valid frames: ``x [T, B, D] -> [B, D]``."""
    x = _f(x)
    out = np.zeros(x.shape[1:], x.dtype)
    _masked_sum(x, check_lengths(lengths, x.shape[0], x.shape[1]), False, out)
    return out


def masked_mean(x, lengths=None):
    """Mean over valid frames: ``x [T, B, D] -> [B, D]`` (0 for an empty sequence)."""
    x = _f(x)
    out = np.zeros(x.shape[1:], x.dtype)
    _masked_sum(x, check_lengths(lengths, x.shape[0], x.shape[1]), True, out)
    return out


def masked_sum_backward(dy, lengths, T):
    """Gradient of :func:`masked_sum`: ``dy [B, D] -> [T, B, D]`` on the valid frames."""
    dy = _f(dy)
    dx = np.zeros((T,) + dy.shape, dy.dtype)
    _broadcast_time(dy, check_lengths(lengths, T, dy.shape[0]), False, dx)
    return dx


def masked_mean_backward(dy, lengths, T):
    """Gradient of :func:`masked_mean`: ``dy / length`` on the valid frames."""
    dy = _f(dy)
    dx = np.zeros((T,) + dy.shape, dy.dtype)
    _broadcast_time(dy, check_lengths(lengths, T, dy.shape[0]), True, dx)
    return dx


@njit(cache=True, nogil=True)
def _reverse(x, lengths, y):
    T, B, D = x.shape
    for b in range(B):
        L = lengths[b]
        for t in range(L):
            y[t, b, :] = x[L - 1 - t, b, :]


def sequence_reverse(x, lengths=None):
    """Reverse each sequence of ``x [T, B, D]`` within its own length; 0 on padding."""
    x = _f(x)
    y = np.zeros_like(x)
    _reverse(x, check_lengths(lengths, x.shape[0], x.shape[1]), y)
    return y


def sequence_reverse_backward(dy, lengths=None):
    """Gradient of :func:`sequence_reverse` (the same reversal)."""
    return sequence_reverse(dy, lengths)


@njit(cache=True, nogil=True)
def _splice(x, lengths, left, right, y, backward):
    """Forward: y[t, b, k*D:(k+1)*D] = x[clamp(t+k-left), b]; backward: the transposed add."""
    K = left + right + 1
    T, B, D = x.shape
    for b in range(B):
        L = lengths[b]
        for t in range(L):
            for k in range(K):
                src = min(max(t + k - left, 0), L - 1)
                for d in range(D):
                    if backward:
                        x[src, b, d] += y[t, b, k * D + d]
                    else:
                        y[t, b, k * D + d] = x[src, b, d]


def splice_frames(x, lengths=None, left=0, right=0):
    """Kaldi ``splice-feats`` with edge replication: ``[T, B, D] -> [T, B, (left+1+right)*D]``."""
    check_splice(left, right)
    x = _f(x)
    T, B, D = x.shape
    y = np.zeros((T, B, (left + right + 1) * D), x.dtype)
    _splice(x, check_lengths(lengths, T, B), left, right, y, False)
    return y


def splice_frames_backward(dy, lengths=None, left=0, right=0):
    """Gradient of :func:`splice_frames`: ``dy [T, B, K*D] -> dx [T, B, D]``."""
    check_splice(left, right)
    dy = _f(dy)
    T, B, KD = dy.shape
    dx = np.zeros((T, B, KD // (left + right + 1)), dy.dtype)
    _splice(dx, check_lengths(lengths, T, B), left, right, dy, True)
    return dx


@njit(cache=True, nogil=True)
def _stack(x, lengths, new_lengths, stack, stride, y, backward):
    T, B, D = x.shape
    for b in range(B):
        L = lengths[b]
        for j in range(new_lengths[b]):
            for i in range(stack):
                src = min(j * stride + i, L - 1)
                for d in range(D):
                    if backward:
                        x[src, b, d] += y[j, b, i * D + d]
                    else:
                        y[j, b, i * D + d] = x[src, b, d]


def stack_frames(x, lengths=None, stack=2, stride=None, mode="ceil"):
    """Stack ``stack`` frames every ``stride`` frames (see the reference twin for the rules).

    Returns ``(y [T', B, stack*D], lengths int32[B])``.
    """
    stride = stack if stride is None else stride
    x = _f(x)
    T, B, D = x.shape
    lengths = check_lengths(lengths, T, B)
    T2, new = stacked_lengths(lengths, T, stack, stride, mode)
    y = np.zeros((T2, B, stack * D), x.dtype)
    _stack(x, lengths, new, stack, stride, y, False)
    return y, new


def stack_frames_backward(dy, lengths, T, stack=2, stride=None, mode="ceil"):
    """Gradient of :func:`stack_frames`: ``dy [T', B, stack*D] -> dx [T, B, D]``."""
    stride = stack if stride is None else stride
    dy = _f(dy)
    _, B, SD = dy.shape
    lengths = check_lengths(lengths, T, B)
    _, new = stacked_lengths(lengths, T, stack, stride, mode)
    dx = np.zeros((T, B, SD // stack), dy.dtype)
    _stack(dx, lengths, new, stack, stride, dy, True)
    return dx


@njit(cache=True, nogil=True)
def _subsample(x, new_lengths, factor, offset, y, backward):
    B = y.shape[1]
    for b in range(B):
        for j in range(new_lengths[b]):
            if backward:
                x[offset + j * factor, b, :] = y[j, b, :]
            else:
                y[j, b, :] = x[offset + j * factor, b, :]


def subsample_frames(x, lengths=None, factor=2, offset=0):
    """Keep frames ``offset, offset+factor, ...``; returns ``(y [T', B, D], lengths int32[B])``."""
    x = _f(x)
    T, B, D = x.shape
    lengths = check_lengths(lengths, T, B)
    T2, new = subsampled_lengths(lengths, T, factor, offset)
    y = np.zeros((T2, B, D), x.dtype)
    _subsample(x, new, factor, offset, y, False)
    return y, new


def subsample_frames_backward(dy, lengths, T, factor=2, offset=0):
    """Gradient of :func:`subsample_frames`: ``dy [T', B, D] -> dx [T, B, D]``."""
    dy = _f(dy)
    _, B, D = dy.shape
    lengths = check_lengths(lengths, T, B)
    _, new = subsampled_lengths(lengths, T, factor, offset)
    dx = np.zeros((T, B, D), dy.dtype)
    _subsample(dx, new, factor, offset, dy, True)
    return dx


def pad_sequences(seqs, pad_value=0.0, max_len=None):
    """List of ``[T_b, ...]`` arrays -> ``(x [T, B, ...], lengths int32[B])``."""
    lengths, feat = check_sequences(seqs)
    T = int(lengths.max()) if max_len is None else int(max_len)
    if lengths.max() > T:
        raise ValueError(f"pad_sequences: a sequence of {lengths.max()} frames > max_len={T}")
    x = np.full((T, len(seqs)) + feat, pad_value, np.result_type(*seqs))
    for b, s in enumerate(seqs):
        x[:len(s), b] = s
    return x, lengths


def unpad_sequences(x, lengths):
    """``x [T, B, ...]`` + ``lengths`` -> list of B arrays ``[lengths[b], ...]`` (copies)."""
    lengths = check_lengths(lengths, x.shape[0], x.shape[1])
    return [np.array(x[:L, b]) for b, L in enumerate(lengths)]
