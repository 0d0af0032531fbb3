"""The Trainer: one criterion node, its learners, and minibatch training/evaluation steps.

As CNTK's Trainer: the criterion is per sample (CTC cost per sequence ``[B]``, cross-entropy per
frame ``[T, B]``) and is summed over the minibatch; the number of samples is the number of real
entries, so per-sample learning rates and time constants mean what they say.
"""

from __future__ import annotations

import numpy as np

import asrkit.ops as O
from asrkit.graph import Sequence, evaluate, forward_backward


def _count(value) -> int:
    if isinstance(value, Sequence):
        per = int(np.prod(value.data.shape[2:])) if value.data.ndim > 2 else 1
        return int(value.lengths.sum()) * per
    return int(np.size(value))


class Trainer:
    """Train ``criterion`` with ``learners`` (each owns a subset of the parameters).

    criterion: per-sample loss node (or a scalar); metric: optional node evaluated alongside
    (e.g. frame error). ``recompute=True`` trades compute for memory in the backward pass.
    """

    def __init__(self, criterion, learners, metric=None, recompute: bool = False,
                 device: str = "cpu"):
        self.criterion = criterion
        self.root = criterion if not criterion.dynamic_axes and criterion.shape == () \
            else O.sum_all(criterion)
        self.learners = list(learners) if isinstance(learners, (list, tuple)) else [learners]
        self.metric = metric
        self.recompute, self.device = recompute, device
        self.parameters = [p for lr in self.learners for p in lr.parameters]
        self.minibatches = 0

    def _outputs(self):
        outs = [self.criterion] if self.criterion is not self.root else []
        return outs + ([self.metric] if self.metric is not None else [])

    def train_minibatch(self, feeds: dict, seed: int | None = None) -> dict:
        """Forward, backward and update on one minibatch.

        Returns ``{"loss": summed criterion, "samples": N, "loss_per_sample", "metric"}``.
        """
        seed = self.minibatches if seed is None else seed
        values, grads = forward_backward(self.root, self.parameters, feeds,
                                         outputs=self._outputs(), train=True, seed=seed,
                                         device=self.device, recompute=self.recompute)
        loss = float(values[0])
        samples = _count(values[1]) if self.criterion is not self.root else 1
        if not np.isfinite(loss):
            raise FloatingPointError(f"minibatch {self.minibatches}: the criterion is {loss}")
        for learner in self.learners:
            learner.update({p: grads[p] for p in learner.parameters}, samples)
        self.minibatches += 1
        return self._summary(loss, samples, values[-1] if self.metric is not None else None)

    def test_minibatch(self, feeds: dict) -> dict:
        """Evaluate criterion (and metric) in evaluation mode; no update."""
        outs = [self.root] + self._outputs()
        values = evaluate(outs, feeds, train=False, device=self.device)
        samples = _count(values[1]) if self.criterion is not self.root else 1
        return self._summary(float(values[0]), samples,
                             values[-1] if self.metric is not None else None)

    @staticmethod
    def _summary(loss, samples, metric):
        out = {"loss": loss, "samples": samples, "loss_per_sample": loss / max(samples, 1)}
        if metric is not None:
            m = metric.data if isinstance(metric, Sequence) else np.asarray(metric)
            out["metric"] = float(np.sum(m))
        return out
