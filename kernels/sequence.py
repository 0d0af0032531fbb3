"""Sequence kernels over padded batches ``x [T, B, ...]`` with ``lengths int[B]``.

Every op honours the lengths: padded frames (``t >= lengths[b]``) are never read, outputs are
zero there and so are the gradients, so padding never reaches a statistic or a loss.
``lengths=None`` means every sequence is T frames long. Each forward has a ``*_backward`` that
the graph engine calls with the output gradient.

Feature axes: ``masked_sum``, ``masked_mean``, ``sequence_reverse`` and the softmaxes over time
take any trailing shape (``[T, B]``, ``[T, B, D]``, ``[T, B, C, D]``); the softmaxes over
features and ``splice_frames`` take ``[T, B, D]``. The graph's sequence ops call these kernels
(and the further ones of the device modules: delays, single frames, maxima, scan steps).

Devices: ``"reference"`` (numpy twin), ``"cpu"`` (numba.njit where it beats numpy, else the
twin), ``"cuda"`` (numba.cuda; device arrays in and out, host arrays are copied over).
``device=None`` follows the arrays.
"""

from __future__ import annotations

from asrkit.kernels._device import kernel, resolve_device

__all__ = [
    "masked_softmax", "masked_softmax_backward", "masked_log_softmax",
    "masked_log_softmax_backward", "masked_sum", "masked_sum_backward", "masked_mean",
    "masked_mean_backward", "sequence_reverse", "sequence_reverse_backward", "splice_frames",
    "splice_frames_backward",
]


class _Backend:
    """The sequence kernels of one device (the numpy twin's where the cpu has no numba one)."""

    def __init__(self, device):
        self.device = device

    def __getattr__(self, name):
        return kernel("sequence", name, self.device)


def _backend(device, *arrays):
    return _Backend(resolve_device(device, *arrays))


def _flat(name, x, min_ndim=2):
    """View ``x [T, B, ...]`` as ``[T, B, F]``; returns the view and the trailing shape."""
    if len(x.shape) < min_ndim:
        raise ValueError(f"{name}: expected an array [T, B, ...], got shape {tuple(x.shape)}")
    T, B = tuple(x.shape)[:2]
    return x.reshape(T, B, -1), tuple(x.shape)[2:]


def _three(name, x):
    if len(x.shape) != 3:
        raise ValueError(f"{name}: expected an array [T, B, D], got shape {tuple(x.shape)}")
    return x


def _unflat(a, lead, trailing):
    return a.reshape(*lead, *trailing)


def _softmax_call(fname, x, lengths, axis, device):
    mod = _backend(device, x)
    if axis == 0:
        x3, trailing = _flat(fname, x)
        y = getattr(mod, fname)(x3, lengths, 0)
        return _unflat(y, tuple(x.shape)[:2], trailing)
    return getattr(mod, fname)(_three(fname, x), lengths, axis)


def masked_softmax(x, lengths=None, axis=-1, device=None):
    """Softmax over features (``axis=-1``, x ``[T, B, D]``) or over each sequence's valid frames
    (``axis=0``, x ``[T, B, ...]``). Returns an array like ``x``, zero on padded frames."""
    return _softmax_call("masked_softmax", x, lengths, axis, device)


def masked_log_softmax(x, lengths=None, axis=-1, device=None):
    """Log-softmax over features (``axis=-1``) or valid frames (``axis=0``); zero on padding."""
    return _softmax_call("masked_log_softmax", x, lengths, axis, device)


def _softmax_backward_call(fname, dy, y, lengths, axis, device):
    mod = _backend(device, y)
    if axis == 0:
        y3, trailing = _flat(fname, y)
        dx = getattr(mod, fname)(dy.reshape(y3.shape), y3, lengths, 0)
        return _unflat(dx, tuple(y.shape)[:2], trailing)
    return getattr(mod, fname)(dy, _three(fname, y), lengths, axis)


def masked_softmax_backward(dy, y, lengths=None, axis=-1, device=None):
    """Gradient of :func:`masked_softmax` from its output ``y``: ``y * (dy - sum(dy * y))``
    over the same axis; zero on padding. Returns an array like ``y``."""
    return _softmax_backward_call("masked_softmax_backward", dy, y, lengths, axis, device)


def masked_log_softmax_backward(dy, y, lengths=None, axis=-1, device=None):
    """Gradient of :func:`masked_log_softmax` from its output ``y``:
    ``dy - exp(y) * sum(dy)``; zero on padding."""
    return _softmax_backward_call("masked_log_softmax_backward", dy, y, lengths, axis, device)


def masked_sum(x, lengths=None, device=None):
    """Sum over each sequence's valid frames: ``x [T, B, ...] -> [B, ...]``."""
    x3, trailing = _flat("masked_sum", x)
    return _unflat(_backend(device, x).masked_sum(x3, lengths), tuple(x.shape)[1:2], trailing)


def masked_sum_backward(dy, lengths, T, device=None):
    """Gradient of :func:`masked_sum`: ``dy [B, ...]`` copied to the valid frames of
    ``[T, B, ...]``."""
    B, trailing = dy.shape[0], tuple(dy.shape)[1:]
    dx = _backend(device, dy).masked_sum_backward(dy.reshape(B, -1), lengths, T)
    return _unflat(dx, (T, B), trailing)


def masked_mean(x, lengths=None, device=None):
    """Mean over each sequence's valid frames: ``x [T, B, ...] -> [B, ...]``; 0 when empty."""
    x3, trailing = _flat("masked_mean", x)
    return _unflat(_backend(device, x).masked_mean(x3, lengths), tuple(x.shape)[1:2], trailing)


def masked_mean_backward(dy, lengths, T, device=None):
    """Gradient of :func:`masked_mean`: ``dy [B, ...] / lengths`` on the valid frames."""
    B, trailing = dy.shape[0], tuple(dy.shape)[1:]
    dx = _backend(device, dy).masked_mean_backward(dy.reshape(B, -1), lengths, T)
    return _unflat(dx, (T, B), trailing)


def sequence_reverse(x, lengths=None, device=None):
    """Reverse each sequence within its own length: ``y[t, b] = x[lengths[b]-1-t, b]``,
    zero on padding. ``x [T, B, ...]``; returns the same shape."""
    x3, trailing = _flat("sequence_reverse", x)
    return _unflat(_backend(device, x).sequence_reverse(x3, lengths), tuple(x.shape)[:2], trailing)


def sequence_reverse_backward(dy, lengths=None, device=None):
    """Gradient of :func:`sequence_reverse`: the same reversal applied to ``dy``."""
    return sequence_reverse(dy, lengths, device)


def splice_frames(x, lengths=None, left=0, right=0, device=None):
    """Splice context frames as Kaldi's ``splice-feats --left-context --right-context``.

    ``x [T, B, D] -> [T, B, (left+1+right)*D]``: output frame t is ``x[t-left] .. x[t+right]``
    concatenated in that order, with frames before the start or past ``lengths[b]-1`` replaced
    by the sequence's first or last frame (edge replication); zero on padding.
    """
    return _backend(device, x).splice_frames(_three("splice_frames", x), lengths, left, right)


def splice_frames_backward(dy, lengths=None, left=0, right=0, device=None):
    """Gradient of :func:`splice_frames`: ``dy [T, B, K*D] -> dx [T, B, D]`` (the scatter-add
    of every block to the frame it was read from)."""
    return _backend(device, dy).splice_frames_backward(_three("splice_frames_backward", dy),
                                                       lengths, left, right)
