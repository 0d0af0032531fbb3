"""A Learner on the GPU: parameters and slots stay device arrays for the whole run.

``DeviceLearner`` does what a trainer does on the host for one rank (scale the summed gradient
to the mean, skip non-finite steps, clip by value and global norm, then ``Learner.apply``) with
the fused kernels of ``asrkit.kernels.cuda.update``: the gradients never leave the device, and
one 16-byte reduction result (the global sum of squares and the count of non-finite entries)
comes back per step. The host Learner keeps the counters and scalars and receives the slot
arrays on ``download``, so its ``state_dict`` (and a checkpoint) is the host one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from asrkit.learners.base import Learner


class DeviceLearner:
    """Device copies of ``learner``'s parameters and slots, and the update on them.

    frozen: other (non-trainable) parameters of the same graph to keep on the device with them,
    e.g. batch-norm running statistics, which the graph updates in place. ``nodes`` are the
    learner's parameters then ``frozen``; ``params`` their device arrays; ``slots``
    (``{name: list}``) the device slots, parallel to ``learner.slots``. Parameters must be
    float32.
    """

    def __init__(self, learner: Learner, frozen: Sequence = ()):
        from asrkit.kernels._device import require_cuda

        self.cuda = require_cuda()
        from asrkit.kernels.cuda import update

        self.kernels = update
        self.learner = learner
        self.nodes = list(learner.parameters) + list(frozen)
        for p in self.nodes:
            if p.dtype != np.float32:
                raise ValueError(f"device training needs float32 parameters, got {p.dtype}")
        self.params = [self.cuda.to_device(np.ascontiguousarray(p.value)) for p in self.nodes]
        self.slots = {k: [self.cuda.to_device(a) for a in v] for k, v in learner.slots.items()}

    def _pairs(self):
        host = [p.value for p in self.nodes]
        dev = list(self.params)
        for k, arrays in self.learner.slots.items():
            host += arrays
            dev += self.slots[k]
        return dev, host

    def upload(self) -> None:
        """Copy the host parameters and slots onto the device (after a checkpoint is loaded)."""
        for d, h in zip(*self._pairs()):
            d.copy_to_device(np.ascontiguousarray(h))

    def download(self) -> None:
        """Copy the device parameters and slots into the host ones, in place (for checkpoints,
        CV on the host and the final model)."""
        for d, h in zip(*self._pairs()):
            h[...] = d.copy_to_host()

    def step(self, grads: Sequence, lr: float, samples: int, scale: float) -> bool:
        """One update from the summed device gradients ``grads`` (float32, not modified).

        scale: the factor giving the rule's gradient (``1 / samples`` for the mean); samples:
        the minibatch's samples. Returns False, changing nothing, when a gradient has a
        non-finite entry (the trainer skips the step).
        """
        lr_ = self.learner
        sumsq, bad = self.kernels.global_sumsq(grads, scale, lr_.clip_value)
        if bad:
            return False
        norm = math.sqrt(sumsq)
        # asrkit.learners.clipping's rule: scale down to clip_norm only when above it
        c = lr_.clip_norm
        nscale = c / (norm + 1e-12) if c > 0 and norm > c else 1.0
        n = max(int(samples), 1)
        prep = {"gscale": scale, "clip_value": lr_.clip_value, "nscale": nscale,
                "l2": lr_.l2_weight(n)}
        trained = self.params[:len(lr_.parameters)]
        lr_._device_rule(self.kernels, trained, grads, self.slots, lr, n, prep)
        lr_.step += 1
        lr_.samples += n
        return True
