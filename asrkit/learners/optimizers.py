"""Update rules: momentum SGD (with CNTK's time constants), Adam/AdamW, FSAdaGrad."""

from __future__ import annotations

import math

import numpy as np

from asrkit.learners.base import Learner


def momentum_as_time_constant(time_constant: float, samples: int) -> float:
    """CNTK's momentum time constant: the per-minibatch momentum ``exp(-samples / tc)``.

    A time constant of ``tc`` samples means a gradient's weight decays by ``1/e`` after ``tc``
    samples, whatever the minibatch size.
    """
    return math.exp(-samples / time_constant) if time_constant > 0 else 0.0


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
        if m:
            v = state.get("v")
            if v is None:
                v = state["v"] = (1 - m) * g if self.unit_gain else g.copy()
            else:
                v *= p.dtype.type(m)
                v += g * p.dtype.type(1 - m if self.unit_gain else 1.0)
            g = g + p.dtype.type(m) * v if self.nesterov else v
        p.value -= p.dtype.type(lr) * g


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
        if "m" not in state:
            state["m"] = np.zeros_like(p.value)
            state["v"] = np.zeros_like(p.value)
        m, v = state["m"], state["v"]
        if self.weight_decay:
            p.value *= p.dtype.type(1.0 - lr * self.weight_decay)
        m *= self.beta1
        m += (1 - self.beta1) * g
        v *= self.beta2
        v += (1 - self.beta2) * g * g
        mhat = m / (1 - self.beta1 ** t)
        denom = np.sqrt(v / (1 - self.beta2 ** t)) + self.eps
        p.value -= (p.dtype.type(lr) * mhat / denom).astype(p.dtype)


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
        vm = math.exp(-samples / self.var_tc)
        count = state["count"] = vm * state.get("count", 0.0) + (1 - vm) * samples
        if "s" not in state:
            state["s"] = np.zeros_like(p.value)
            state["mom"] = np.zeros_like(p.value)
        s = state["s"]
        s *= p.dtype.type(vm)
        s += p.dtype.type(1 - vm) * g * g
        with np.errstate(divide="ignore"):
            w = np.where(s > 0, self.target * math.sqrt(count) / np.sqrt(s), 1.0)
        g = g * np.minimum(w, 10.0).astype(p.dtype)
        m = (momentum_as_time_constant(self.time_constant, samples)
             if self.time_constant is not None else self.momentum)
        if m > 0:
            mom = state["mom"]
            mom *= p.dtype.type(m)
            mom += g * p.dtype.type(1 - m if self.unit_gain else 1.0)
            g = mom
        p.value -= p.dtype.type(lr) * g
