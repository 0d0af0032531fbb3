"""CTC loss with its gradient, and CTC forced alignment: the public entry points.

``ctc_loss`` and ``ctc_align`` check their arguments once, then run the kernel of the chosen
device: ``reference`` (numpy, ``kernels/reference/ctc.py``), ``cpu`` (numba.njit,
``kernels/cpu/ctc.py``) or ``cuda`` (numba.cuda, ``kernels/cuda/ctc.py``). ``device=None``
follows the arrays: CUDA device arrays run on ``cuda`` and get device arrays back; anything else
runs on ``cpu``. With ``device="cuda"`` and host arrays, the result comes back as host arrays.

Conventions (those of ``torch.nn.functional.ctc_loss`` with ``reduction="none"``,
``zero_infinity=False``, applied to ``log_softmax(logits)``):

- a sequence whose target cannot fit its frames (each label needs a frame and each pair of equal
  neighbouring labels a blank between them) costs ``inf`` and gets a zero gradient (torch gives
  NaN gradients there);
- a sequence with no frames and an empty target costs 0;
- targets are read only up to ``target_lengths[b]``; labels must lie in ``[0, C)`` and differ
  from ``blank``, which may be any class.
"""

from __future__ import annotations

import numpy as np

from asrkit.kernels._device import is_cuda_array, resolve_device


def _is_device_array(a) -> bool:
    """CUDA arrays, and numba's simulated device arrays (they lack the CUDA array interface)."""
    return is_cuda_array(a) or hasattr(a, "__cuda_ndarray__")


def _host(a) -> np.ndarray:
    """A numpy view or copy of a host or CUDA array (only used for the small int arrays)."""
    if hasattr(a, "copy_to_host"):
        return a.copy_to_host()
    if is_cuda_array(a):
        from numba import cuda

        return cuda.as_cuda_array(a).copy_to_host()
    return np.asarray(a)


def _validate(logits, targets, input_lengths, target_lengths, blank, what):
    """Check shapes, dtypes and contents; returns host copies of targets and the lengths."""
    shape = tuple(logits.shape)
    if len(shape) != 3:
        raise ValueError(f"{what}: logits must be [T, B, C], got shape {shape}")
    T, B, C = shape
    dtype = np.dtype(logits.dtype)
    if dtype not in (np.float32, np.float64):
        raise TypeError(f"{what}: logits must be float32 or float64, got {dtype}")
    if not 0 <= int(blank) < C:
        raise ValueError(f"{what}: blank={blank} is not a class index in [0, {C})")
    tg, il, tl = _host(targets), _host(input_lengths), _host(target_lengths)
    if tg.ndim != 2 or tg.shape[0] != B:
        raise ValueError(f"{what}: targets must be padded [B={B}, S], got shape {tg.shape}")
    for name, a in (("targets", tg), ("input_lengths", il), ("target_lengths", tl)):
        if a.dtype.kind not in "iu":
            raise TypeError(f"{what}: {name} must be integers, got {a.dtype}")
    for name, a, limit in (("input_lengths", il, T), ("target_lengths", tl, tg.shape[1])):
        if a.shape != (B,):
            raise ValueError(f"{what}: {name} must have shape ({B},), got {a.shape}")
        bad = np.flatnonzero((a < 0) | (a > limit))
        if len(bad):
            b = int(bad[0])
            raise ValueError(f"{what}: sequence {b}: {name}[{b}]={int(a[b])} is outside "
                             f"[0, {limit}]")
    valid = np.arange(tg.shape[1])[None, :] < tl[:, None]
    bad = np.argwhere(valid & ((tg < 0) | (tg >= C) | (tg == blank)))
    if len(bad):
        b, i = (int(v) for v in bad[0])
        raise ValueError(f"{what}: sequence {b}: targets[{b}, {i}]={int(tg[b, i])} is not a "
                         f"label (classes are [0, {C}) and {blank} is the blank)")
    return (np.ascontiguousarray(tg, dtype=np.int32), np.ascontiguousarray(il, dtype=np.int32),
            np.ascontiguousarray(tl, dtype=np.int32))


