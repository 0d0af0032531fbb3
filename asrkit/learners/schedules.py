"""Learning-rate schedules: ``schedule(step, samples) -> lr``.

``step`` counts updates made so far and ``samples`` the training samples seen (CNTK schedules
count samples, with an ``epoch_size``; warmup schedules count updates). NewBob is driven by the
cross-validation loss at the end of each epoch.
"""

from __future__ import annotations

import math


class Schedule:
    """Base class; subclasses implement ``__call__(step, samples)``."""

    def __call__(self, step: int, samples: int) -> float:
        raise NotImplementedError

    def state_dict(self) -> dict:
        """Mutable state to checkpoint (none for pure functions of step/samples)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`."""


class Constant(Schedule):
    """The same rate for every update."""

    def __init__(self, lr: float):
        self.lr = float(lr)

    def __call__(self, step, samples):
        return self.lr


class Piecewise(Schedule):
    """CNTK's ``learning_rate_schedule``: ``values`` per epoch of ``epoch_size`` samples.

    values: ``[0.1, 0.1, 0.05]`` (one per epoch, the last repeats) or ``[(2, 0.1), (1, 0.05)]``
    (count of epochs, rate), as CNTK.
    """

    def __init__(self, values, epoch_size: int):
        flat = []
        for v in values:
            if isinstance(v, (tuple, list)):
                flat += [float(v[1])] * int(v[0])
            else:
                flat.append(float(v))
        if not flat or epoch_size < 1:
            raise ValueError("Piecewise needs at least one value and epoch_size >= 1")
        self.values, self.epoch_size = flat, int(epoch_size)

    def __call__(self, step, samples):
        return self.values[min(samples // self.epoch_size, len(self.values) - 1)]


class Warmup(Schedule):
    """Linear warmup to ``peak`` over ``warmup_steps`` updates, then ``decay``.

    decay: 'constant'; 'inverse_sqrt' (Noam/Transformer: ``peak * sqrt(warmup / step)``);
    'linear' or 'cosine' down to ``final`` at ``total_steps``; 'exponential' (``peak *
    rate ** ((step - warmup) / decay_steps)``).
    """

    def __init__(self, peak: float, warmup_steps: int, decay: str = "constant",
                 total_steps: int | None = None, final: float = 0.0, rate: float = 0.5,
                 decay_steps: int = 1000):
        if decay in ("linear", "cosine") and not total_steps:
            raise ValueError(f"decay {decay!r} needs total_steps")
        if decay not in ("constant", "inverse_sqrt", "linear", "cosine", "exponential"):
            raise ValueError(f"unknown decay {decay!r}")
        self.peak, self.warmup, self.decay = float(peak), int(warmup_steps), decay
        self.total, self.final, self.rate, self.decay_steps = total_steps, final, rate, decay_steps

    def __call__(self, step, samples):
        s = step + 1
        if s <= self.warmup:
            return self.peak * s / self.warmup
        if self.decay == "constant":
            return self.peak
        if self.decay == "inverse_sqrt":
            return self.peak * math.sqrt(max(self.warmup, 1) / s)
        if self.decay == "exponential":
            return self.peak * self.rate ** ((s - self.warmup) / self.decay_steps)
        frac = min((s - self.warmup) / max(self.total - self.warmup, 1), 1.0)
        if self.decay == "linear":
            return self.final + (self.peak - self.final) * (1.0 - frac)
        return self.final + (self.peak - self.final) * 0.5 * (1.0 + math.cos(math.pi * frac))


class NewBob(Schedule):
    """The "newbob" schedule of QuickNet/Kaldi nnet1, on the cross-validation loss.

    Keep ``lr`` while an epoch improves the CV loss by at least ``start_threshold``
    (relative); from the first epoch that does not, multiply the rate by ``decay`` after every
    epoch; stop when an epoch during the decay improves by less than ``stop_threshold``. An epoch
    that makes the CV loss worse is rejected (``rejected`` is True: restore the previous model).
    Call :meth:`epoch_end` with each epoch's CV loss; it returns False when training should stop.
    """

    def __init__(self, lr: float, decay: float = 0.5, start_threshold: float = 0.01,
                 stop_threshold: float = 0.001, min_epochs: int = 0, max_epochs: int = 100):
        self.lr, self.decay = float(lr), float(decay)
        self.start_threshold, self.stop_threshold = start_threshold, stop_threshold
        self.min_epochs, self.max_epochs = min_epochs, max_epochs
        self.best: float | None = None
        self.decaying = False
        self.rejected = False
        self.epochs = 0

    def __call__(self, step, samples):
        return self.lr

    def epoch_end(self, cv_loss: float) -> bool:
        """Record an epoch's CV loss; update the rate; return whether to keep training."""
        self.epochs += 1
        if self.best is None:
            self.best = cv_loss
            return self.epochs < self.max_epochs
        gain = (self.best - cv_loss) / abs(self.best) if self.best else 0.0
        self.rejected = cv_loss > self.best
        if not self.rejected:
            self.best = cv_loss
        if self.decaying and gain < self.stop_threshold and self.epochs >= self.min_epochs:
            return False
        if not self.decaying and gain < self.start_threshold:
            self.decaying = True
        if self.decaying:
            self.lr *= self.decay
        return self.epochs < self.max_epochs

    def state_dict(self):
        return {k: getattr(self, k) for k in ("lr", "best", "decaying", "rejected", "epochs")}

    def load_state_dict(self, state):
        for k, v in state.items():
            setattr(self, k, v)


def as_schedule(lr) -> Schedule:
    """A Schedule from a number, a Schedule or any ``f(step, samples)`` callable."""
    if isinstance(lr, Schedule):
        return lr
    if callable(lr):
        return _Callable(lr)
    return Constant(lr)


class _Callable(Schedule):
    def __init__(self, fn):
        self.fn = fn

    def __call__(self, step, samples):
        return float(self.fn(step, samples))
