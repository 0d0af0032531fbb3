"""Learners (``asrkit.learners``): update rules, schedules, clipping, the ``[learner]`` section,
the device variant and the Trainer."""

from asrkit.learners.base import Learner
from asrkit.learners.clipping import (
    clip_gradients,
    clip_per_sample,
    global_norm,
)
from asrkit.learners.config import LEARNER_CLASSES, LEARNER_TYPES, LearnerConfig, build_learner
from asrkit.learners.device import DeviceLearner
from asrkit.learners.optimizers import SGD, Adam, AdamW, FSAdaGrad
from asrkit.learners.rules import adam_step, fsadagrad_step, momentum_as_time_constant, sgd_step
from asrkit.learners.schedules import Constant, NewBob, Piecewise, Schedule, Warmup, as_schedule
from asrkit.learners.trainer import Trainer

__all__ = ["LEARNER_CLASSES", "LEARNER_TYPES", "SGD", "Adam", "AdamW", "Constant",
           "DeviceLearner", "FSAdaGrad", "Learner", "LearnerConfig", "NewBob", "Piecewise",
           "Schedule", "Trainer", "Warmup", "adam_step", "as_schedule", "build_learner",
           "clip_gradients", "clip_per_sample", "fsadagrad_step",
           "global_norm", "momentum_as_time_constant", "sgd_step"]
