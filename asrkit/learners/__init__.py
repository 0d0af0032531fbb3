"""Learners (``asrkit.learners``): update rules, schedules, clipping and the Trainer."""

from asrkit.learners.base import Learner
from asrkit.learners.clipping import (
    clip_global_norm,
    clip_gradients,
    clip_per_sample,
    global_norm,
)
from asrkit.learners.optimizers import SGD, Adam, AdamW, FSAdaGrad
from asrkit.learners.rules import adam_step, fsadagrad_step, momentum_as_time_constant, sgd_step
from asrkit.learners.schedules import Constant, NewBob, Piecewise, Schedule, Warmup, as_schedule
from asrkit.learners.trainer import Trainer

__all__ = ["SGD", "Adam", "AdamW", "Constant", "FSAdaGrad", "Learner", "NewBob", "Piecewise",
           "Schedule", "Trainer", "Warmup", "adam_step", "as_schedule", "clip_global_norm",
           "clip_gradients", "clip_per_sample", "fsadagrad_step", "global_norm",
           "momentum_as_time_constant", "sgd_step"]
