"""Plain-numpy sequence kernels: the specification the CPU and CUDA versions are tested against.

A batch is ``x [T, B, D]`` with ``lengths int[B]``; frames ``t >= lengths[b]`` are padding.
Every op reads only valid frames and writes zeros to padded ones, and every backward gives zero
gradient to padded frames, so padding never reaches a statistic, a loss or a gradient.
The argument checks and the output-length rules live here and are shared by every device.
"""

from __future__ import annotations

import numpy as np

from asrkit.kernels.reference.lstm import check_lengths


def valid_mask(lengths: np.ndarray, T: int) -> np.ndarray:
    """bool [T, B]: True on valid frames."""
    return np.arange(T)[:, None] < np.asarray(lengths)[None, :]


def check_axis(axis) -> int:
    """Normalise a softmax axis: 0 (over time) or 2 (over features, also written -1)."""
    if axis in (-1, 2):
        return 2
    if axis == 0:
        return 0
    raise ValueError(f"masked softmax: axis must be -1 (features) or 0 (time), got {axis}")


def check_splice(left: int, right: int):
    """Validate a splice context."""
    if left < 0 or right < 0:
        raise ValueError(f"splice_frames: contexts must be >= 0, got left={left} right={right}")


def _lengths(x, lengths):
    return check_lengths(lengths, x.shape[0], x.shape[1])


def masked_softmax(x, lengths=None, axis=-1):
    """Softmax of ``x [T, B, D]`` over features (axis -1) or valid frames (axis 0); 0 on padding."""
    return np.exp(masked_log_softmax(x, lengths, axis)) * valid_mask(
        _lengths(x, lengths), x.shape[0])[:, :, None]


def masked_log_softmax(x, lengths=None, axis=-1):
    """Log-softmax of ``x [T, B, D]`` over features or valid frames; 0 on padding."""
    x = np.asarray(x)
    mask = valid_mask(_lengths(x, lengths), x.shape[0])[:, :, None]
    ax = check_axis(axis)
    xm = np.where(mask, x, -np.inf)
    mx = np.max(xm, axis=ax, keepdims=True)
    mx = np.where(np.isfinite(mx), mx, 0)
    with np.errstate(divide="ignore"):  # all-padding rows: log(0), masked out below
        lse = np.log(np.sum(np.exp(xm - mx), axis=ax, keepdims=True)) + mx
    return np.where(mask, x - lse, 0).astype(x.dtype)


def masked_softmax_backward(dy, y, lengths=None, axis=-1):
    """Gradient of :func:`masked_softmax` given its output ``y``: ``y * (dy - sum(dy * y))``."""
    ax = check_axis(axis)
    mask = valid_mask(_lengths(y, lengths), y.shape[0])[:, :, None]
    dy = np.where(mask, dy, 0)
    return (y * (dy - np.sum(dy * y, axis=ax, keepdims=True))).astype(y.dtype)


def masked_log_softmax_backward(dy, y, lengths=None, axis=-1):
    """Gradient of :func:`masked_log_softmax` given its output: ``dy - exp(y) * sum(dy)``."""
    ax = check_axis(axis)
    mask = valid_mask(_lengths(y, lengths), y.shape[0])[:, :, None]
    dy = np.where(mask, dy, 0)
    return np.where(mask, dy - np.exp(y) * np.sum(dy, axis=ax, keepdims=True), 0).astype(y.dtype)


def masked_sum(x, lengths=None):
    """Sum over valid frames: ``x [T, B, D] -> [B, D]``."""
    mask = valid_mask(_lengths(x, lengths), x.shape[0])[:, :, None]
    return np.sum(np.where(mask, x, 0), axis=0).astype(x.dtype)


def masked_sum_backward(dy, lengths, T):
    """Gradient of :func:`masked_sum`: ``dy [B, D]`` copied to the valid frames of ``[T, B, D]``."""
    mask = valid_mask(check_lengths(lengths, T, dy.shape[0]), T)[:, :, None]
    return np.where(mask, dy[None], 0).astype(dy.dtype)


def masked_mean(x, lengths=None):
    """Mean over valid frames: ``x [T, B, D] -> [B, D]`` (0 for an empty sequence)."""
    lengths = _lengths(x, lengths)
    return (masked_sum(x, lengths) / np.maximum(lengths, 1)[:, None]).astype(x.dtype)


def masked_mean_backward(dy, lengths, T):
    """Gradient of :func:`masked_mean`: ``dy / length`` on the valid frames."""
    lengths = check_lengths(lengths, T, dy.shape[0])
    return masked_sum_backward(dy / np.maximum(lengths, 1)[:, None], lengths, T).astype(dy.dtype)


def sequence_reverse(x, lengths=None):
    """Reverse each sequence within its own length: ``y[t, b] = x[lengths[b]-1-t, b]``."""
    lengths = _lengths(x, lengths)
    y = np.zeros_like(x)
    for b, L in enumerate(lengths):
        y[:L, b] = x[:L, b][::-1]
    return y


def sequence_reverse_backward(dy, lengths=None):
    """Gradient of :func:`sequence_reverse` (the same reversal)."""
    return sequence_reverse(dy, lengths)


def _splice_index(T, L, left, right):
    """int [T, left+right+1]: the frame each spliced block reads (edges replicated)."""
    return np.clip(np.arange(T)[:, None] + np.arange(-left, right + 1)[None, :], 0, max(L - 1, 0))


