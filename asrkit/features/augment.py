"""SpecAugment (Park et al., 2019): time warping, frequency masks and time masks.

Works on one utterance ``[T, D]`` (frames x feature bins) or on a padded batch ``[T, B, D]``
with ``lengths`` int ``[B]``: each sequence is augmented over its own ``lengths[b]`` frames only,
so padding is never masked in, never counted in a mask's bounds or mean, and never warped into
real frames; padded frames come back unchanged.

The defaults are the paper's LibriSpeech "LD" policy: W=80, F=27 with 2 frequency masks, T=100
with 2 time masks, p=1.0. Randomness comes from a numpy ``Generator`` (``rng=``) or a ``seed=``,
so the same seed gives the same output. Conventions, as ESPnet and lhotse implement the paper:

- time warp: a centre ``c`` is drawn from ``[W, L-W)`` and moved to ``w`` in ``[c-W+1, c+W]``;
  frames ``[0, c)`` are resized to ``w`` frames and ``[c, L)`` to ``L - w`` frames by
  interpolation along time (``bicubic`` as ``torch.nn.functional.interpolate(...,
  align_corners=False)``, or ``linear``); an utterance with ``L <= 2W`` is left as it is;
- a frequency mask has width ``f ~ U{0..F}`` and start ``f0 ~ U{0..D-f}``;
- a time mask has width ``t ~ U{0..min(T, floor(p*L))}`` and start ``t0 ~ U{0..L-t}``;
- ``mask_value`` is a number or ``"mean"`` (the mean of the utterance's real frames before any
  masking, as lhotse does).
"""

from __future__ import annotations

import numpy as np

CUBIC_A = -0.75  # PyTorch's bicubic kernel coefficient (Keys' cubic convolution)


def make_rng(seed=None, rng=None) -> np.random.Generator:
    """Return ``rng`` if given, else ``numpy.random.default_rng(seed)``; both at once is an error.

    ``seed`` may itself be a Generator (returned as is), an int or None (fresh entropy).
    """
    if rng is not None:
        if seed is not None:
            raise ValueError("give either seed= or rng=, not both")
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
        return rng
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(seed)


def _cubic_weights(t: np.ndarray) -> np.ndarray:
    """PyTorch's ``get_cubic_upsample_coefficients``: ``[N] -> [N, 4]`` for taps -1, 0, 1, 2."""
    a = CUBIC_A

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return np.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], axis=1)


def resize_time(x: np.ndarray, new_len: int, mode: str = "bicubic") -> np.ndarray:
    """Resample ``x`` ``[L, ...]`` to ``[new_len, ...]`` along axis 0 (float32).

    Same numbers as ``torch.nn.functional.interpolate`` with ``align_corners=False`` over a
    ``[1, 1, L, D]`` image resized to ``(new_len, D)``: ``mode`` is ``"bicubic"`` (A=-0.75,
    edge-clamped taps) or ``"linear"`` (bilinear with the other axis unchanged).
    """
    x = np.asarray(x, np.float32)
    n = x.shape[0]
    if n == 0 or new_len <= 0:
        raise ValueError(f"cannot resize {n} frames to {new_len}")
    if new_len == n:
        return x.copy()
    scale = np.float32(n) / np.float32(new_len)
    src = scale * (np.arange(new_len, dtype=np.float32) + np.float32(0.5)) - np.float32(0.5)
    bshape = (new_len,) + (1,) * (x.ndim - 1)
    if mode == "linear":
        src = np.maximum(src, 0)
        i0 = src.astype(np.int64)  # floor, src >= 0
        i1 = np.minimum(i0 + 1, n - 1)
        w1 = (src - i0).astype(np.float32).reshape(bshape)
        return (1 - w1) * x[i0] + w1 * x[i1]
    if mode == "bicubic":
        i0 = np.floor(src).astype(np.int64)
        w = _cubic_weights((src - i0).astype(np.float32)).astype(np.float32)
        out = np.zeros((new_len,) + x.shape[1:], np.float32)
        for k in range(4):
            out += w[:, k].reshape(bshape) * x[np.clip(i0 - 1 + k, 0, n - 1)]
        return out
    raise ValueError(f"unknown interpolation mode {mode!r}; expected 'bicubic' or 'linear'")


def _sequences(feats, lengths):
    """Return (float32 copy, list of per-sequence [L, D] views into it)."""
    x = np.array(feats, dtype=np.float32, copy=True)
    if lengths is None:
        if x.ndim != 2:
            raise ValueError(f"feats: expected [T, D] (or [T, B, D] with lengths), "
                             f"got shape {x.shape}")
        return x, [x]
    if x.ndim != 3:
        raise ValueError(f"feats: with lengths expected a padded batch [T, B, D], "
                         f"got shape {x.shape}")
    lengths = np.asarray(lengths)
    t_max, b, _ = x.shape
    if lengths.shape != (b,) or np.any(lengths < 0) or np.any(lengths > t_max):
        raise ValueError(f"lengths: expected {b} values in [0, {t_max}], got {lengths.tolist()}")
    return x, [x[:int(n), i] for i, n in enumerate(lengths)]


def _fill(mask_value, seq: np.ndarray, mean: float | None) -> float:
    if isinstance(mask_value, str):
        if mask_value != "mean":
            raise ValueError(f"mask_value must be a number or 'mean', got {mask_value!r}")
        return mean
    return float(mask_value)


def _freq_mask_one(seq, num_masks, max_width, value, rng):
    d = seq.shape[1]
    for _ in range(num_masks):
        width = int(rng.integers(0, min(max_width, d) + 1))
        start = int(rng.integers(0, d - width + 1))
        seq[:, start:start + width] = value


