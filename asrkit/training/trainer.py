"""The Trainer: epochs over the reader, CV each epoch, logs, checkpoints, exact resume, MPI:
the acoustic configuration of ``asrkit.learners.Trainer``, the one epoch loop.

One step (every rank alike)::

    forward + backward of the summed criterion on this rank's minibatch   (asrkit.graph;
                                         CTC per sequence, or cross-entropy per frame)
    NaN/inf anywhere on any rank -> skip the step everywhere, count it
    allreduce: gradients summed over ranks and divided by the global frame count
    1bit:      the same average through 1-bit quantisation with error feedback
    bmuf:      each rank steps on its own gradient; models averaged every block_size steps
    clip (global norm / value), learner update with the scheduled learning rate

The objective is the criterion per input frame of the (global) minibatch, so N ranks with
``minibatch = "global"`` take exactly the steps one rank takes on the union of their minibatches.
Only rank 0 writes the log (``OUT/train_log.jsonl``: one JSON record per line with ``step``,
``kind`` "train"/"cv", ``loss`` per frame, ``lr``, ``frames_per_s``, ``cv_error``), checkpoints
and models. Resuming restores parameters, learner slots, schedule, 1-bit residuals, block
momentum, counters and the reader position; everything random is seeded by the step, so a
resumed single-rank CPU run is bit-identical to an uninterrupted one.

The learner is ``asrkit.learners.build_learner`` of the ``[learner]`` section; this loop prepares
the gradients (the MPI modes) and calls its ``apply``. With ``[train] device = "cuda"`` on one
rank (``allreduce`` mode) the parameters and the learner's slots live on the GPU for the whole
run (``asrkit.learners.DeviceLearner``): the graph reads the device parameters, the gradients
stay on the device, and clipping and the update run as fused kernels; only the loss and one
16-byte reduction come back per step. ``pull_parameters`` brings them to the host, which
checkpoints, host-side CV and the final model do; a checkpoint holds host arrays as on the CPU,
and loading one uploads it. Several ranks, 1-bit SGD and BMUF exchange
gradients or models through the host, so there the update stays on the host.
"""

from __future__ import annotations

import functools
import json
import math
import os
import sys

import numpy as np

from asrkit.config.acoustic_net import output_lengths, without_training_keys
from asrkit.distributed import BlockMomentum, Communicator, OneBitAggregator, get_communicator
from asrkit.graph import Executor, evaluate, forward_backward, get_plan
from asrkit.io.tokens import TokenTable
from asrkit.learners import DeviceLearner, build_learner, clip_gradients
from asrkit.learners.trainer import Trainer as EpochLoop
from asrkit.models import Model, save
from asrkit.training.checkpoint import (
    flatten,
    latest_checkpoint,
    read_checkpoint,
    unflatten,
    write_checkpoint,
)
from asrkit.training.config import TrainConfig
from asrkit.training.criteria import CriterionError, build_criterion, build_model
from asrkit.training.reader import Batch, Reader
from asrkit.utils import atomic_write_text


class TrainingError(RuntimeError):
    """A run that cannot start or continue (bad resume state, no data)."""


def _seed(*parts: int) -> int:
    return int(np.random.SeedSequence([int(p) & 0xFFFFFFFF for p in parts]).generate_state(1)[0])


def initial_parameters(path: str, network: dict, input_dim: int, tokens: list[str],
                       blank: int, target_shapes: dict | None = None,
                       transducer: bool = False) -> tuple[dict, bool]:
    """``({name: array}, complete)`` of the model file ``path`` (``[train] init``).

    A model of the run's own kind (CTC/frame-level or transducer) must have the run's network
    (its seed and layers' dropout may differ: ``without_training_keys``), input dimension,
    tokens and blank, and gives every parameter (``complete``). A CTC model starting a
    transducer run (or the reverse) gives its encoder, as icefall starts a transducer from a
    CTC model: every parameter but the output layer (and the prediction network and joiner),
    each of which must exist in ``target_shapes`` (``{name: shape}`` of the run's model) with
    the same shape; the rest starts fresh (``complete`` False). Raises TrainingError naming the
    file and what differs (the parameter, with both shapes).
    """
    from asrkit.models import load

    try:
        src = load(path)
    except (OSError, ValueError) as e:
        raise TrainingError(f"[train] init: {e}") from e
    if hasattr(src, "transducer") != transducer:
        return _encoder_parameters(path, src, target_shapes or {}), False
    for what, theirs, ours in (("[network]", without_training_keys(src.network),
                                without_training_keys(network)),
                               ("input dimension", src.input_dim, input_dim),
                               ("tokens", list(src.tokens), list(tokens)),
                               ("blank", src.blank, blank)):
        if theirs != ours:
            raise TrainingError(f"[train] init: {path}: its {what} differs from this run's "
                                "(init needs the same network, features and tokens)")
    return src.state_dict(), True


