"""Learning-rate schedules: ``schedule(step, samples, epoch=0) -> lr``, one family for every
trainer.

``step`` counts updates made so far (0-based), ``samples`` the training samples seen (CNTK
schedules count samples, with an ``epoch_size``; warmup schedules count updates) and ``epoch``
the epochs completed. A trainer calls :meth:`Schedule.epoch_end` with each epoch's
cross-validation loss; :class:`NewBob` is driven by it, the others ignore it.
"""

from __future__ import annotations

import math


class Schedule:
    """Base class; subclasses implement ``__call__(step, samples, epoch=0)``."""

    rejected = False  # NewBob: the last epoch made the CV loss worse

    def __call__(self, step: int, samples: int, epoch: int = 0) -> float:
        raise NotImplementedError

    def epoch_end(self, cv_loss: float | None) -> bool:
        """Record an epoch's CV loss (None: no CV); returns whether to keep training."""
        return True

    def state_dict(self) -> dict:
        """Mutable state to checkpoint (none for pure functions of step/samples)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`."""


class Constant(Schedule):
    """The same rate for every update."""

    def __init__(self, lr: float):
        self.lr = float(lr)

    def __call__(self, step, samples, epoch=0):
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

    def __call__(self, step, samples, epoch=0):
        return self.values[min(samples // self.epoch_size, len(self.values) - 1)]


class Warmup(Schedule):
    """Linear warmup to ``peak`` over ``warmup_steps`` updates, then ``decay``; the whole
    times ``epoch_decay ** epoch`` (``[learner] decay``).

    decay: 'constant'; 'inverse_sqrt' (Noam/Transformer: ``peak * sqrt(warmup / step)``);
    'linear' or 'cosine' down to ``final`` at ``total_steps``; 'exponential' (``peak *
    rate ** ((step - warmup) / decay_steps)``).
    """

    def __init__(self, peak: float, warmup_steps: int, decay: str = "constant",
                 total_steps: int | None = None, final: float = 0.0, rate: float = 0.5,
                 decay_steps: int = 1000, epoch_decay: float = 1.0):
        if decay in ("linear", "cosine") and not total_steps:
            raise ValueError(f"decay {decay!r} needs total_steps")
        if decay not in ("constant", "inverse_sqrt", "linear", "cosine", "exponential"):
            raise ValueError(f"unknown decay {decay!r}")
        self.peak, self.warmup, self.decay = float(peak), int(warmup_steps), decay
        self.total, self.final, self.rate, self.decay_steps = total_steps, final, rate, decay_steps
        self.epoch_decay = float(epoch_decay)

    def __call__(self, step, samples, epoch=0):
        lr = self._at(step)
        return lr * self.epoch_decay ** epoch if self.epoch_decay != 1.0 else lr

    def _at(self, step):
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
    """The "newbob" schedule of QuickNet and Kaldi nnet1 (``train_scheduler.sh``) on the
    cross-validation loss, over a ``base`` schedule (a Schedule or a constant rate).

    Keep the rate while an epoch improves the CV loss by at least ``start_threshold``
    (relative); from the first epoch that does not, multiply it by ``decay`` after every epoch;
    stop when an epoch during the decay improves by less than ``stop_threshold`` (not before
    ``min_epochs``), after ``max_epochs`` (0: no limit) or once the rate is below ``min_lr``
    (0: off). An epoch that makes the CV loss worse is rejected (``rejected`` is True: a
    trainer that keeps the previous parameters restores them). The first CV loss is the
    baseline. Call :meth:`epoch_end` with each epoch's CV loss; False means stop.
    """

    def __init__(self, base, decay: float = 0.5, start_threshold: float = 0.01,
                 stop_threshold: float = 0.001, min_epochs: int = 0, max_epochs: int = 100,
                 min_lr: float = 0.0):
        self.base = as_schedule(base)
        self.decay = float(decay)
        self.start_threshold, self.stop_threshold = start_threshold, stop_threshold
        self.min_epochs, self.max_epochs, self.min_lr = min_epochs, max_epochs, min_lr
        self.newbob_scale = 1.0
        self.best_cv: float | None = None
        self.decaying = False
        self.rejected = False
        self.epochs = 0
        self.base_lr = self.base(0, 0, 0)  # the base rate last used (min_lr compares it)

    @property
    def lr(self) -> float:
        """The rate of the last update (the base's rate times the decay so far)."""
        return self.base_lr * self.newbob_scale

    def __call__(self, step, samples, epoch=0):
        self.base_lr = self.base(step, samples, epoch)
        return self.base_lr * self.newbob_scale

    def epoch_end(self, cv_loss: float | None) -> bool:
        """Record an epoch's CV loss; update the rate; return whether to keep training."""
        self.epochs += 1
        more = not self.max_epochs or self.epochs < self.max_epochs
        if cv_loss is None:
            return more
        cv_loss = float(cv_loss)  # a numpy scalar would leak numpy bools into the state
        if not math.isfinite(cv_loss):
            cv_loss = math.inf  # NaN compares false: make it a rejected epoch
        if self.best_cv is None:
            self.best_cv = cv_loss
            return more
        if math.isfinite(self.best_cv) and self.best_cv:
            gain = (self.best_cv - cv_loss) / abs(self.best_cv)
        else:
            gain = 0.0 if cv_loss >= self.best_cv else math.inf
        self.rejected = cv_loss > self.best_cv
        if not self.rejected:
            self.best_cv = cv_loss
        if self.decaying and gain < self.stop_threshold and self.epochs >= self.min_epochs:
            return False
        if not self.decaying and gain < self.start_threshold:
            self.decaying = True
        if self.decaying:
            self.newbob_scale *= self.decay
        if self.min_lr and self.lr < self.min_lr:
            return False
        return more

    def state_dict(self):
        return {k: getattr(self, k) for k in ("newbob_scale", "best_cv", "decaying", "rejected",
                                              "epochs", "base_lr")}

    def load_state_dict(self, state):
        for k in ("newbob_scale", "best_cv", "decaying", "rejected", "epochs", "base_lr"):
            if k in state:
                setattr(self, k, state[k])
        if "decaying" not in state:  # written by the reduce-on-plateau newbob before it
            self.decaying = bool(self.newbob_scale < 1.0)


def as_schedule(lr) -> Schedule:
    """A Schedule from a number or a Schedule."""
    return lr if isinstance(lr, Schedule) else Constant(lr)
