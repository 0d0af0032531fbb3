"""The Trainer: a criterion, its learners, and asrkit's one epoch loop.

As CNTK's Trainer: the criterion is per sample (CTC cost per sequence ``[B]``, cross-entropy per
frame ``[T, B]``) and is summed over the minibatch; the number of samples is the number of real
entries, so per-sample learning rates and time constants mean what they say. The epoch loop
(:meth:`Trainer.train`) runs over a reader (``plan(epoch)`` -> the epoch's minibatches,
``load(item, epoch, i)`` -> a batch): start (resume) -> per epoch: train_step per minibatch (log
records, checkpoints, max_steps) -> evaluate (CV) -> newbob -> end_epoch -> checkpoint -> finish.
The acoustic ``asrkit.training.Trainer`` and the LSTM LM's ``asrkit.nnlm.training.LmTrainer``
are configurations of it: they override those hooks.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

import asrkit.ops as O
from asrkit.graph import Sequence, evaluate, forward_backward
from asrkit.utils import progress


def _count(value) -> int:
    if isinstance(value, Sequence):
        per = int(np.prod(value.data.shape[2:])) if value.data.ndim > 2 else 1
        return int(value.lengths.sum()) * per
    return int(np.size(value))


class Trainer:
    """Train ``criterion`` with ``learners`` (each owns a subset of the parameters).

    criterion: per-sample loss node (or a scalar); metric: optional node evaluated alongside
    (e.g. frame error). ``recompute=True`` trades compute for memory in the backward pass.
    The loop's: reader, cv_reader (None: no CV), epochs, log (takes a message line), log_path
    (JSON lines of train records; None: none), log_every / checkpoint_every / max_steps (0: off).
    """

    def __init__(self, criterion, learners, metric=None, recompute: bool = False,
                 device: str = "cpu", *, reader=None, cv_reader=None, epochs: int = 1,
                 log=None, log_path: str | None = None, log_every: int = 0,
                 checkpoint_every: int = 0, max_steps: int = 0):
        self.criterion = criterion
        self.root = criterion if not criterion.dynamic_axes and criterion.shape == () \
            else O.sum_all(criterion)
        self.learners = list(learners) if isinstance(learners, (list, tuple)) else [learners]
        self.learner = self.learners[0]
        self.metric = metric
        self.recompute, self.device = recompute, device
        self.parameters = [p for lr in self.learners for p in lr.parameters]
        self.reader, self.cv_reader, self.epochs = reader, cv_reader, epochs
        self._log = log or (lambda message: None)
        self.log_path, self.log_every = log_path, log_every
        self.checkpoint_every, self.max_steps = checkpoint_every, max_steps
        self.is_main = True  # this process writes the log records
        self.step = self.epoch = self.batch_index = 0  # steps taken, epochs done, next minibatch
        self.skipped_steps = self.bytes_sent = 0
        self.epoch_loss, self.epoch_frames, self.epoch_start = 0.0, 0, 0.0  # this epoch's
        self._window = {"loss": 0.0, "frames": 0, "time": 0.0, "steps": 0}

    # -- one minibatch ----------------------------------------------------------------------
    def _outputs(self):
        outs = [self.criterion] if self.criterion is not self.root else []
        return outs + ([self.metric] if self.metric is not None else [])

    def train_minibatch(self, feeds: dict, seed: int | None = None) -> dict:
        """Forward, backward and update on one minibatch (dropout seeded by the step).

        Returns ``{"loss": summed criterion, "samples": N, "loss_per_sample", "metric"}``.
        """
        seed = self.step if seed is None else seed
        values, grads = forward_backward(self.root, self.parameters, feeds,
                                         outputs=self._outputs(), train=True, seed=seed,
                                         device=self.device, recompute=self.recompute)
        loss = float(values[0])
        samples = _count(values[1]) if self.criterion is not self.root else 1
        if not np.isfinite(loss):
            raise FloatingPointError(f"minibatch {self.step}: the criterion is {loss}")
        for learner in self.learners:
            learner.update({p: grads[p] for p in learner.parameters}, samples)
        self.step += 1
        return self._summary(loss, samples, values[-1] if self.metric is not None else None)

    def test_minibatch(self, feeds: dict) -> dict:
        """Evaluate criterion (and metric) in evaluation mode; no update."""
        outs = [self.root] + self._outputs()
        values = evaluate(outs, feeds, train=False, device=self.device)
        samples = _count(values[1]) if self.criterion is not self.root else 1
        return self._summary(float(values[0]), samples,
                             values[-1] if self.metric is not None else None)

    @staticmethod
    def _summary(loss, samples, metric):
        out = {"loss": loss, "samples": samples, "loss_per_sample": loss / max(samples, 1)}
        if metric is not None:
            m = metric.data if isinstance(metric, Sequence) else np.asarray(metric)
            out["metric"] = float(np.sum(m))
        return out

    # -- the hooks of a configuration (defaults: one process, no CV, no checkpoints) -------
    def train_step(self, batch) -> dict:
        """One step on a batch (here the feed dict): ``{"loss": summed, "frames": samples}``."""
        r = self.train_minibatch(batch)
        return {"loss": r["loss"], "frames": r["samples"]}

    def steps_in(self, plan) -> int:
        """Steps of an epoch (data parallelism: the most of any rank's plan)."""
        return len(plan)

    def evaluate(self) -> dict:
        """The CV of ``cv_reader``: ``{"loss": per sample, ...}`` (newbob's input)."""
        raise NotImplementedError

    def start(self, resume: bool) -> None:
        """Before the first epoch: restore the state (``resume``) or begin afresh."""

    def end_epoch(self, cv: dict | None, keep: bool, lowered: bool) -> None:
        """After CV and newbob (``keep``: go on; ``lowered``: a lower rate), before the count."""

    def save_checkpoint(self):
        """Write the state a resumed run needs."""

    def finish(self, stopped: bool):
        """The value of :meth:`train` (``stopped``: by max_steps, resumable)."""

    # -- the loop ---------------------------------------------------------------------------
    def _record(self, record: dict) -> None:
        if self.log_path is None or not self.is_main:
            return
        os.makedirs(os.path.dirname(self.log_path) or ".", exist_ok=True)
        with open(self.log_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    def _lr(self) -> float:
        """The scheduled rate of global step ``self.step`` (1-based; skipped steps count)."""
        return self.learner.schedule(self.step - 1, self.learner.samples, self.epoch)

    def _flush_window(self) -> None:
        w = self._window
        if not w["steps"]:
            return
        self._record({"step": self.step, "kind": "train", "epoch": self.epoch + 1,
                      "loss": w["loss"] / max(w["frames"], 1),
                      "lr": self._lr() if self.step else 0.0,
                      "frames_per_s": w["frames"] / max(w["time"], 1e-9),
                      "bytes_per_step": self.bytes_sent, "skipped_steps": self.skipped_steps})
        self._window = {"loss": 0.0, "frames": 0, "time": 0.0, "steps": 0}

    def train(self, resume: bool = False):
        """Run (or continue, with ``resume``) the epochs; returns :meth:`finish`'s value.

        Stops early after ``max_steps`` steps (leaving the run resumable) or when the schedule
        (newbob) says so.
        """
        self.start(resume)
        stopped = False
        while self.epoch < self.epochs:
            if not self._train_epoch():
                stopped = True
                break
            cv = self.evaluate() if self.cv_reader is not None else None
            schedule = self.learner.schedule
            scale = getattr(schedule, "newbob_scale", 1.0)
            keep = schedule.epoch_end(None if cv is None else cv["loss"])
            self.end_epoch(cv, keep, getattr(schedule, "newbob_scale", 1.0) < scale)
            self.epoch += 1
            self.batch_index = 0
            self.save_checkpoint()
            if not keep:
                break
            if self.max_steps and self.step >= self.max_steps and self.epoch < self.epochs:
                self._log(f"stopping after step {self.step} (max_steps)")
                stopped = True
                break
        return self.finish(stopped)

    def _train_epoch(self) -> bool:
        """Train the rest of the current epoch; False when max_steps stopped it midway."""
        plan = self.reader.plan(self.epoch)
        n_steps = self.steps_in(plan)
        if self.batch_index == 0:
            self.epoch_loss, self.epoch_frames, self.epoch_start = 0.0, 0, time.perf_counter()
        bar = progress(total=n_steps, desc=f"epoch {self.epoch + 1}", unit="mb",
                       disable=None if self.is_main else True)
        bar.update(self.batch_index)
        try:
            while self.batch_index < n_steps:
                i = self.batch_index
                t0 = time.perf_counter()
                res = self.train_step(self.reader.load(plan[i] if i < len(plan) else [],
                                                       self.epoch, i))
                self.batch_index += 1
                w = self._window
                w["loss"] += res["loss"]
                w["frames"] += res["frames"]
                w["time"] += time.perf_counter() - t0
                w["steps"] += 1
                self.epoch_loss += res["loss"]
                self.epoch_frames += res["frames"]
                bar.update(1)
                if self.log_every and self.step % self.log_every == 0:
                    self._flush_window()
                if self.batch_index >= n_steps:
                    break  # the epoch-end checkpoint follows
                if self.checkpoint_every and self.step % self.checkpoint_every == 0:
                    self._flush_window()
                    self.save_checkpoint()
                elif self.max_steps and self.step >= self.max_steps:
                    self.save_checkpoint()
                if self.max_steps and self.step >= self.max_steps:
                    self._flush_window()
                    self._log(f"stopping after step {self.step} (max_steps)")
                    return False
        finally:
            bar.close()
        self._flush_window()
        return True