def _time_mask_one(seq, num_masks, max_width, max_fraction, value, rng):
    length = seq.shape[0]
    limit = min(max_width, int(np.floor(max_fraction * length)), length)
    for _ in range(num_masks):
        width = int(rng.integers(0, limit + 1))
        start = int(rng.integers(0, length - width + 1))
        seq[start:start + width] = value


def _time_warp_one(seq, max_warp, mode, rng):
    length = seq.shape[0]
    if max_warp <= 0 or length - max_warp <= max_warp:
        return
    centre = int(rng.integers(max_warp, length - max_warp))
    warped = int(rng.integers(centre - max_warp, centre + max_warp)) + 1
    left = resize_time(seq[:centre], warped, mode)
    right = resize_time(seq[centre:], length - warped, mode)
    seq[:warped] = left
    seq[warped:] = right


def _check_counts(**kw):
    for name, v in kw.items():
        if v < 0:
            raise ValueError(f"{name} must be >= 0, got {v}")


def freq_mask(feats, num_masks: int = 2, max_width: int = 27, mask_value=0.0, *, lengths=None,
              seed=None, rng=None) -> np.ndarray:
    """Frequency masking: set ``num_masks`` bands of ``U{0..max_width}`` bins to ``mask_value``.

    Takes ``[T, D]`` (or ``[T, B, D]`` with ``lengths`` int ``[B]``, independent masks per
    sequence on its real frames); returns a float32 copy of the same shape.
    """
    _check_counts(num_masks=num_masks, max_width=max_width)
    gen = make_rng(seed, rng)
    x, seqs = _sequences(feats, lengths)
    for seq in seqs:
        if seq.shape[0]:
            mean = float(seq.mean()) if mask_value == "mean" else None
            _freq_mask_one(seq, num_masks, max_width, _fill(mask_value, seq, mean), gen)
    return x


def time_mask(feats, num_masks: int = 2, max_width: int = 100, max_fraction: float = 1.0,
              mask_value=0.0, *, lengths=None, seed=None, rng=None) -> np.ndarray:
    """Time masking: set ``num_masks`` runs of ``U{0..min(max_width, floor(max_fraction*L))}``
    frames to ``mask_value`` (``max_fraction`` is the paper's p).

    Takes ``[T, D]`` (or ``[T, B, D]`` with ``lengths`` int ``[B]``: masks stay inside each
    sequence's ``L = lengths[b]`` frames); returns a float32 copy of the same shape.
    """
    _check_counts(num_masks=num_masks, max_width=max_width, max_fraction=max_fraction)
    gen = make_rng(seed, rng)
    x, seqs = _sequences(feats, lengths)
    for seq in seqs:
        if seq.shape[0]:
            mean = float(seq.mean()) if mask_value == "mean" else None
            _time_mask_one(seq, num_masks, max_width, max_fraction,
                           _fill(mask_value, seq, mean), gen)
    return x


def time_warp(feats, max_warp: int = 80, mode: str = "bicubic", *, lengths=None, seed=None,
              rng=None) -> np.ndarray:
    """Time warping (the paper's W = ``max_warp``): move a random centre frame by up to
    ``max_warp`` frames, stretching the left part and squeezing the right or vice versa.

    Takes ``[T, D]`` (or ``[T, B, D]`` with ``lengths`` int ``[B]``, each sequence warped within
    its own frames); returns a float32 copy of the same shape (the length is kept).
    """
    _check_counts(max_warp=max_warp)
    gen = make_rng(seed, rng)
    x, seqs = _sequences(feats, lengths)
    for seq in seqs:
        _time_warp_one(seq, max_warp, mode, gen)
    return x


def spec_augment(feats, *, num_freq_masks: int = 2, freq_mask_width: int = 27,
                 num_time_masks: int = 2, time_mask_width: int = 100,
                 time_mask_fraction: float = 1.0, time_warp: int = 80, warp_mode: str = "bicubic",
                 mask_value=0.0, lengths=None, seed=None, rng=None) -> np.ndarray:
    """SpecAugment: time warp, then frequency masks, then time masks (the paper's order).

    Takes ``[T, D]`` features (or ``[T, B, D]`` with ``lengths`` int ``[B]``) and returns a
    float32 copy. Options are the paper's: ``time_warp`` = W, ``freq_mask_width`` = F,
    ``num_freq_masks`` = mF, ``time_mask_width`` = T, ``time_mask_fraction`` = p,
    ``num_time_masks`` = mT (0 disables a part). ``mask_value`` is a number or ``"mean"`` (each
    utterance's mean before masking). Same ``seed`` (or same-state ``rng``) -> same output.
    """
    _check_counts(num_freq_masks=num_freq_masks, freq_mask_width=freq_mask_width,
                  num_time_masks=num_time_masks, time_mask_width=time_mask_width,
                  time_mask_fraction=time_mask_fraction, time_warp=time_warp)
    gen = make_rng(seed, rng)
    x, seqs = _sequences(feats, lengths)
    for seq in seqs:
        if seq.shape[0] == 0:
            continue
        mean = float(seq.mean()) if mask_value == "mean" else None
        value = _fill(mask_value, seq, mean)
        _time_warp_one(seq, time_warp, warp_mode, gen)
        _freq_mask_one(seq, num_freq_masks, freq_mask_width, value, gen)
        _time_mask_one(seq, num_time_masks, time_mask_width, time_mask_fraction, value, gen)
    return x