def _impl(device: str):
    if device == "reference":
        from asrkit.kernels.reference import ctc
    elif device == "cpu":
        from asrkit.kernels.cpu import ctc
    else:
        from asrkit.kernels.cuda import ctc
    return ctc


def ctc_loss(logits, targets, input_lengths, target_lengths, blank: int = 0, device=None):
    """CTC negative log-likelihood per sequence and its gradient with respect to the logits.

    Takes logits float32 [T, B, C] (unnormalised: log-softmax over C is fused into the kernel;
    float64 also works), targets int32 [B, S] padded, input_lengths and target_lengths int32 [B],
    the blank class index and the device. Returns (costs [B], grad [T, B, C]) in the dtype of
    ``logits``: ``costs[b] = -log p(targets[b] | logits[:, b])`` and ``grad = d sum(costs) /
    d logits``, zero on padded frames. Impossible sequences cost inf with a zero gradient.
    """
    dev = resolve_device("cuda" if device is None and _is_device_array(logits) else device,
                         logits)
    tg, il, tl = _validate(logits, targets, input_lengths, target_lengths, blank, "ctc_loss")
    return _impl(dev).ctc_loss(logits, tg, il, tl, int(blank))


def ctc_align(logits_or_logprobs, targets, input_lengths, target_lengths, blank: int = 0,
              device=None, return_scores: bool = False):
    """Viterbi forced alignment of each target to its frames over the CTC lattice.

    Takes logits or log-probabilities float [T, B, C] (either: the log-softmax normaliser is the
    same for every path through a frame, so the best path does not depend on it), targets int32
    [B, S] padded, input_lengths and target_lengths int32 [B]. Returns int32 [T, B]: the class of
    each frame on the best path (a label or the blank), -1 on padded frames and on every frame of
    a sequence whose target cannot fit. With ``return_scores=True`` returns (path, scores), where
    scores float64 [B] is the sum of the input over the best path: its log-probability when
    log-probabilities are given; -inf for impossible sequences. Ties prefer staying in a lattice
    state, then moving by one state, and end on the final blank.
    Use ``ctc_segments`` to turn the path into per-token frame ranges.
    """
    dev = resolve_device("cuda" if device is None and _is_device_array(logits_or_logprobs)
                         else device, logits_or_logprobs)
    tg, il, tl = _validate(logits_or_logprobs, targets, input_lengths, target_lengths, blank,
                           "ctc_align")
    return _impl(dev).ctc_align(logits_or_logprobs, tg, il, tl, int(blank),
                                return_scores=return_scores)


def ctc_segments(path, blank: int = 0) -> list[np.ndarray] | np.ndarray:
    """Per-token frame ranges of a CTC frame path, for CTM timings.

    Takes path int [T, B] (from ``ctc_align``; -1 on padding) or int [T] for one sequence.
    Returns a list with, per sequence, int32 [N, 3] (one such array for a [T] path): rows
    ``(token, start_frame, end_frame)`` with
    ``end_frame`` exclusive: a token starts on a non-blank frame whose class differs from the
    previous frame's, and runs while the class repeats (equal neighbouring tokens are always
    separated by a blank on a CTC path). Times in seconds are ``frame * frame_shift`` (times the
    subsampling factor of the model).
    """
    path = _host(path)
    single = path.ndim == 1
    if single:
        path = path[:, None]
    if path.ndim != 2:
        raise ValueError(f"ctc_segments: path must be [T, B] or [T], got shape {path.shape}")
    out = []
    for b in range(path.shape[1]):
        p = path[:, b].astype(np.int64)
        prev = np.concatenate(([-1], p[:-1]))
        starts = np.flatnonzero((p != blank) & (p >= 0) & (p != prev))
        ends = np.empty_like(starts)
        for i, s in enumerate(starts):
            e = s + 1
            while e < len(p) and p[e] == p[s]:
                e += 1
            ends[i] = e
        out.append(np.stack([p[starts], starts, ends], axis=1).astype(np.int32).reshape(-1, 3))
    return out[0] if single else out
