"""The Learner base: schedules, learning-rate units, L2, clipping, then a per-parameter rule.

Gradients given to :meth:`Learner.update` are sums over the minibatch (the gradient of the summed
criterion, as CNTK's). With ``lr_per_sample=False`` (default) the rule sees the mean gradient
(sum / samples), so rates mean what they mean in PyTorch; with ``lr_per_sample=True`` it sees the
sum, i.e. CNTK's per-sample learning rates.
"""

from __future__ import annotations

import numpy as np

from asrkit.learners.clipping import clip_global_norm, clip_per_sample
from asrkit.learners.schedules import as_schedule


class Learner:
    """Updates ``parameters`` from gradients; subclasses implement ``_apply``."""

    def __init__(self, parameters, lr, *, lr_per_sample: bool = False, l2: float = 0.0,
                 clip_norm: float | None = None, clip_per_sample: float | None = None,
                 clip_truncation: bool = True):
        self.parameters = [p for p in parameters if getattr(p, "trainable", True)]
        if not self.parameters:
            raise ValueError("a learner needs at least one trainable parameter")
        self.schedule = as_schedule(lr)
        self.lr_per_sample = lr_per_sample
        self.l2 = float(l2)
        self.clip_norm, self.clip_per_sample = clip_norm, clip_per_sample
        self.clip_truncation = clip_truncation
        self.step = 0
        self.samples = 0
        self.state: dict = {id(p): {} for p in self.parameters}

    @property
    def learning_rate(self) -> float:
        """The rate the next update will use."""
        return self.schedule(self.step, self.samples)

    def update(self, grads: dict, sample_count: int = 1) -> float:
        """Apply one update from ``{parameter: summed gradient}``; returns the rate used."""
        N = max(int(sample_count), 1)
        lr = self.learning_rate
        gs = {}
        for p in self.parameters:
            if p not in grads:
                continue
            g = np.asarray(grads[p], dtype=p.dtype)
            if self.l2:
                g = g + p.dtype.type(self.l2 * N) * p.value  # CNTK: weight per sample
            if self.clip_per_sample:
                g = clip_per_sample(g, self.clip_per_sample, N, self.clip_truncation)
            gs[p] = g
        if not self.lr_per_sample:
            gs = {p: g / p.dtype.type(N) for p, g in gs.items()}
        if self.clip_norm:
            gs, _ = clip_global_norm(gs, self.clip_norm)
        for p, g in gs.items():
            self._apply(p, g, lr, N, self.state[id(p)])
        self.step += 1
        self.samples += N
        return lr

    def _apply(self, p, g, lr, samples, state) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict:
        """Step counters, schedule state and per-parameter slots (by parameter name/index)."""
        return {"step": self.step, "samples": self.samples,
                "schedule": self.schedule.state_dict(),
                "slots": [{k: (v.copy() if isinstance(v, np.ndarray) else v)
                           for k, v in self.state[id(p)].items()} for p in self.parameters]}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` (parameters in the same order)."""
        self.step, self.samples = state["step"], state["samples"]
        self.schedule.load_state_dict(state.get("schedule", {}))
        for p, slots in zip(self.parameters, state["slots"]):
            self.state[id(p)] = dict(slots)
