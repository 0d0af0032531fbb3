"""Parameter updates for the Trainer: SGD with momentum, Adam/AdamW, learning-rate schedules
(warm-up, exponential decay, newbob on the CV loss) and gradient clipping.

These work on lists of numpy arrays updated in place, with ``state_dict`` / ``load_state_dict``
for checkpoints. (``asrkit.learners`` holds the graph engine's learners; the Trainer keeps its own
small set here so that its checkpoint format does not depend on them.)

The ``[learner]`` section::

    type = "sgd"               # sgd | adam | adamw
    lr = 1e-3                  # per step, on the gradient of the loss per frame
    momentum = 0.9             # sgd: heavy ball; nesterov = true for Nesterov
    momentum_time_constant = 0 # sgd, CNTK's unit: momentum exp(-frames / this) per step, so
                               # a gradient's weight decays by 1/e after this many frames
    beta1 = 0.9; beta2 = 0.999; eps = 1e-8      # adam
    l2 = 0.0                   # L2 on the gradient (sgd, adam); decoupled for adamw
    clip_norm = 5.0            # global gradient norm (0: off)
    clip_value = 0.0           # element-wise clipping (0: off)
    warmup_steps = 0           # linear warm-up
    decay = 1.0                # lr multiplied by this each epoch
    newbob = false             # halve (newbob_factor) when CV loss improves < newbob_threshold
    newbob_factor = 0.5
    newbob_threshold = 0.0     # relative improvement
    min_lr = 0.0               # training stops when newbob takes lr below this
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np


@dataclasses.dataclass
class LearnerConfig:
    """Options of the ``[learner]`` section (see the module docstring)."""

    type: str = "sgd"
    lr: float = 1e-3
    momentum: float = 0.9
    momentum_time_constant: float = 0.0
    nesterov: bool = False
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    l2: float = 0.0
    clip_norm: float = 5.0
    clip_value: float = 0.0
    warmup_steps: int = 0
    decay: float = 1.0
    newbob: bool = False
    newbob_factor: float = 0.5
    newbob_threshold: float = 0.0
    min_lr: float = 0.0


LEARNER_TYPES = ("sgd", "adam", "adamw")


class Optimizer:
    """Updates parameters in place from gradients: ``step(params, grads, lr)``."""

    def __init__(self, config: LearnerConfig, shapes: Sequence[tuple], dtype=np.float32):
        if config.type not in LEARNER_TYPES:
            raise ValueError(f"unknown learner type {config.type!r}; known: "
                             f"{', '.join(LEARNER_TYPES)}")
        self.config = config
        self.count = 0
        self.slots = [np.zeros(s, dtype) for s in shapes]
        self.slots2 = [np.zeros(s, dtype) for s in shapes] if config.type != "sgd" else []

    def momentum(self, frames: int) -> float:
        """SGD momentum for a minibatch of ``frames`` (from the time constant when set)."""
        tc = self.config.momentum_time_constant
        return math.exp(-frames / tc) if tc > 0 else self.config.momentum

    def step(self, params: Sequence[np.ndarray], grads: Sequence[np.ndarray], lr: float,
             frames: int = 1) -> None:
        """One update with learning rate ``lr``; ``grads`` may be modified. ``frames``: the
        minibatch's frames (for ``momentum_time_constant``)."""
        c = self.config
        self.count += 1
        if c.type == "sgd":
            mu = np.float32(self.momentum(frames))
            for p, g, v in zip(params, grads, self.slots):
                if c.l2:
                    g += c.l2 * p
                v *= mu
                v += g
                p -= lr * (g + mu * v if c.nesterov else v)
            return
        b1, b2 = c.beta1, c.beta2
        bc1 = 1 - b1 ** self.count
        bc2 = math.sqrt(1 - b2 ** self.count)
        for p, g, m, v in zip(params, grads, self.slots, self.slots2):
            if c.l2 and c.type == "adam":
                g += c.l2 * p
            m *= b1
            m += (1 - b1) * g
            v *= b2
            v += (1 - b2) * g * g
            if c.l2 and c.type == "adamw":
                p -= lr * c.l2 * p
            p -= (lr / bc1) * m / (np.sqrt(v) / bc2 + c.eps)  # torch.optim.Adam's form

    def state_dict(self) -> dict:
        """Counters and slot arrays (momentum / Adam moments)."""
        return {"count": self.count, "slots": [s.copy() for s in self.slots],
                "slots2": [s.copy() for s in self.slots2]}

    def load_state_dict(self, state: dict) -> None:
        """Restore what ``state_dict`` returned."""
        self.count = int(state["count"])
        for dst, src in zip(self.slots, state["slots"]):
            dst[...] = src
        for dst, src in zip(self.slots2, state["slots2"]):
            dst[...] = src


def clip_gradients(grads: Sequence[np.ndarray], clip_norm: float = 0.0,
                   clip_value: float = 0.0) -> float:
    """Clip in place: element-wise to ``[-clip_value, clip_value]``, then the global L2 norm to
    ``clip_norm`` (0 turns each off). Returns the global norm before norm clipping."""
    if clip_value:
        for g in grads:
            np.clip(g, -clip_value, clip_value, out=g)
    norm = math.sqrt(sum(float(np.vdot(g, g)) for g in grads))
    if clip_norm and norm > clip_norm:
        scale = clip_norm / (norm + 1e-12)
        for g in grads:
            g *= scale
    return norm


class Schedule:
    """The learning rate at each step: warm-up, per-epoch decay and newbob halving.

    ``lr(step, epoch)``; ``on_cv(loss) -> bool`` records a CV loss and returns True when newbob
    has just lowered the rate; ``stop`` turns True once the rate is below ``min_lr``.
    """

    def __init__(self, config: LearnerConfig, scale: float = 1.0):
        self.config = config
        self.scale = scale  # e.g. data-parallel learning-rate scaling
        self.newbob_scale = 1.0
        self.best_cv: float | None = None

    def lr(self, step: int, epoch: int) -> float:
        """Learning rate for global step ``step`` (1-based) of ``epoch`` (0-based)."""
        c = self.config
        warm = min(1.0, step / c.warmup_steps) if c.warmup_steps else 1.0
        return c.lr * self.scale * warm * c.decay ** epoch * self.newbob_scale

    def on_cv(self, loss: float) -> bool:
        """Record a CV loss (per frame); apply newbob. Returns True if the rate was lowered."""
        c = self.config
        lowered = False
        if c.newbob and self.best_cv is not None and math.isfinite(loss):
            improvement = (self.best_cv - loss) / max(abs(self.best_cv), 1e-12)
            if improvement < c.newbob_threshold:
                self.newbob_scale *= c.newbob_factor
                lowered = True
        if math.isfinite(loss) and (self.best_cv is None or loss < self.best_cv):
            self.best_cv = loss
        return lowered

    def stop(self, epoch: int) -> bool:
        """True when newbob has taken the rate below ``min_lr``."""
        c = self.config
        return bool(c.newbob and c.min_lr and c.lr * self.scale * c.decay ** epoch
                    * self.newbob_scale < c.min_lr)

    def state_dict(self) -> dict:
        """Newbob state (JSON-serialisable)."""
        return {"newbob_scale": self.newbob_scale, "best_cv": self.best_cv}

    def load_state_dict(self, state: dict) -> None:
        """Restore what ``state_dict`` returned."""
        self.newbob_scale = float(state["newbob_scale"])
        self.best_cv = state["best_cv"]
