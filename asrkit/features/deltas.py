"""Delta (time-derivative) features, as Kaldi's ``add-deltas`` (``DeltaFeatures``).

The order-1 filter is the regression ``d[t] = sum_{j=-N..N} j * x[t+j] / sum_j j^2`` over
``N = window`` frames each side; the order-k filter is the order-(k-1) filter convolved with the
order-1 one, so every order is computed from the original features with the first and last
frames replicated beyond the edges (Kaldi clamps the frame index). This differs at the edges
from applying a delta function twice with padding each time (torchaudio's ``compute_deltas``
twice): Kaldi's way is used here.
"""

from __future__ import annotations

import numpy as np


def delta_filters(order: int = 2, window: int = 2) -> list[np.ndarray]:
    """Return Kaldi's ``order + 1`` delta filters: float32, filter ``i`` ``[1 + 2*i*window]``.

    Filter 0 is ``[1]``; filter ``i`` is filter ``i-1`` convolved with ``[-N..N] / sum j^2``
    (``DeltaFeatures``' ``scales_``), computed in float32 as Kaldi does.
    """
    if not 0 <= order < 1000:
        raise ValueError(f"delta order must be in [0, 1000), got {order}")
    if not 0 < window < 1000:
        raise ValueError(f"delta window must be in [1, 1000), got {window}")
    scales = [np.ones(1, np.float32)]
    normalizer = np.float32(sum(j * j for j in range(-window, window + 1)))
    for _ in range(order):
        prev = scales[-1]
        half = (len(prev) - 1) // 2
        cur = np.zeros(len(prev) + 2 * window, np.float32)
        for j in range(-window, window + 1):  # float32 sums in Kaldi's order, for equal bits
            for k in range(-half, half + 1):
                cur[j + k + half + window] += np.float32(j) * prev[k + half]
        scales.append(cur * np.float32(1.0 / float(normalizer)))
    return scales


def add_deltas(feats, order: int = 2, window: int = 2) -> np.ndarray:
    """Append delta features to ``feats``, exactly as Kaldi's ``add-deltas``.

    Takes ``feats`` ``[T, D]`` (any float or integer dtype), ``order`` (``--delta-order``, default
    2) and ``window`` (``--delta-window``, default 2). Returns float32 ``[T, D * (order + 1)]``:
    the features, their deltas, their delta-deltas, ... side by side. Frames beyond the ends are
    copies of the first/last frame.
    """
    feats = np.asarray(feats)
    if feats.ndim != 2:
        raise ValueError(f"feats: expected a [frames, dims] matrix, got shape {feats.shape}")
    x = feats.astype(np.float32, copy=False)
    t, d = x.shape
    filters = delta_filters(order, window)
    out = np.zeros((t, d * (order + 1)), np.float32)
    if t == 0:
        return out
    reach = order * window
    # Edge replication equals Kaldi's clamping of the frame index to [0, T-1].
    idx = np.clip(np.arange(-reach, t + reach), 0, t - 1)
    padded = x[idx]
    for i, scales in enumerate(filters):
        half = (len(scales) - 1) // 2
        block = out[:, i * d:(i + 1) * d]
        for k, scale in enumerate(scales):
            if scale != 0.0:
                start = reach - half + k
                block += scale * padded[start:start + t]
    return out


def add_deltas_batch(feats, lengths, order: int = 2, window: int = 2) -> np.ndarray:
    """``add_deltas`` on a padded batch: ``feats`` ``[T, B, D]``, ``lengths`` int ``[B]``.

    Returns float32 ``[T, B, D * (order + 1)]``; sequence ``b`` replicates its own last frame
    ``lengths[b] - 1`` (never the padding) and its padded frames are 0.
    """
    feats = np.asarray(feats)
    if feats.ndim != 3:
        raise ValueError(f"feats: expected a padded batch [T, B, D], got shape {feats.shape}")
    t_max, b, d = feats.shape
    lengths = np.asarray(lengths)
    if lengths.shape != (b,) or np.any(lengths < 0) or np.any(lengths > t_max):
        raise ValueError(f"lengths: expected {b} values in [0, {t_max}], got {lengths.tolist()}")
    out = np.zeros((t_max, b, d * (order + 1)), np.float32)
    for i in range(b):
        n = int(lengths[i])
        if n:
            out[:n, i] = add_deltas(feats[:n, i], order, window)
    return out
