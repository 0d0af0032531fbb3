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


def stacked_lengths(lengths: np.ndarray, T: int, stack: int, stride: int, mode: str):
    """Output frame count and lengths of :func:`stack_frames` (see there): ``(T', int32[B])``."""
    if stack < 1 or stride < 1:
        raise ValueError(f"stack_frames: stack and stride must be >= 1, got {stack}, {stride}")
    if mode == "ceil":
        return -(-T // stride), (-(-np.asarray(lengths) // stride)).astype(np.int32)
    if mode == "floor":
        full = lambda n: np.maximum(0, (np.asarray(n) - stack) // stride + 1)  # noqa: E731
        return int(full(T)), full(lengths).astype(np.int32)
    raise ValueError(f"stack_frames: mode must be 'ceil' or 'floor', got {mode!r}")


def subsampled_lengths(lengths: np.ndarray, T: int, factor: int, offset: int):
    """Output frame count and lengths of :func:`subsample_frames`: ``(T', int32[B])``."""
    if factor < 1 or not 0 <= offset < factor:
        raise ValueError(f"subsample_frames: need factor >= 1 and 0 <= offset < factor, "
                         f"got factor={factor} offset={offset}")
    count = lambda n: np.maximum(0, -(-(np.asarray(n) - offset) // factor))  # noqa: E731
    return int(count(T)), count(lengths).astype(np.int32)


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


def _stack_index(n_out, L, stack, stride):
    return np.minimum(np.arange(n_out)[:, None] * stride + np.arange(stack)[None, :], L - 1)


def stack_frames(x, lengths=None, stack=2, stride=None, mode="ceil"):
    """Stack ``stack`` consecutive frames, keeping every ``stride``-th (default: ``stack``).

    ``[T, B, D] -> [T', B, stack*D]`` with output frame j = ``x[j*stride], ...,
    x[j*stride+stack-1]`` concatenated. ``mode="ceil"``: ``ceil(len/stride)`` output frames, and
    a window running past the end repeats the last frame; ``mode="floor"``: only windows wholly
    inside the sequence, ``max(0, (len-stack)//stride + 1)`` frames. Returns ``(y, int32[B])``.
    """
    stride = stack if stride is None else stride
    lengths = _lengths(x, lengths)
    T, B, D = x.shape
    T2, new = stacked_lengths(lengths, T, stack, stride, mode)
    y = np.zeros((T2, B, stack * D), x.dtype)
    for b, n in enumerate(new):
        if n:
            y[:n, b] = x[_stack_index(n, lengths[b], stack, stride), b].reshape(n, stack * D)
    return y, new


def stack_frames_backward(dy, lengths, T, stack=2, stride=None, mode="ceil"):
    """Gradient of :func:`stack_frames`: ``dy [T', B, stack*D] -> dx [T, B, D]``.

    ``lengths`` and ``T`` are those of the forward's input.
    """
    stride = stack if stride is None else stride
    _, B, SD = dy.shape
    D = SD // stack
    lengths = check_lengths(lengths, T, B)
    _, new = stacked_lengths(lengths, T, stack, stride, mode)
    dx = np.zeros((T, B, D), dy.dtype)
    for b, n in enumerate(new):
        if n:
            idx = _stack_index(n, lengths[b], stack, stride)
            np.add.at(dx[:, b], idx.ravel(), dy[:n, b].reshape(n * stack, D))
    return dx


def subsample_frames(x, lengths=None, factor=2, offset=0):
    """Keep frames ``offset, offset+factor, ...``: ``[T, B, D] -> [T', B, D]``.

    New lengths are ``ceil((len - offset) / factor)`` (the kept frames that exist). Returns
    ``(y, int32[B])``.
    """
    lengths = _lengths(x, lengths)
    T2, new = subsampled_lengths(lengths, x.shape[0], factor, offset)
    y = np.zeros((T2,) + x.shape[1:], x.dtype)
    for b, n in enumerate(new):
        y[:n, b] = x[offset:offset + n * factor:factor, b]
    return y, new


def subsample_frames_backward(dy, lengths, T, factor=2, offset=0):
    """Gradient of :func:`subsample_frames`: ``dy [T', B, D] -> dx [T, B, D]``."""
    B = dy.shape[1]
    lengths = check_lengths(lengths, T, B)
    _, new = subsampled_lengths(lengths, T, factor, offset)
    dx = np.zeros((T,) + dy.shape[1:], dy.dtype)
    for b, n in enumerate(new):
        dx[offset:offset + n * factor:factor, b] = dy[:n, b]
    return dx


def check_sequences(seqs):
    """Validate a list of ``[T_b, ...]`` arrays; return ``(lengths int32[B], feature shape)``."""
    if len(seqs) == 0:
        raise ValueError("pad_sequences: empty list of sequences")
    feat = tuple(seqs[0].shape[1:])
    for b, s in enumerate(seqs):
        if len(s.shape) < 1 or tuple(s.shape[1:]) != feat:
            raise ValueError(f"pad_sequences: sequence {b} has shape {tuple(s.shape)}, "
                             f"expected [T, {', '.join(map(str, feat))}]")
    return np.array([s.shape[0] for s in seqs], np.int32), feat


def pad_sequences(seqs, pad_value=0.0, max_len=None):
    """List of ``[T_b, ...]`` arrays -> ``(x [T, B, ...], lengths int32[B])``.

    ``T`` is the longest length (or ``max_len``); padding is ``pad_value``. The gradient of
    padding is :func:`unpad_sequences` and the other way round.
    """
    lengths, feat = check_sequences(seqs)
    T = int(lengths.max()) if max_len is None else int(max_len)
    if lengths.max() > T:
        raise ValueError(f"pad_sequences: a sequence of {lengths.max()} frames > max_len={T}")
    dt = np.result_type(*seqs)
    x = np.full((T, len(seqs)) + feat, pad_value, dt)
    for b, s in enumerate(seqs):
        x[:len(s), b] = s
    return x, lengths


def unpad_sequences(x, lengths):
    """``x [T, B, ...]`` + ``lengths`` -> list of B arrays ``[lengths[b], ...]`` (copies)."""
    lengths = _lengths(x, lengths)
    return [np.array(x[:L, b]) for b, L in enumerate(lengths)]
