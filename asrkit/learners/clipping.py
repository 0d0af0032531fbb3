"""Gradient clipping: by global norm (as torch.nn.utils.clip_grad_norm_), element-wise by value,
and CNTK's per-sample threshold (elementwise truncation, or norm scaling, at
``threshold * samples``)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np


def global_norm(grads: Iterable[np.ndarray]) -> float:
    """The L2 norm of all gradients together."""
    return math.sqrt(sum(float(np.vdot(g, g)) for g in grads))


def clip_gradients(grads: Sequence[np.ndarray], clip_norm: float = 0.0,
                   clip_value: float = 0.0) -> float:
    """Clip in place: element-wise to ``[-clip_value, clip_value]``, then by the global L2 norm
    to ``clip_norm`` (as torch.nn.utils.clip_grad_norm_: scaled by ``clip_norm / norm`` when
    the norm is above it); 0 turns each off. Returns the global norm before norm clipping."""
    if clip_value:
        for g in grads:
            np.clip(g, -clip_value, clip_value, out=g)
    norm = global_norm(grads)
    if clip_norm > 0 and norm > clip_norm:
        for g in grads:
            g *= g.dtype.type(clip_norm / (norm + 1e-12))
    return norm


def clip_per_sample(g: np.ndarray, threshold: float, samples: int, truncation: bool = True):
    """CNTK's ``gradient_clipping_threshold_per_sample`` on one parameter's summed gradient.

    truncation: clip each entry to ``+-threshold * samples``; else scale the gradient down to
    norm ``threshold * samples`` when it is larger.
    """
    limit = threshold * samples
    if truncation:
        return np.clip(g, -limit, limit)
    norm = float(np.linalg.norm(g))
    return g * g.dtype.type(limit / norm) if norm > limit else g
