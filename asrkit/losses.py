"""Training criteria as graph nodes (``asrkit.losses``): CTC and cross-entropy.

``reduction``: ``"none"`` keeps one value per sequence (CTC) or per frame (cross-entropy);
``"sum"`` sums them over the minibatch (CNTK's criterion, what learners with per-sample learning
rates expect); ``"mean"`` averages them (CTC: each cost divided by its target length, then the
mean over the batch, as torch's ``reduction='mean'``; cross-entropy: mean over real frames).
"""

from __future__ import annotations

import asrkit.ops as O


def _check(reduction):
    if reduction not in ("none", "sum", "mean"):
        raise ValueError(f"reduction must be 'none', 'sum' or 'mean'; got {reduction!r}")


def ctc(logits, labels, blank: int = 0, reduction: str = "sum", zero_infinity: bool = False):
    """CTC criterion on unnormalised ``logits [T, B, C]`` and an int label sequence ``[S, B]``."""
    _check(reduction)
    costs = O.ctc_loss(logits, labels, blank=blank, zero_infinity=zero_infinity)
    if reduction == "none":
        return costs
    if reduction == "sum":
        return O.sum_all(costs)
    return O.mean_all(costs / O.maximum(O.sequence_lengths(labels), 1.0))


def cross_entropy(z, labels, label_smoothing: float = 0.0, reduction: str = "sum"):
    """Cross-entropy with softmax of ``z [..., C]`` against int ``labels [...]``."""
    _check(reduction)
    ce = O.cross_entropy_with_softmax(z, labels, label_smoothing)
    if reduction == "none":
        return ce
    return O.sum_all(ce) if reduction == "sum" else O.mean_all(ce)


def frame_error_rate(z, labels):
    """Fraction of real frames whose argmax differs from the label (no gradient)."""
    return O.mean_all(O.classification_error(z, labels))


__all__ = ["ctc", "cross_entropy", "frame_error_rate"]
