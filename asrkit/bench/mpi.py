"""Data-parallel scaling: throughput of 2 MPI ranks against 1 on a BLSTM-CTC training step.

Each configuration runs under ``mpiexec -n N`` with one thread per rank (``OMP_NUM_THREADS``,
``OPENBLAS_NUM_THREADS``, ``MKL_NUM_THREADS`` and ``NUMBA_NUM_THREADS`` = 1), through the real
``asrkit.training.Trainer.train_step`` (gradients, NaN check, aggregation, clipping, update).
Every rank processes its own minibatch of the same shape per step (weak scaling, as data-parallel
training with a per-rank minibatch), so the figure is::

    speed-up = (N x frames per rank per step / step time with N ranks)
               / (frames per step / step time with 1 rank)

The 1-rank baseline is plain local training. Modes: ``allreduce`` (gradients summed every step),
``1bit`` (1-bit SGD with error feedback) and ``bmuf`` (block momentum; one model average every
``--block-size`` steps). ``independent`` runs the ranks without any exchange: its speed-up is the
most this machine gives two processes (shared cores, memory bandwidth), the bound for the others.
Bytes per step are what rank 0 sends, averaged over the timed steps.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np

from asrkit.bench import Case

NAME = "mpi"
HELP = "2 ranks vs 1 on a BLSTM-CTC step: allreduce, 1-bit SGD, BMUF (speed-up, bytes/step)"


def add_arguments(parser) -> None:
    """Model/batch shape, ranks, modes and BMUF block size."""
    parser.add_argument("--frames", type=int, default=200, help="frames per utterance")
    parser.add_argument("--batch", type=int, default=8, help="utterances per rank per step")
    parser.add_argument("--dim", type=int, default=80)
    parser.add_argument("--hidden", type=int, default=320, help="LSTM cells per direction")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--classes", type=int, default=32)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--modes", nargs="+",
                        default=["allreduce", "1bit", "bmuf", "independent"],
                        help="allreduce | 1bit | bmuf | independent (no exchange: the bound)")
    parser.add_argument("--block-size", type=int, default=4, help="bmuf steps per sync")


class _FixedReader:
    """The Trainer's reader protocol over one synthetic minibatch (the same every step)."""

    def __init__(self, a, rank):
        from asrkit.training.reader import Batch
        from asrkit.training.tokens import TokenTable

        rng = np.random.default_rng(rank)
        T, B = a["frames"], a["batch"]
        self.tokens = TokenTable(["<blk>"] + [f"t{i}" for i in range(1, a["classes"])], "word")
        self.dim = a["dim"]
        self.problems = []
        x = rng.standard_normal((T, B, a["dim"])).astype(np.float32)
        S = T // 5
        y = rng.integers(1, a["classes"], (B, S)).astype(np.int32)
        self.batch = Batch(x, np.full(B, T, np.int32), y, np.full(B, S, np.int32),
                           [f"u{b}" for b in range(B)])

    def plan(self, epoch):
        return [self.batch.utt_ids]

    def load(self, utts, epoch=0, index=0):
        return self.batch


def worker(a: dict, mode: str, steps: int) -> None:
    """Run under mpiexec: time ``steps`` Trainer steps after 2 warm-ups; rank 0 prints JSON."""
    import time

    from asrkit.distributed import LocalCommunicator, abort_on_error, get_communicator
    from asrkit.training import Trainer, parse_train_config

    comm = get_communicator()
    # "independent": every rank trains alone (no gradient exchange); the ranks only meet at
    # the timing barrier. Its speed-up is what this machine allows at all.
    train_comm = LocalCommunicator() if mode == "independent" else comm
    with abort_on_error(comm):
        cfg = parse_train_config({
            "network": {"layers": [{"type": "blstm", "hidden": a["hidden"],
                                    "num_layers": a["layers"]}]},
            "reader": {"minibatch_frames": a["frames"] * a["batch"]},
            "learner": {"type": "sgd", "lr": 1e-5, "momentum": 0.9},
            "distributed": {"mode": "allreduce" if mode == "independent" else mode,
                            "minibatch": "per_rank",
                            "block_size": a["block_size"]},
            "train": {"out_dir": os.devnull}}, "<bench>")
        reader = _FixedReader(a, comm.rank)
        trainer = Trainer(cfg, comm=train_comm, reader=reader, log=lambda m: None)
        for _ in range(2):
            trainer.train_step(reader.batch)
        comm.barrier()
        sent = comm.bytes_sent
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            trainer.train_step(reader.batch)
            comm.barrier()
            times.append(time.perf_counter() - t0)
        sent = (comm.bytes_sent - sent) / steps
        if comm.is_main:
            print(json.dumps({"step_s": float(np.median(times)), "ranks": comm.size,
                              "bytes_per_step": sent,
                              "frames_per_step": a["frames"] * a["batch"] * comm.size}))


def _mpiexec() -> str:
    exe = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    found = exe if os.path.exists(exe) else shutil.which("mpiexec")
    if not found:
        raise RuntimeError("mpiexec not found: pip install mpich (or install an MPI)")
    return found


def _launch(a: dict, mode: str, ranks: int, steps: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               NUMBA_NUM_THREADS="1", ASRKIT_NO_PROGRESS="1")
    code = ("import json, sys; from asrkit.bench.mpi import worker; "
            "worker(json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3]))")
    cmd = [sys.executable, "-c", code, json.dumps(a), mode, str(steps)]
    if ranks > 1:
        cmd = [_mpiexec(), "-n", str(ranks)] + cmd
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError(f"{mode} with {ranks} ranks failed: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def run(args) -> list[Case]:
    """One case per mode: ratio = throughput with ``--ranks`` ranks / with one rank."""
    a = {k: getattr(args, k) for k in ("frames", "batch", "dim", "hidden", "layers", "classes",
                                       "block_size")}
    steps = max(args.repeat, 2)
    first = _launch(a, "allreduce", 1, steps)
    results = {mode: _launch(a, mode, args.ranks, steps) for mode in args.modes}
    # the 1-rank baseline is taken before and after the others, against drifting machine load
    last = _launch(a, "allreduce", 1, steps)
    base = {"step_s": 0.5 * (first["step_s"] + last["step_s"])}
    cases = []
    for mode, res in results.items():
        # per unit of work (one rank-minibatch): time / ranks, so the ratio is the speed-up
        per_unit = res["step_s"] / res["ranks"]
        cases.append(Case(f"{mode}: {args.ranks} ranks vs 1", per_unit, "1 rank",
                          base["step_s"], {
                              "step_ms_1_rank": round(1e3 * base["step_s"], 1),
                              f"step_ms_{args.ranks}_ranks": round(1e3 * res["step_s"], 1),
                              "frames_per_s": round(res["frames_per_step"] / res["step_s"]),
                              "bytes_per_step": int(res["bytes_per_step"]),
                              "speedup": round(base["step_s"] / per_unit, 3)}))
    return cases