_NOT_ENCODER = ("output.", "predictor.", "joiner.")


def _encoder_parameters(path: str, src, target_shapes: dict) -> dict:
    """The encoder parameters of ``src`` (all but the output layer, prediction network and
    joiner), checked against ``target_shapes``; TrainingError naming the first that differs."""
    kind = "transducer" if hasattr(src, "transducer") else "CTC"
    values = {}
    for name, value in src.state_dict().items():
        if name.startswith(_NOT_ENCODER):
            continue
        if name not in target_shapes:
            raise TrainingError(f"[train] init: {path}: parameter '{name}' of the {kind} model "
                                "has no counterpart in this run's [network] (its encoder layers "
                                "must be this run's)")
        if tuple(value.shape) != tuple(target_shapes[name]):
            raise TrainingError(f"[train] init: {path}: parameter '{name}' is "
                                f"{list(value.shape)} in the {kind} model, "
                                f"{list(target_shapes[name])} in this run's [network]")
        values[name] = value
    if not values:
        raise TrainingError(f"[train] init: {path}: the {kind} model has no encoder parameters "
                            "to start from")
    return values


class Trainer(EpochLoop):
    """Trains a Model on a TrainConfig: the acoustic configuration of the epoch loop.

    config: the parsed config; comm: a communicator (default ``get_communicator()``: MPI under
    mpiexec, else one local rank); model/reader/cv_reader: built from the config when None;
    log: a function taking a message line (default: stderr, rank 0 only).
    """

    def __init__(self, config: TrainConfig, *, comm: Communicator | None = None,
                 model: Model | None = None, reader: Reader | None = None,
                 cv_reader: Reader | None = None, log=None):
        self.config = config
        self.comm = comm or get_communicator()
        self.out_dir = config.train.out_dir
        self._log = log if log is not None else self._default_log
        rc, dist = config.reader, config.distributed
        N = self.comm.size
        mb = rc.minibatch_frames // N if dist.minibatch == "global" else rc.minibatch_frames
        out_len = functools.partial(output_lengths, config.network)
        if reader is None:
            tokens = TokenTable.read(rc.tokens, rc.unit)
            reader = Reader(rc, training=True, rank=self.comm.rank, size=N,
                            minibatch_frames=max(mb, 1), output_lengths=out_len, tokens=tokens,
                            log=self._log)
        self.reader = reader
        if cv_reader is None and rc.cv_data_dir:
            cv_reader = Reader(rc, rc.cv_data_dir, training=False, rank=self.comm.rank, size=N,
                               minibatch_frames=max(mb, 1), output_lengths=out_len,
                               tokens=reader.tokens, log=self._log)
        self.cv_reader = cv_reader
        blank = config.criterion.blank if config.criterion.blank >= 0 else reader.tokens.blank
        if model is None:
            model = self._build_model(blank)
        if model.input_dim != reader.dim:
            raise TrainingError(f"the model takes {model.input_dim}-dim features; "
                                f"{reader.data_dir} has {reader.dim}")
        self.model = model
        self.param_nodes = list(model.params.values())
        self.params = [p.value for p in self.param_nodes]
        try:
            criterion = build_criterion(config.criterion, model, reader, config.path)
        except CriterionError as e:
            raise TrainingError(str(e)) from e
        self.labels, self.costs, self.errors = criterion.labels, criterion.costs, criterion.errors
        scale = {"none": 1.0, "linear": float(N), "sqrt": math.sqrt(N)}[dist.lr_scale]
        tc = config.train
        # the learner's (trainable) parameters, self.parameters: the gradients are taken and
        # exchanged for these
        super().__init__(self.costs, build_learner(config.learner, self.param_nodes, scale),
                         device=tc.device, reader=reader, cv_reader=cv_reader, epochs=tc.epochs,
                         log=self._log, log_path=os.path.join(self.out_dir, "train_log.jsonl"),
                         log_every=tc.log_every, checkpoint_every=tc.checkpoint_every,
                         max_steps=tc.max_steps)
        self.is_main = self.comm.is_main
        self.onebit = OneBitAggregator(self.comm, dist.onebit_min_size) \
            if dist.mode == "1bit" else None
        if N > 1 and dist.mode != "bmuf":  # BlockMomentum does this itself
            for p in self.params:
                p[...] = self.comm.bcast(p if self.comm.is_main else None)
        self.bmuf = None
        if dist.mode == "bmuf":
            self.bmuf = BlockMomentum(self.comm, self.params, dist.block_size,
                                      None if dist.block_momentum < 0 else dist.block_momentum,
                                      dist.block_lr)
        self.device_learner = None
        if tc.device == "cuda" and N == 1 and dist.mode == "allreduce":
            trained = {id(p) for p in self.parameters}
            frozen = [p for p in self.param_nodes if id(p) not in trained]
            self.device_learner = DeviceLearner(self.learner, frozen)

    def _build_model(self, blank: int):
        """The run's model, started from ``[train] init`` when it names a file: all of it, or
        (from a model of the other kind) its encoder, the rest freshly initialised."""
        config, rc, reader = self.config, self.config.reader, self.reader

        def build(params=None):
            return build_model(config.criterion, config.network, reader.dim,
                               reader.tokens.symbols, blank,
                               reader={**rc.normalization(), "unit": rc.unit}, params=params)

        if not config.train.init:
            return build()
        transducer = config.criterion.type == "transducer"
        fresh = build()
        shapes = {k: tuple(p.shape) for k, p in fresh.params.items()}
        values, complete = initial_parameters(config.train.init, config.network, reader.dim,
                                              reader.tokens.symbols, blank, shapes, transducer)
        if complete:
            return build(values)
        fresh.load_state_dict(values, strict=False)
        self._log(f"[train] init: {len(values)} encoder parameters from {config.train.init}; "
                  f"{len(shapes) - len(values)} start fresh (output layer"
                  f"{', prediction network, joiner' if transducer else ''})")
        return fresh

    # -- logging --------------------------------------------------------------------------
    def _default_log(self, message: str) -> None:
        if self.comm.is_main:
            print(message, file=sys.stderr, flush=True)

    # -- one step -------------------------------------------------------------------------
    def _feeds(self, batch: Batch) -> dict:
        return {self.model.feats: (batch.feats, batch.lengths),
                self.labels: (np.ascontiguousarray(batch.targets.T), batch.target_lengths)}

    def _graph_params(self) -> dict | None:
        """``{Parameter: device array}`` when the parameters live on the device, else None."""
        dev = self.device_learner
        return None if dev is None else dict(zip(dev.nodes, dev.params))

    def pull_parameters(self) -> list[np.ndarray]:
        """Copy the device parameters and learner slots into the host arrays (``params``, the
        model's Parameter values, the learner's slots); returns ``params``. A no-op when the
        update runs on the host."""
        if self.device_learner is not None:
            self.device_learner.download()
        return self.params

    def _local_gradients(self, batch: Batch) -> tuple[float, list]:
        """The loss and the summed gradients of this rank's ``batch``: host arrays, or device
        arrays when the update runs on the device (``batch`` must then be non-empty)."""
        nodes = self.parameters
        if batch.size == 0:
            return 0.0, [np.zeros_like(p.value) for p in nodes]
        seed = _seed(self.config.train.seed, self.step, self.comm.rank)
        device = self.config.train.device
        if self.device_learner is None:
            values, grads = forward_backward(self.root, nodes, self._feeds(batch), train=True,
                                             seed=seed, device=device)
            return float(np.asarray(values[0])), [grads[p] for p in nodes]
        # forward_backward would bring the gradients to the host: run the plan directly
        ex = Executor(get_plan([self.root], wrt=nodes, root=self.root), device)
        res = ex.run(self._feeds(batch), train=True, seed=seed, params=self._graph_params())
        loss = float(np.asarray(ex.backend.to_host(res.outputs[0])))
        return loss, [res.grads[p] for p in nodes]

    def _device_step(self, batch: Batch, lr: float) -> dict:
        """``train_step`` on one rank with the update on the device."""
        loss, grads = self._local_gradients(batch) if batch.size else (0.0, [])
        ok = bool(np.isfinite(loss))
        applied = False
        if ok and batch.frames > 0:
            ok = applied = self.device_learner.step(grads, lr, batch.frames, 1.0 / batch.frames)
        if not ok:
            self.skipped_steps += 1
            self._log(f"step {self.step}: non-finite loss or gradient; the minibatch is skipped "
                      f"({self.skipped_steps} so far)")
        self.bytes_sent = 0
        return {"loss": loss if ok else 0.0, "frames": int(batch.frames), "applied": applied,
                "lr": lr}

    def train_step(self, batch: Batch) -> dict:
        """Run one step on this rank's ``batch``; returns ``{loss, frames, applied, lr}`` with
        the loss summed over ranks."""
        self.step += 1
        lr = self._lr()
        if self.device_learner is not None:
            return self._device_step(batch, lr)
        loss, grads = self._local_gradients(batch)
        grads = [np.ascontiguousarray(g, np.float32) for g in grads]
        finite = np.isfinite(loss) and all(np.isfinite(g).all() for g in grads)
        mode = self.config.distributed.mode
        before = self.comm.bytes_sent
        # one small message carries the loss, the frames and a non-finite flag (as all_finite)
        stats = np.array([loss if finite else 0.0, batch.frames, 0.0 if finite else 1.0])
        if mode == "allreduce":
            # gradients travel with the stats; a NaN anywhere is discarded by every rank below
            self.comm.allreduce_(grads + [stats], op="sum")
        else:
            self.comm.allreduce_([stats], op="sum")  # 1-bit must not quantise a NaN
        total_loss, frames, ok = float(stats[0]), int(stats[1]), stats[2] == 0
        applied = ok and frames > 0
        if applied:
            if mode == "bmuf":
                scale = 1.0 / batch.frames if batch.frames else 0.0
            elif mode == "1bit":
                scale = self.comm.size / frames
            else:
                scale = 1.0 / frames
            for g in grads:
                g *= np.float32(scale)
            if self.onebit is not None:
                self.onebit.aggregate_(grads)
            clip_gradients(grads, self.learner.clip_norm, self.learner.clip_value)
            if mode != "bmuf" or batch.frames:
                self.learner.apply(grads, batch.frames if mode == "bmuf" else frames, lr)
        elif not ok:
            self.skipped_steps += 1
            self._log(f"step {self.step}: non-finite loss or gradient on some rank; the minibatch "
                      f"is skipped on all ranks ({self.skipped_steps} so far)")
        if self.bmuf is not None:
            self.bmuf.step(self.params)
        self.bytes_sent = self.comm.bytes_sent - before
        return {"loss": total_loss, "frames": frames, "applied": applied, "lr": lr}

    # -- evaluation -----------------------------------------------------------------------
    def evaluate(self, reader: Reader | None = None) -> dict:
        """CV loss per frame and greedy-CTC token error rate over ``reader`` (all ranks).

        Returns ``{loss, cv_error, frames}`` summed over every rank's shard. Every rank runs
        exactly one collective here (the final sum), whatever its shard holds (nothing, or only
        utterances that fail to load), so the ranks cannot fall out of step.
        """
        reader = reader or self.cv_reader
        sums = np.zeros(4, np.float64)  # loss, frames, token errors, reference tokens
        for i, utts in enumerate(reader.plan(0)):
            batch = reader.load(utts, 0, i)
            if batch.size == 0:
                continue
            costs, errs = evaluate([self.costs, self.errors], self._feeds(batch),
                                   device=self.config.train.device, params=self._graph_params())
            costs, errs = (np.asarray(getattr(v, "data", v), np.float64) for v in (costs, errs))
            sums += [costs[np.isfinite(costs)].sum(), batch.frames, errs.sum(),
                     batch.target_lengths.sum()]
        self.comm.allreduce_([sums], op="sum")
        return {"loss": sums[0] / max(sums[1], 1), "cv_error": sums[2] / max(sums[3], 1),
                "frames": int(sums[1])}

    # -- checkpoints ----------------------------------------------------------------------
    def _final_values(self) -> list[np.ndarray]:
        return self.bmuf.final_params() if self.bmuf is not None else self.params

    def save_checkpoint(self) -> str | None:
        """Write a checkpoint of the current state (rank 0 writes; every rank takes part)."""
        self.pull_parameters()
        arrays = {f"param/{k}": p.value for k, p in self.model.params.items()}
        state = self.learner.state_dict()
        names = [p.name for p in self.parameters]
        # with bmuf every rank's local learner has its own slots; otherwise they are identical
        per_rank = self.bmuf is not None and self.comm.size > 1
        for key, a in self.learner.slot_arrays().items():
            if not per_rank:
                arrays[f"opt/{key}"] = a
                continue
            for rank, mine in enumerate(self.comm.allgather(a)):
                arrays[f"opt@{rank}/{key}"] = mine
        scalars = [state["scalars"]]
        if per_rank and state["scalars"]:
            keys = sorted(state["scalars"])
            every = self.comm.allgather(np.array([state["scalars"][k] for k in keys], np.float64))
            scalars = [dict(zip(keys, map(float, row))) for row in every]
        if self.bmuf is not None:
            st = self.bmuf.state_dict()
            for k in ("global", "start", "delta"):
                arrays.update(flatten(f"bmuf/{k}", st[k]))
            if st["steps_in_block"]:  # mid-block: every rank's local model differs
                for i, p in enumerate(self.params):
                    every = self.comm.allgather(p)
                    for rank in range(self.comm.size):
                        arrays[f"local/{rank}/{i}"] = every[rank]
        if self.onebit is not None:
            # each shaped like its parameter, as read_checkpoint checks them
            for name, r in zip(names, self.onebit.state_dict()["residuals"]):
                every = self.comm.allgather(r)
                for rank in range(self.comm.size):
                    arrays[f"onebit/{rank}/{name}"] = every[rank]
        if not self.comm.is_main:
            return None
        header = {"config": self.config.as_dict(), "model": self.model.header(),
                  "step": self.step, "epoch": self.epoch, "batch_index": self.batch_index,
                  "schedule": state["schedule"], "optimizer_count": state["step"],
                  "optimizer_samples": state["samples"], "optimizer_scalars": scalars,
                  "optimizer_parameters": names,
                  "skipped_steps": self.skipped_steps, "ranks": self.comm.size,
                  "mode": self.config.distributed.mode,
                  "bmuf_steps_in_block": self.bmuf.steps_in_block if self.bmuf else 0}
        return write_checkpoint(self.out_dir, self.step, header, arrays,
                                self.config.train.keep_checkpoints)

    def load_checkpoint(self, path: str) -> None:
        """Restore the state saved in ``path`` (read by rank 0, broadcast to every rank)."""
        data = read_checkpoint(path) if self.comm.is_main else None
        header, arrays = self.comm.bcast(data)
        version = header.get("version", 0)
        if version < 2:
            raise TrainingError(
                f"{path}: a checkpoint of an older asrkit (version {version}, before one learner "
                "stack); it cannot resume. Its parameters can: `asrkit model average OUT "
                "model.mdl --avg 1`, then [train] init = \"model.mdl\" in a new run")
        if header["model"]["network"] != self.model.network:
            raise TrainingError(f"{path}: the checkpoint's [network] differs from the config's; "
                                "resume with the config the run started with")
        for k, p in self.model.params.items():
            p.set_value(arrays[f"param/{k}"])
        rank = self.comm.rank if header["ranks"] == self.comm.size else 0
        per_rank = not any(k.startswith("opt/") for k in arrays)
        try:
            slots = self.learner.slots_from(arrays, f"opt@{rank}/" if per_rank else "opt/")
        except KeyError as e:
            raise TrainingError(f"{path}: learner slot {e} is missing (written with another "
                                "[learner] type?)") from None
        scalars = header.get("optimizer_scalars", [{}])
        self.learner.load_state_dict({"step": header["optimizer_count"],
                                      "samples": header.get("optimizer_samples", 0),
                                      "schedule": header["schedule"], "slots": slots,
                                      "scalars": scalars[rank if rank < len(scalars) else 0]})
        if self.bmuf is not None:
            self.bmuf.load_state_dict({k: unflatten(f"bmuf/{k}", arrays)
                                       for k in ("global", "start", "delta")}
                                      | {"steps_in_block": header["bmuf_steps_in_block"]})
            local = unflatten(f"local/{self.comm.rank}", arrays)
            if local and header["ranks"] == self.comm.size:
                for p, v in zip(self.params, local):
                    p[...] = v
            elif local:
                self.bmuf.sync(self.params)
        if self.onebit is not None:
            keys = [f"onebit/{rank}/{p.name}" for p in self.parameters]
            mine = [arrays[k] for k in keys if k in arrays]
            if mine and len(mine) < len(keys):
                raise TrainingError(f"{path}: 1-bit residuals missing: " + ", ".join(
                    k for k in keys if k not in arrays)[:200])
            if mine and header["ranks"] == self.comm.size:
                self.onebit.load_state_dict({"residuals": mine})
            elif mine:
                self._log(f"{path}: written by {header['ranks']} ranks, resuming on "
                          f"{self.comm.size}: 1-bit residuals start from zero")
        if header["ranks"] != self.comm.size and header["batch_index"]:
            self._log(f"{path}: written by {header['ranks']} ranks, resuming on "
                      f"{self.comm.size}: the rest of this epoch reads other minibatches")
        if self.device_learner is not None:
            self.device_learner.upload()
        self.step = int(header["step"])
        self.epoch = int(header["epoch"])
        self.batch_index = int(header["batch_index"])
        self.skipped_steps = int(header["skipped_steps"])
        if self.comm.is_main and os.path.isfile(self.log_path):
            kept = []
            with open(self.log_path, encoding="utf-8") as f:
                for line in f:
                    try:
                        rec = json.loads(line)
                    except json.JSONDecodeError:
                        continue  # a line torn by the kill
                    if rec.get("step", 0) <= self.step:
                        kept.append(line if line.endswith("\n") else line + "\n")
            atomic_write_text(self.log_path, "".join(kept))
        self._log(f"resumed from {path}: step {self.step}, epoch {self.epoch + 1}, minibatch "
                  f"{self.batch_index}")

    # -- the epoch loop's hooks ------------------------------------------------------------
    def steps_in(self, plan) -> int:
        n = np.array([len(plan)], np.float64)
        self.comm.allreduce_([n], op="max")  # every rank takes the same number of steps
        return int(n[0])

    def start(self, resume: bool) -> None:
        if self.comm.size > 1:
            # the launcher names a dead rank by its pid ("BAD TERMINATION ... PID 1234"), and
            # kills the others with SIGKILL: this line says which rank that was
            pids = self.comm.allgather(np.array([os.getpid()], np.int64))[:, 0]
            self._log(f"{self.comm.size} ranks ({self.config.distributed.mode}); pids: "
                      + ", ".join(f"rank {r} = {p}" for r, p in enumerate(pids)))
        if resume:
            path = latest_checkpoint(self.out_dir) if self.comm.is_main else None
            path = self.comm.bcast(path)
            if path is None:
                self._log(f"no checkpoint in {self.out_dir}; starting from scratch")
            else:
                self.load_checkpoint(path)
        elif self.comm.is_main and os.path.exists(self.log_path):
            os.unlink(self.log_path)
        if self.comm.is_main:
            os.makedirs(self.out_dir, exist_ok=True)
            atomic_write_text(os.path.join(self.out_dir, "config.json"),
                              json.dumps(self.config.as_dict(), indent=1) + "\n")

    def _train_epoch(self) -> bool:
        if not super()._train_epoch():
            return False
        if self.bmuf is not None and self.bmuf.steps_in_block:
            self.bmuf.sync(self.params)  # epochs end on a block boundary
        return True

    def end_epoch(self, cv: dict | None, keep: bool, lowered: bool) -> None:
        if cv is not None:
            self._record({"step": self.step, "kind": "cv", "epoch": self.epoch + 1,
                          "loss": cv["loss"], "cv_error": cv["cv_error"], "lr": self._lr()})
            # a rejected epoch's parameters are kept (nnet1 would restore the best ones)
            self._log(f"epoch {self.epoch + 1}: CV loss {cv['loss']:.4f} per frame, token "
                      f"error rate {100 * cv['cv_error']:.2f}%"
                      + (" (newbob: worse than the best epoch)"
                         if self.learner.schedule.rejected else "")
                      + (" (newbob: learning rate lowered)" if lowered else ""))
        if not keep:
            self._log("newbob: stopping (the CV gain fell below newbob_stop_threshold, or "
                      "the rate below min_lr)")

    def finish(self, stopped: bool) -> Model:
        """Writes ``OUT/final.mdl`` (rank 0) unless max_steps stopped the run; returns the
        trained model."""
        self.pull_parameters()  # the returned model (and final.mdl) hold the trained values
        if self.comm.is_main and not stopped:
            m = self.model
            final = m.copy_with(dict(zip(m.params, self._final_values())))
            save(os.path.join(self.out_dir, "final.mdl"), final)
            self._log(f"wrote {os.path.join(self.out_dir, 'final.mdl')}")
        self.comm.barrier()
        return self.model
