"""The ``[learner]`` section of a training config and the Learner it builds.

::

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
    newbob = false             # Kaldi nnet1's newbob on the CV loss (asrkit.learners.NewBob):
    newbob_factor = 0.5        #   once an epoch improves CV by less than newbob_threshold
    newbob_threshold = 0.0     #   (relative), multiply the rate by newbob_factor every epoch;
    newbob_stop_threshold = 0.0  # stop when an epoch during that improves by less than this
    min_lr = 0.0               # newbob also stops once the rate is below this (0: off)

``fsadagrad`` is CNTK's FSAdaGrad: each entry's gradient is divided by the root of its running
mean square per frame (``variance_time_constant`` frames), times ``target_denominator``, at most
10-fold amplified, then unit-gain momentum (``v = m v + (1 - m) g``, CNTK's default) and
``p -= lr v``. It runs CNTK's rule on the minibatch's summed gradient with the per-frame rate
``lr / frames``, so ``lr`` scales the step as for the other learners.
"""

from __future__ import annotations

import dataclasses

from asrkit.learners.base import Learner
from asrkit.learners.optimizers import SGD, Adam, FSAdaGrad
from asrkit.learners.schedules import NewBob, Warmup


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
    newbob_stop_threshold: float = 0.0
    newbob_min_epochs: int = 0
    min_lr: float = 0.0


# type -> the Learner class it builds (the slots it keeps: its SLOTS)
LEARNER_CLASSES = {"sgd": SGD, "adam": Adam, "adamw": Adam, "fsadagrad": FSAdaGrad}
LEARNER_TYPES = tuple(LEARNER_CLASSES)


def build_learner(c: LearnerConfig, parameters, lr_scale: float = 1.0,
                  max_epochs: int = 0) -> Learner:
    """The Learner of ``c`` over ``parameters`` (Parameter nodes), its schedule the warm-up
    and per-epoch decay of ``lr * lr_scale``, under newbob when ``c.newbob``; ``max_epochs``:
    newbob's epoch limit (0: none, the trainer's own)."""
    if c.type not in LEARNER_CLASSES:
        raise ValueError(f"unknown learner type {c.type!r}; known: {', '.join(LEARNER_TYPES)}")
    schedule = Warmup(c.lr * lr_scale, c.warmup_steps, epoch_decay=c.decay)
    if c.newbob:
        schedule = NewBob(schedule, c.newbob_factor, c.newbob_threshold, c.newbob_stop_threshold,
                          c.newbob_min_epochs, max_epochs, c.min_lr)
    common = {"clip_norm": c.clip_norm, "clip_value": c.clip_value}
    if c.type == "sgd":
        return SGD(parameters, schedule, c.momentum, c.nesterov,
                   momentum_time_constant=c.momentum_time_constant, l2=c.l2, **common)
    if c.type == "fsadagrad":
        return FSAdaGrad(parameters, schedule, c.momentum,
                         variance_time_constant=c.variance_time_constant,
                         target_denominator=c.target_denominator,
                         momentum_time_constant=c.momentum_time_constant, lr_per_sample=False,
                         l2=c.l2, **common)
    decoupled = c.type == "adamw"
    return Adam(parameters, schedule, (c.beta1, c.beta2), c.eps,
                weight_decay=c.l2 if decoupled else 0.0, l2=0.0 if decoupled else c.l2, **common)
