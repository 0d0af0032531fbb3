"""The Trainer's learner on the GPU: parameters and slots stay device arrays for the whole run.

``DeviceOptimizer`` mirrors what the Trainer does on the host for one rank (scale the summed
gradient by ``1 / frames``, skip non-finite steps, clip by value and global norm, then
``Optimizer.step``) with the fused kernels of ``asrkit.kernels.cuda.update``: the gradients never
leave the device, and one 16-byte reduction result (the global sum of squares and the count of
non-finite entries) comes back per step. The host ``Optimizer`` keeps the counters (its
``count`` and FSAdaGrad's smoothed frame count, which are scalars) and receives the slot arrays
on ``download``, so checkpoints keep their layout.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from asrkit.training.optim import Optimizer


class DeviceOptimizer:
    """Device copies of the parameters and of ``optimizer``'s slots, and the update on them.

    optimizer: the Trainer's host Optimizer (its config, counters and host slots);
    params: the host parameter arrays (float32), uploaded here. ``params``/``slots``/``slots2``
    are lists of device arrays parallel to the host ones (``slots2`` without FSAdaGrad's
    trailing host count).
    """

    def __init__(self, optimizer: Optimizer, params: Sequence[np.ndarray]):
        from asrkit.kernels._device import require_cuda

        self.cuda = require_cuda()
        from asrkit.kernels.cuda import update

        self.kernels = update
        self.optimizer = optimizer
        for p in params:
            if p.dtype != np.float32:
                raise ValueError(f"device training needs float32 parameters, got {p.dtype}")
        n = len(params)
        self.params = [self.cuda.to_device(np.ascontiguousarray(p)) for p in params]
        self.slots = [self.cuda.to_device(s) for s in optimizer.slots]
        self.slots2 = [self.cuda.to_device(s) for s in optimizer.slots2[:n]]

    def upload(self, params: Sequence[np.ndarray]) -> None:
        """Copy host parameters and the host optimizer's slots onto the device (after a
        checkpoint is loaded)."""
        for d, h in zip(self.params, params):
            d.copy_to_device(np.ascontiguousarray(h))
        for d, h in zip(self.slots + self.slots2, self.optimizer.slots + self.optimizer.slots2):
            d.copy_to_device(np.ascontiguousarray(h))

    def download(self, params: Sequence[np.ndarray]) -> None:
        """Copy the device parameters into the host arrays ``params`` and the device slots into
        the host optimizer's, in place (for checkpoints, CV on the host and the final model)."""
        for d, h in zip(self.params + self.slots + self.slots2,
                        list(params) + self.optimizer.slots + self.optimizer.slots2):
            h[...] = d.copy_to_host()

    def step(self, grads: Sequence, lr: float, frames: int, scale: float) -> bool:
        """One update from the summed device gradients ``grads`` (float32, not modified).

        scale: the factor giving the per-frame mean gradient (``1 / frames``); frames: the
        minibatch's frames (time constants, FSAdaGrad). Returns False, changing nothing, when
        a gradient has a non-finite entry (the Trainer skips the step).
        """
        opt, c, k = self.optimizer, self.optimizer.config, self.kernels
        sumsq, bad = k.global_sumsq(grads, scale, c.clip_value)
        if bad:
            return False
        norm = math.sqrt(sumsq)
        # asrkit.learners.clipping's rule: scale down to clip_norm only when above it
        nscale = c.clip_norm / (norm + 1e-12) if c.clip_norm > 0 and norm > c.clip_norm else 1.0
        opt.count += 1
        prep = {"gscale": scale, "clip_value": c.clip_value, "nscale": nscale,
                "l2": c.l2 if c.type != "adamw" else 0.0}
        if c.type == "sgd":
            mu = opt.momentum(frames)
            for p, g, v in zip(self.params, grads, self.slots):
                k.sgd_update(p, g, v, lr, mu, c.nesterov, **prep)
        elif c.type == "fsadagrad":
            n, mu, smoothed = max(int(frames), 1), opt.momentum(frames), opt.slots2[-1]
            count = new = float(smoothed[0])
            for p, g, mom, s in zip(self.params, grads, self.slots, self.slots2):
                new = k.fsadagrad_update(p, g, s, mom, count, lr / n, n, mu,
                                         c.variance_time_constant, c.target_denominator,
                                         gmul=n, **prep)
            smoothed[0] = new
        else:
            wd = c.l2 if c.type == "adamw" else 0.0
            for p, g, m, v in zip(self.params, grads, self.slots, self.slots2):
                k.adam_update(p, g, m, v, opt.count, lr, c.beta1, c.beta2, c.eps, wd, **prep)
        return True
