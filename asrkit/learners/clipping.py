"""Gradient clipping: by global norm (as torch.nn.utils.clip_grad_norm_), and CNTK's per-sample
threshold (elementwise truncation, or norm scaling, at ``threshold * samples``)."""

from __future__ import annotations

import numpy as np


def global_norm(grads: dict) -> float:
    """The L2 norm of all gradients together."""
    return float(np.sqrt(sum(float(np.sum(np.square(g, dtype=np.float64)))
                             for g in grads.values())))


def clip_global_norm(grads: dict, max_norm: float) -> tuple[dict, float]:
    """Scale every gradient by ``min(1, max_norm / norm)``; returns (grads, norm before)."""
    norm = global_norm(grads)
    if norm > max_norm > 0:
        scale = max_norm / (norm + 1e-6)
        grads = {p: g * g.dtype.type(scale) for p, g in grads.items()}
    return grads, norm


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
