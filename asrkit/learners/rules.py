"""The update rules, once: pure per-array functions that update a parameter and its slots in place.

The learners of ``asrkit.learners.optimizers`` (``SGD``, ``Adam``, ``FSAdaGrad``) call these
on the host; the device kernels (``asrkit.kernels.cuda.update``) apply the same rules. Every
function takes the parameter ``p``, its gradient ``g`` (not modified) and its slot arrays,
all of one float dtype and one shape, and scalars as Python floats; scalars are cast to the
parameter's dtype, so float32 parameters are updated in float32.
"""

from __future__ import annotations

import math

import numpy as np


def momentum_as_time_constant(time_constant: float, samples: int) -> float:
    """CNTK's momentum time constant: the per-minibatch momentum ``exp(-samples / tc)``.

    A time constant of ``tc`` samples means a gradient's weight decays by ``1/e`` after ``tc``
    samples, whatever the minibatch size. ``tc <= 0`` gives 0 (no momentum).
    """
    return math.exp(-samples / time_constant) if time_constant > 0 else 0.0


def sgd_step(p: np.ndarray, g: np.ndarray, v: np.ndarray | None, lr: float,
             momentum: float = 0.0, nesterov: bool = False, unit_gain: bool = False) -> None:
    """Momentum SGD: ``v = m v + g; p -= lr v`` (torch.optim.SGD), CNTK's unit-gain form
    ``v = m v + (1 - m) g`` with ``unit_gain``, Nesterov as torch (``p -= lr (g + m v)``).

    p, g, v: arrays of one shape; v is the velocity slot (may be None when ``momentum`` is 0).
    """
    dt = p.dtype.type
    if momentum:
        v *= dt(momentum)
        v += g * dt(1.0 - momentum) if unit_gain else g
        g = g + dt(momentum) * v if nesterov else v
    p -= dt(lr) * g


def adam_step(p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, t: int, lr: float,
              beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
              weight_decay: float = 0.0) -> None:
    """Adam with bias correction in torch.optim.Adam's form; ``weight_decay`` is AdamW's
    decoupled decay (``p -= lr wd p`` before the step). ``t``: this update's 1-based count.

    p, g, m, v: arrays of one shape; m and v are the first and second moment slots.
    """
    if weight_decay:
        p -= lr * weight_decay * p
    m *= beta1
    m += (1 - beta1) * g
    v *= beta2
    v += (1 - beta2) * g * g
    bc1 = 1 - beta1 ** t
    bc2 = math.sqrt(1 - beta2 ** t)
    p -= (lr / bc1) * m / (np.sqrt(v) / bc2 + eps)


def fsadagrad_step(p: np.ndarray, g: np.ndarray, s: np.ndarray, mom: np.ndarray, count: float,
                   lr: float, samples: int, momentum: float = 0.9,
                   variance_time_constant: float = 720000.0, target_denominator: float = 1.0,
                   unit_gain: bool = True) -> float:
    """CNTK's FSAdaGrad on one parameter; returns the new smoothed sample count.

    ``g`` is the minibatch's summed gradient over ``samples`` samples and ``lr`` a per-sample
    rate (CNTK's units). ``s = vm s + (1 - vm) g^2`` with ``vm = exp(-samples / var_tc)``;
    ``count = vm count + (1 - vm) samples`` tracks the samples in ``s``; the gradient is scaled
    per entry by ``min(target * sqrt(count) / sqrt(s), 10)``, then momentum (unit gain by
    default, as CNTK) and ``p -= lr * step``. p, g, s (variance slot), mom (momentum slot):
    arrays of one shape; ``count``: the previous smoothed count (0 at the start).
    """
    dt = p.dtype.type
    vm = math.exp(-samples / variance_time_constant)
    count = vm * count + (1 - vm) * samples
    s *= dt(vm)
    s += dt(1 - vm) * g * g
    with np.errstate(divide="ignore"):
        w = np.where(s > 0, target_denominator * math.sqrt(count) / np.sqrt(s), 1.0)
    g = g * np.minimum(w, 10.0).astype(p.dtype)
    if momentum > 0:
        mom *= dt(momentum)
        mom += g * dt(1 - momentum if unit_gain else 1.0)
        g = mom
    p -= dt(lr) * g
    return count
