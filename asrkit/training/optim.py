"""The Trainer's learner: the ``[learner]`` section, an Optimizer over lists of arrays, the
learning-rate schedule (warm-up, exponential decay, newbob on the CV loss); clipping is
``asrkit.learners.clip_gradients``.

The update rules themselves are ``asrkit.learners.rules`` (shared with the graph learners
``asrkit.learners.SGD/Adam/FSAdaGrad``); the Optimizer here only holds the slots as lists of
arrays, in the layout the Trainer's checkpoints use (``opt/slots``, ``opt/slots2``, and
``optimizer_count`` in the header).

The ``[learner]`` section::

    type = "sgd"               # sgd | adam | adamw | fsadagrad
    lr = 1e-3                  # per step, on the gradient of the loss per frame
    momentum = 0.9             # sgd, fsadagrad: heavy ball; nesterov = true for Nesterov (sgd)
    momentum_time_constant = 0 # sgd, fsadagrad, CNTK's unit: momentum exp(-frames / this) per
                               # step, so a gradient's weight decays by 1/e after this many frames
    beta1 = 0.9; beta2 = 0.999; eps = 1e-8      # adam, adamw
    variance_time_constant = 720000.0  # fsadagrad: frames over which the mean square decays
    target_denominator = 1.0   # fsadagrad: the gradient scale that is left unchanged
    l2 = 0.0                   # L2 on the gradient (sgd, adam, fsadagrad); decoupled for adamw
    clip_norm = 5.0            # global gradient norm (0: off)
    clip_value = 0.0           # element-wise clipping (0: off)
    warmup_steps = 0           # linear warm-up
    decay = 1.0                # lr multiplied by this each epoch
    newbob = false             # halve (newbob_factor) when CV loss improves < newbob_threshold
    newbob_factor = 0.5
    newbob_threshold = 0.0     # relative improvement
    min_lr = 0.0               # training stops when newbob takes lr below this

``fsadagrad`` is CNTK's FSAdaGrad: each entry's gradient is divided by the root of its running
mean square per frame (``variance_time_constant`` frames), times ``target_denominator``, at most
10-fold amplified, then unit-gain momentum (``v = m v + (1 - m) g``, CNTK's default) and
``p -= lr v``. It runs CNTK's rule on the minibatch's summed gradient with the per-frame rate
``lr / frames``, so ``lr`` scales the step as for the other learners.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from asrkit.learners import (
    adam_step,
    clip_gradients,
    fsadagrad_step,
    momentum_as_time_constant,
    sgd_step,
)

__all__ = ["LEARNER_TYPES", "LearnerConfig", "Optimizer", "Schedule", "clip_gradients"]


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
    variance_time_constant: float = 720000.0
    target_denominator: float = 1.0
    l2: float = 0.0
    clip_norm: float = 5.0
    clip_value: float = 0.0
    warmup_steps: int = 0
    decay: float = 1.0
    newbob: bool = False
    newbob_factor: float = 0.5
    newbob_threshold: float = 0.0
    min_lr: float = 0.0


LEARNER_TYPES = ("sgd", "adam", "adamw", "fsadagrad")


class Optimizer:
    """Updates parameters in place from gradients: ``step(params, grads, lr, frames)``.

    config: a LearnerConfig; shapes: the parameters' shapes. Slots, one array per parameter:
    ``slots`` the momentum (sgd, fsadagrad) or Adam's first moment; ``slots2`` Adam's second
    moment, or for fsadagrad the mean squares followed by one float64 ``[1]`` array holding
    the smoothed frame count; empty for sgd. ``count``: the updates made.
    """

    def __init__(self, config: LearnerConfig, shapes: Sequence[tuple], dtype=np.float32):
        if config.type not in LEARNER_TYPES:
            raise ValueError(f"unknown learner type {config.type!r}; known: "
                             f"{', '.join(LEARNER_TYPES)}")
        self.config = config
        self.count = 0
        self.slots = [np.zeros(s, dtype) for s in shapes]
        self.slots2 = [np.zeros(s, dtype) for s in shapes] if config.type != "sgd" else []
        if config.type == "fsadagrad":
            self.slots2.append(np.zeros(1, np.float64))

    def momentum(self, frames: int) -> float:
        """SGD momentum for a minibatch of ``frames`` (from the time constant when set)."""
        tc = self.config.momentum_time_constant
        return momentum_as_time_constant(tc, frames) if tc > 0 else self.config.momentum

    def step(self, params: Sequence[np.ndarray], grads: Sequence[np.ndarray], lr: float,
             frames: int = 1) -> None:
        """One update with learning rate ``lr`` from the per-frame mean gradients ``grads``
        (modified); ``frames``: the minibatch's frames (time constants, fsadagrad)."""
        c = self.config
        self.count += 1
        if c.l2 and c.type != "adamw":
            for p, g in zip(params, grads):
                g += c.l2 * p
        if c.type == "sgd":
            mu = self.momentum(frames)
            for p, g, v in zip(params, grads, self.slots):
                sgd_step(p, g, v, lr, mu, c.nesterov)
        elif c.type == "fsadagrad":
            n, mu, smoothed = max(int(frames), 1), self.momentum(frames), self.slots2[-1]
            count = new = float(smoothed[0])
            for p, g, mom, s in zip(params, grads, self.slots, self.slots2):
                g *= np.float32(n)  # CNTK's rule wants the summed gradient and a per-frame rate
                new = fsadagrad_step(p, g, s, mom, count, lr / n, n, mu,
                                     c.variance_time_constant, c.target_denominator)
            smoothed[0] = new
        else:
            wd = c.l2 if c.type == "adamw" else 0.0
            for p, g, m, v in zip(params, grads, self.slots, self.slots2):
                adam_step(p, g, m, v, self.count, lr, c.beta1, c.beta2, c.eps, wd)

    def state_dict(self) -> dict:
        """Counters and slot arrays (momentum / Adam moments / FSAdaGrad's mean squares)."""
        return {"count": self.count, "slots": [s.copy() for s in self.slots],
                "slots2": [s.copy() for s in self.slots2]}

    def load_state_dict(self, state: dict) -> None:
        """Restore what ``state_dict`` returned."""
        self.count = int(state["count"])
        for dst, src in zip(self.slots, state["slots"]):
            dst[...] = src
        for dst, src in zip(self.slots2, state["slots2"]):
            dst[...] = src


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
