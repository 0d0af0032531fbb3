"""Update rules as Learners over ``Parameter`` nodes: momentum SGD (with CNTK's time constants),
Adam/AdamW, FSAdaGrad. The maths is in :mod:`asrkit.learners.rules`; these keep the slots."""

from __future__ import annotations

import numpy as np

from asrkit.learners.base import Learner
from asrkit.learners.rules import (
    adam_step,
    fsadagrad_step,
    momentum_as_time_constant,
    sgd_step,
)


def _slot(state: dict, key: str, p) -> np.ndarray:
    if key not in state:
        state[key] = np.zeros_like(p.value)
    return state[key]


class SGD(Learner):
    """SGD with momentum: ``v = m v + g; p -= lr v`` (torch.optim.SGD), or CNTK's unit-gain
    form ``v = m v + (1 - m) g``; Nesterov as torch. ``momentum_time_constant`` (samples)
    replaces ``momentum`` by ``exp(-minibatch samples / tc)``."""

    def __init__(self, parameters, lr, momentum: float = 0.0, nesterov: bool = False,
                 unit_gain: bool = False, momentum_time_constant: float | None = None, **kw):
        super().__init__(parameters, lr, **kw)
        self.momentum, self.nesterov, self.unit_gain = momentum, nesterov, unit_gain
        self.time_constant = momentum_time_constant

    def _apply(self, p, g, lr, samples, state):
        m = (momentum_as_time_constant(self.time_constant, samples)
             if self.time_constant is not None else self.momentum)
        sgd_step(p.value, g, _slot(state, "v", p) if m else None, lr, m, self.nesterov,
                 self.unit_gain)


class Adam(Learner):
    """Adam (Kingma & Ba) with bias correction, as torch.optim.Adam; ``weight_decay`` makes it
    AdamW (decoupled: ``p -= lr * wd * p`` before the step, as torch.optim.AdamW)."""

    def __init__(self, parameters, lr=1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, **kw):
        super().__init__(parameters, lr, **kw)
        self.beta1, self.beta2 = betas
        self.eps, self.weight_decay = eps, weight_decay

    def _apply(self, p, g, lr, samples, state):
        t = state["t"] = state.get("t", 0) + 1
        adam_step(p.value, g, _slot(state, "m", p), _slot(state, "v", p), t, lr, self.beta1,
                  self.beta2, self.eps, self.weight_decay)


def AdamW(parameters, lr=1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
          weight_decay: float = 0.01, **kw) -> Adam:
    """Adam with decoupled weight decay (default 0.01, as torch.optim.AdamW)."""
    return Adam(parameters, lr, betas, eps, weight_decay, **kw)


class FSAdaGrad(Learner):
    """CNTK's FSAdaGrad ("Frank's fix" of AdaGrad, a precursor of Adam).

    Per entry: ``s = vm s + (1 - vm) g^2`` with variance momentum ``vm = exp(-N / var_tc)``;
    the gradient is scaled by ``min(target * sqrt(c) / sqrt(s), 10)`` where ``c`` tracks the
    samples accumulated into ``s``; then momentum (unit gain by default, as CNTK) and
    ``p -= lr * step``. Defaults follow CNTK: per-sample rates, variance time constant 720000.
    """

    def __init__(self, parameters, lr, momentum: float = 0.9, unit_gain: bool = True,
                 variance_time_constant: float = 720000.0, target_denominator: float = 1.0,
                 momentum_time_constant: float | None = None, lr_per_sample: bool = True,
                 **kw):
        super().__init__(parameters, lr, lr_per_sample=lr_per_sample, **kw)
        self.momentum, self.unit_gain = momentum, unit_gain
        self.var_tc, self.target = variance_time_constant, target_denominator
        self.time_constant = momentum_time_constant

    def _apply(self, p, g, lr, samples, state):
        m = (momentum_as_time_constant(self.time_constant, samples)
             if self.time_constant is not None else self.momentum)
        state["count"] = fsadagrad_step(p.value, g, _slot(state, "s", p), _slot(state, "mom", p),
                                        state.get("count", 0.0), lr, samples, m, self.var_tc,
                                        self.target, self.unit_gain)
