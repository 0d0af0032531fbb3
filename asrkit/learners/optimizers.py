"""The learners: momentum SGD (with CNTK's time constants), Adam/AdamW, FSAdaGrad.

Each one is its update rule twice, side by side: on host arrays through
:mod:`asrkit.learners.rules` and on device arrays through ``asrkit.kernels.cuda.update`` (whose
kernels apply the same rules after scaling and clipping the raw gradient).
"""

from __future__ import annotations

from asrkit.learners.base import Learner
from asrkit.learners.rules import (
    adam_step,
    fsadagrad_step,
    momentum_as_time_constant,
    sgd_step,
)


class _Momentum:
    """The momentum of a minibatch of ``samples``: from ``momentum_time_constant`` (samples;
    CNTK's unit) when it is set (> 0), else ``momentum``."""

    momentum: float
    time_constant: float

    def momentum_for(self, samples: int) -> float:
        tc = self.time_constant
        return momentum_as_time_constant(tc, samples) if tc else self.momentum


class SGD(_Momentum, Learner):
    """SGD with momentum: ``v = m v + g; p -= lr v`` (torch.optim.SGD), or CNTK's unit-gain
    form ``v = m v + (1 - m) g``; Nesterov as torch. ``momentum_time_constant`` (samples)
    replaces ``momentum`` by ``exp(-minibatch samples / tc)``."""

    SLOTS = ("v",)

    def __init__(self, parameters, lr, momentum: float = 0.0, nesterov: bool = False,
                 unit_gain: bool = False, momentum_time_constant: float | None = None, **kw):
        super().__init__(parameters, lr, **kw)
        self.momentum, self.nesterov, self.unit_gain = momentum, nesterov, unit_gain
        self.time_constant = momentum_time_constant or 0.0

    def _rule(self, params, grads, lr, samples):
        m = self.momentum_for(samples)
        for p, g, v in zip(params, grads, self.slots["v"]):
            sgd_step(p, g, v, lr, m, self.nesterov, self.unit_gain)

    def _device_rule(self, k, params, grads, slots, lr, samples, prep):
        if self.unit_gain:
            raise NotImplementedError("unit-gain SGD has no device update")
        m = self.momentum_for(samples)
        for p, g, v in zip(params, grads, slots["v"]):
            k.sgd_update(p, g, v, lr, m, self.nesterov, **prep)


class Adam(Learner):
    """Adam (Kingma & Ba) with bias correction, as torch.optim.Adam; ``weight_decay`` makes it
    AdamW (decoupled: ``p -= lr * wd * p`` before the step, as torch.optim.AdamW)."""

    SLOTS = ("m", "v")

    def __init__(self, parameters, lr=1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, **kw):
        super().__init__(parameters, lr, **kw)
        self.beta1, self.beta2 = betas
        self.eps, self.weight_decay = eps, weight_decay

    def _rule(self, params, grads, lr, samples):
        t = self.step + 1
        for p, g, m, v in zip(params, grads, self.slots["m"], self.slots["v"]):
            adam_step(p, g, m, v, t, lr, self.beta1, self.beta2, self.eps, self.weight_decay)

    def _device_rule(self, k, params, grads, slots, lr, samples, prep):
        t = self.step + 1
        for p, g, m, v in zip(params, grads, slots["m"], slots["v"]):
            k.adam_update(p, g, m, v, t, lr, self.beta1, self.beta2, self.eps,
                          self.weight_decay, **prep)


def AdamW(parameters, lr=1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
          weight_decay: float = 0.01, **kw) -> Adam:
    """Adam with decoupled weight decay (default 0.01, as torch.optim.AdamW)."""
    return Adam(parameters, lr, betas, eps, weight_decay, **kw)


class FSAdaGrad(_Momentum, Learner):
    """CNTK's FSAdaGrad ("Frank's fix" of AdaGrad, a precursor of Adam).

    Per entry: ``s = vm s + (1 - vm) g^2`` with variance momentum ``vm = exp(-N / var_tc)``;
    the gradient is scaled by ``min(target * sqrt(c) / sqrt(s), 10)`` where ``c`` tracks the
    samples accumulated into ``s``; then momentum (unit gain by default, as CNTK) and
    ``p -= lr * step``. Defaults follow CNTK: per-sample rates, variance time constant 720000.
    With ``lr_per_sample=False`` the rule runs on the summed gradient with the per-sample rate
    ``lr / N``, so ``lr`` scales the step as for the other learners.
    """

    SLOTS = ("mom", "s")
    SCALARS = ("count",)

    def __init__(self, parameters, lr, momentum: float = 0.9, unit_gain: bool = True,
                 variance_time_constant: float = 720000.0, target_denominator: float = 1.0,
                 momentum_time_constant: float | None = None, lr_per_sample: bool = True,
                 **kw):
        super().__init__(parameters, lr, lr_per_sample=lr_per_sample, **kw)
        self.momentum, self.unit_gain = momentum, unit_gain
        self.var_tc, self.target = variance_time_constant, target_denominator
        self.time_constant = momentum_time_constant or 0.0
        self.count = 0.0  # the smoothed sample count behind the mean squares

    def _rule(self, params, grads, lr, samples):
        m = self.momentum_for(samples)
        if not self.lr_per_sample:  # CNTK's rule wants the summed gradient
            for g in grads:
                g *= g.dtype.type(samples)
            lr = lr / samples
        new = self.count
        for p, g, mom, s in zip(params, grads, self.slots["mom"], self.slots["s"]):
            new = fsadagrad_step(p, g, s, mom, self.count, lr, samples, m, self.var_tc,
                                 self.target, self.unit_gain)
        self.count = new

    def _device_rule(self, k, params, grads, slots, lr, samples, prep):
        m = self.momentum_for(samples)
        gmul = 1.0 if self.lr_per_sample else samples
        new = self.count
        for p, g, mom, s in zip(params, grads, slots["mom"], slots["s"]):
            new = k.fsadagrad_update(p, g, s, mom, self.count, lr / gmul, samples, m,
                                     self.var_tc, self.target, self.unit_gain, gmul=gmul, **prep)
        self.count = new
