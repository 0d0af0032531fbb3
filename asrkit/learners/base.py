"""The Learner base: schedule, learning-rate units, clipping, L2, then a per-type update rule.

Gradients given to :meth:`Learner.update` are sums over the minibatch (the gradient of the summed
criterion, as CNTK's). With ``lr_per_sample=False`` (default) the rule sees the mean gradient
(sum / samples), so rates mean what they mean in PyTorch; with ``lr_per_sample=True`` it sees the
sum, i.e. CNTK's per-sample learning rates. Clipping comes first (CNTK's per-sample threshold,
then element-wise by value and the global norm, as ``torch.nn.utils.clip_grad_norm_`` before
``optimizer.step()``), then L2 (``g += l2 * p``, torch's ``weight_decay``), then the rule.

A trainer that prepares the gradients itself (averaging over MPI ranks, 1-bit SGD) calls
:meth:`Learner.apply` with the prepared ones. The state of a learner is its ``state_dict``:
counters, the schedule's state, the slot arrays (``slots[name][i]`` for ``parameters[i]``, e.g.
Adam's ``m`` and ``v``) and the rule's scalars; :class:`asrkit.learners.DeviceLearner` runs the
same rules on the GPU with the update kernels.
"""

from __future__ import annotations

import numpy as np

from asrkit.learners.clipping import clip_gradients, clip_per_sample
from asrkit.learners.schedules import as_schedule


class Learner:
    """Updates ``parameters`` (trainable ``Parameter`` nodes, in place) from gradients.

    Subclasses name their per-parameter slot arrays in ``SLOTS`` and implement ``_rule`` (host
    arrays) and ``_device_rule`` (the CUDA kernels of ``asrkit.kernels.cuda.update``).
    ``SCALARS`` names the rule's scalar state (attributes). lr: a number or a Schedule;
    clip_norm / clip_value: 0 turns off.
    """

    SLOTS: tuple[str, ...] = ()
    SCALARS: tuple[str, ...] = ()

    def __init__(self, parameters, lr, *, lr_per_sample: bool = False, l2: float = 0.0,
                 clip_norm: float | None = 0.0, clip_value: float = 0.0,
                 clip_per_sample: float | None = None, clip_truncation: bool = True):
        self.parameters = [p for p in parameters if getattr(p, "trainable", True)]
        if not self.parameters:
            raise ValueError("a learner needs at least one trainable parameter")
        self.schedule = as_schedule(lr)
        self.lr_per_sample = lr_per_sample
        self.l2 = float(l2)
        self.clip_norm, self.clip_value = float(clip_norm or 0.0), float(clip_value or 0.0)
        self.clip_per_sample, self.clip_truncation = clip_per_sample, clip_truncation
        self.step = 0
        self.samples = 0
        self.epoch = 0  # epochs completed (epoch-wise schedules); set by the trainer
        self.slots = {name: [np.zeros_like(p.value) for p in self.parameters]
                      for name in self.SLOTS}

    @property
    def learning_rate(self) -> float:
        """The rate the next update will use."""
        return self.schedule(self.step, self.samples, self.epoch)

    def update(self, grads: dict, sample_count: int = 1) -> float:
        """Clip and apply one update from ``{parameter: summed gradient}`` (not modified) over
        ``sample_count`` samples; returns the rate used."""
        N = max(int(sample_count), 1)
        gs = []
        for p in self.parameters:
            g = np.array(grads[p], dtype=p.dtype)
            if self.clip_per_sample:
                g = clip_per_sample(g, self.clip_per_sample, N, self.clip_truncation)
            if not self.lr_per_sample:
                g /= p.dtype.type(N)
            gs.append(g)
        clip_gradients(gs, self.clip_norm, self.clip_value)
        lr = self.learning_rate
        self.apply(gs, N, lr)
        return lr

    def l2_weight(self, samples: int) -> float:
        """The L2 factor on this rule's gradient (per sample with per-sample rates)."""
        return self.l2 * (max(int(samples), 1) if self.lr_per_sample else 1)

    def apply(self, grads: list, samples: int, lr: float) -> None:
        """One update with rate ``lr`` from prepared gradients, one per parameter in order
        (modified): the mean gradient (the sum with ``lr_per_sample``), already clipped.
        ``samples``: the minibatch's samples (time constants, FSAdaGrad)."""
        N = max(int(samples), 1)
        if self.l2:
            w = self.l2_weight(N)
            for p, g in zip(self.parameters, grads):
                g += p.dtype.type(w) * p.value
        self._rule([p.value for p in self.parameters], grads, lr, N)
        self.step += 1
        self.samples += N

    def _rule(self, params: list, grads: list, lr: float, samples: int) -> None:
        raise NotImplementedError

    def _device_rule(self, kernels, params: list, grads: list, slots: dict, lr: float,
                     samples: int, prep: dict) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no device update")

    def slot_arrays(self, prefix: str = "") -> dict[str, np.ndarray]:
        """The slots as file members ``{prefix<slot>/<parameter name>: array}``."""
        return {f"{prefix}{k}/{p.name}": a for k, arrays in self.slots.items()
                for p, a in zip(self.parameters, arrays)}

    def slots_from(self, members: dict, prefix: str = "") -> dict[str, list]:
        """Inverse of :meth:`slot_arrays`: ``{slot: [array per parameter]}`` for
        :meth:`load_state_dict`; raises KeyError naming a missing member."""
        return {k: [members[f"{prefix}{k}/{p.name}"] for p in self.parameters]
                for k in self.slots}

    def state_dict(self) -> dict:
        """Counters, schedule state, slot copies (``{name: [array per parameter]}``), scalars."""
        return {"step": self.step, "samples": self.samples,
                "schedule": self.schedule.state_dict(),
                "slots": {k: [a.copy() for a in v] for k, v in self.slots.items()},
                "scalars": {k: getattr(self, k) for k in self.SCALARS}}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` (parameters in the same order); slots are copied into the
        existing arrays."""
        self.step, self.samples = int(state["step"]), int(state["samples"])
        self.schedule.load_state_dict(state.get("schedule", {}))
        for name, arrays in self.slots.items():
            for dst, src in zip(arrays, state["slots"][name]):
                dst[...] = src
        scalars = state.get("scalars", {})
        for k in self.SCALARS:
            setattr(self, k, float(scalars.get(k, 0.0)))
