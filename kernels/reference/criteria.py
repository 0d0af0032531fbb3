"""Frame classification criteria in numpy: the CPU path of the ops and the twins of
:mod:`asrkit.kernels.cuda.criteria`.

Scores ``z [..., C]`` (unnormalised) against integer ``labels [...]``; a negative label is
ignored (loss 0, no gradient, never an error).
"""

from __future__ import annotations

import numpy as np


def check_labels(labels, C: int) -> None:
    """ValueError when a label is not below the number of classes ``C``."""
    if labels.size and labels.max() >= C:
        raise ValueError(f"label {int(labels.max())} is not below the number of classes {C}")


def cross_entropy(z, labels, label_smoothing=0.0):
    """Cross-entropy of ``softmax(z)`` against ``labels`` (target ``(1 - eps) * onehot + eps /
    C`` with smoothing eps) -> ``(loss [...], state)``."""
    C = z.shape[-1]
    check_labels(labels, C)
    zm = z - z.max(axis=-1, keepdims=True)
    logp = zm - np.log(np.exp(zm).sum(axis=-1, keepdims=True))
    ignore = labels < 0
    safe = np.where(ignore, 0, labels)
    picked = np.take_along_axis(logp, safe[..., None], axis=-1)[..., 0]
    loss = -(1.0 - label_smoothing) * picked
    if label_smoothing:
        loss = loss - label_smoothing / C * logp.sum(axis=-1)
    return np.where(ignore, 0, loss).astype(z.dtype), (np.exp(logp), safe, ignore)


def cross_entropy_backward(g, state, label_smoothing=0.0):
    """Gradient of :func:`cross_entropy` for the scores: ``(p - target) * g``."""
    p, safe, ignore = state
    C = p.shape[-1]
    target = np.zeros_like(p)
    np.put_along_axis(target, safe[..., None], 1.0 - label_smoothing, axis=-1)
    if label_smoothing:
        target += label_smoothing / C
    return (p - target) * np.where(ignore, 0, g)[..., None]


def argmax(z):
    """Index of the best class per row: ``z [..., C] -> int [...]``."""
    return np.argmax(z, axis=-1)


def classification_error(z, labels):
    """0/1 per row: ``argmax(z) != label`` (negative labels count as correct), in z's float
    dtype (float32 for integer scores)."""
    wrong = (argmax(z) != labels) & (labels >= 0)
    return wrong.astype(z.dtype if z.dtype.kind == "f" else np.float32)