def splice_frames(x, lengths=None, left=0, right=0):
    """Kaldi ``splice-feats``: ``[T, B, D] -> [T, B, (left+1+right)*D]``.

    Output frame t is ``x[t-left], ..., x[t+right]`` concatenated, frames outside
    ``[0, lengths[b])`` replaced by the sequence's first or last frame.
    """
    check_splice(left, right)
    lengths = _lengths(x, lengths)
    T, B, D = x.shape
    K = left + right + 1
    y = np.zeros((T, B, K * D), x.dtype)
    for b, L in enumerate(lengths):
        idx = _splice_index(L, L, left, right)
        y[:L, b] = x[idx, b].reshape(L, K * D)
    return y


def splice_frames_backward(dy, lengths=None, left=0, right=0):
    """Gradient of :func:`splice_frames`: ``dy [T, B, K*D] -> dx [T, B, D]`` (scatter-add)."""
    check_splice(left, right)
    T, B, KD = dy.shape
    K = left + right + 1
    D = KD // K
    lengths = check_lengths(lengths, T, B)
    dx = np.zeros((T, B, D), dy.dtype)
    for b, L in enumerate(lengths):
        idx = _splice_index(L, L, left, right)
        np.add.at(dx[:, b], idx.ravel(), dy[:L, b].reshape(L * K, D))
    return dx


def fill_padding(x, lengths, value=0.0):
    """``x [T, B, ...]`` with ``value`` on the padding frames (a new array)."""
    m = valid_mask(lengths, x.shape[0]).reshape(x.shape[:2] + (1,) * (x.ndim - 2))
    return np.where(m, x, value).astype(x.dtype)


def delay(x, init, lengths, k, future):
    """``past_value``: ``y[t] = x[t - k]`` (``init`` for ``t < k``); ``future_value``:
    ``y[t] = x[t + k]`` while ``t + k < lengths[b]``, else ``init``. ``x [T, B, ...]``, ``init``
    broadcasts to a frame ``[B, ...]``."""
    T = x.shape[0]
    frame = np.broadcast_to(init, x.shape[1:]).astype(x.dtype, copy=False)
    y = np.empty_like(x)
    if not future:
        k = min(k, T)
        y[:k] = frame
        y[k:] = x[:T - k]
        return y
    y[:] = frame
    if k < T:
        src = _future_valid(lengths, T, k, x.ndim)[:T - k]
        y[:T - k] = np.where(src, x[k:], frame)
    return y


def _future_valid(lengths, T, k, ndim):
    v = (np.arange(T)[:, None] + k) < np.asarray(lengths)[None, :]
    return v.reshape(v.shape + (1,) * (ndim - 2))


def delay_backward(g, lengths, k, future):
    """Gradients ``(gx [T, B, ...], ginit [B, ...])`` of :func:`delay` (ginit at a frame's full
    shape; the engine sums it to init's)."""
    T = g.shape[0]
    gx = np.zeros_like(g)
    if not future:
        k = min(k, T)
        gx[:T - k] = g[k:]
        return gx, g[:k].sum(axis=0)
    src = _future_valid(lengths, T, k, g.ndim)
    if k < T:
        gx[k:] = np.where(src, g, 0)[:T - k]
    return gx, np.where(src, 0, g).sum(axis=0)


def take_frame(x, index):
    """``y[b] = x[index[b], b]`` (0 where ``index[b] < 0``): ``x [T, B, ...] -> [B, ...]``."""
    index = np.asarray(index)
    y = x[np.maximum(index, 0), np.arange(x.shape[1])] if len(x) else np.zeros(x.shape[1:],
                                                                                x.dtype)
    y[index < 0] = 0
    return y


def put_frame(g, index, T):
    """Adjoint of :func:`take_frame`: ``g [B, ...] -> [T, B, ...]``."""
    index = np.asarray(index)
    gx = np.zeros((T,) + g.shape, g.dtype)
    keep = index >= 0
    gx[index[keep], np.arange(g.shape[0])[keep]] = g[keep]
    return gx


def masked_max(x, lengths):
    """Max over each sequence's valid frames: ``x [T, B, ...] -> [B, ...]`` (0 when empty)."""
    m = valid_mask(lengths, x.shape[0]).reshape(x.shape[:2] + (1,) * (x.ndim - 2))
    y = np.where(m, x, -np.inf).max(axis=0, initial=-np.inf)
    return np.where(np.isfinite(y), y, 0).astype(x.dtype)


def masked_max_backward(g, x, y, lengths):
    """Gradient of :func:`masked_max`: ``g`` split evenly among each sequence's maxima."""
    m = valid_mask(lengths, x.shape[0]).reshape(x.shape[:2] + (1,) * (x.ndim - 2))
    hit = (x == y[None]) & m
    return (g[None] * hit / np.maximum(hit.sum(axis=0, keepdims=True), 1)).astype(g.dtype)


def select_frame(h_new, h_prev, lengths, t):
    """One step of a scan over ``[B, ...]`` states: ``(h, y)`` with ``h = h_new`` and ``y =
    h_new`` where frame ``t`` is valid (``t < lengths[b]``), else the old state and 0."""
    a = (t < np.asarray(lengths)).reshape((-1,) + (1,) * (h_new.ndim - 1))
    return np.where(a, h_new, h_prev), np.where(a, h_new, 0).astype(h_new.dtype)


def seed_grad(g, gh, lengths, t):
    """The root gradient of a scan's step ``t``: ``g + gh`` on valid rows, 0 after the end."""
    a = (t < np.asarray(lengths)).reshape((-1,) + (1,) * (g.ndim - 1))
    return np.where(a, g + gh, 0).astype(g.dtype)


def carry_grad(gh_new, gh, lengths, t):
    """The state gradient carried to step ``t - 1``: ``gh_new`` on valid rows; an ended
    sequence passes ``gh`` through."""
    a = (t < np.asarray(lengths)).reshape((-1,) + (1,) * (gh.ndim - 1))
    return np.where(a, gh_new, gh)
