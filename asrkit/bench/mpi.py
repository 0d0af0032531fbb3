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
Bytes per step are what rank 0 sends, averaged over the timed steps. A 1-rank baseline runs
before and after every mode, and the mode is compared with the mean of the two; ``speedup_best``
compares the fastest blocks instead (what a quiet machine would give, when it is not quiet).

Every configuration, the 1-rank baseline included, runs under ``mpiexec -n N -bind-to core`` (each
rank pinned to its own core, so a rank that busy-polls in a collective spins on its own core, not
its neighbour's; ``--no-bind`` turns it off). The ranks meet at a barrier before the timed steps
and after each one. Step times are medians of per-block means (a block is one step, or
``--block-size`` steps for bmuf, so its model average is counted). ``exchange_ms`` is the part of
a step that rank 0 spends in collectives and 1-bit quantisation (median; it includes waiting for
a slower rank, which ``exchange_ms_min``, the least of the steps, mostly does not);
``load_1min`` is the highest 1-minute load average seen around the case's runs; the bench's own
ranks add up to N to it, so more than about N means other processes shared the cores (with 2
ranks on a 2-core machine anything else steals from the ranks, and the figures mean little).
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
    parser.add_argument("--no-bind", action="store_true",
                        help="do not pin each rank to a core (mpiexec -bind-to core)")


class _FixedReader:
    """The Trainer's reader protocol over one synthetic minibatch (the same every step)."""

    def __init__(self, a, rank):
        from asrkit.io.tokens import TokenTable
        from asrkit.training.reader import Batch

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


class _ExchangeTimer:
    """Seconds spent in wrapped methods (collectives, 1-bit aggregation), outermost calls only."""

    def __init__(self):
        self.seconds = 0.0
        self._depth = 0

    def wrap(self, obj, name: str) -> None:
        import time

        method = getattr(obj, name)

        def timed(*args, **kwargs):
            self._depth += 1
            t0 = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self._depth -= 1
                if not self._depth:
                    self.seconds += time.perf_counter() - t0

        setattr(obj, name, timed)


def worker(a: dict, mode: str, steps: int) -> None:
    """Run under mpiexec: time ``steps`` Trainer steps after 2 warm-ups; rank 0 prints JSON
    (median step seconds, median exchange seconds, bytes sent per step)."""
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
        timer = _ExchangeTimer()
        for obj, name in ((train_comm, "allreduce_"), (train_comm, "allgather"),
                          (trainer.onebit, "aggregate_"), (trainer.bmuf, "sync")):
            if obj is not None:
                timer.wrap(obj, name)
        group = a["block_size"] if mode == "bmuf" else 1
        steps = -(-steps // group) * group
        for _ in range(2 * group):
            trainer.train_step(reader.batch)
        comm.barrier()
        sent = comm.bytes_sent
        times, exchange = [], []
        for _ in range(steps):
            timer.seconds = 0.0
            t0 = time.perf_counter()
            trainer.train_step(reader.batch)
            comm.barrier()
            times.append(time.perf_counter() - t0)
            exchange.append(timer.seconds)
        sent = (comm.bytes_sent - sent) / steps
        blocks = np.reshape(times, (-1, group)).mean(axis=1)
        ex_blocks = np.reshape(exchange, (-1, group)).mean(axis=1)
        if comm.is_main:
            print(json.dumps({"step_s": float(np.median(blocks)), "ranks": comm.size,
                              "best_step_s": float(blocks.min()),
                              "exchange_s": float(np.median(ex_blocks)),
                              "exchange_min_s": float(ex_blocks.min()),
                              "bytes_per_step": sent,
                              "frames_per_step": a["frames"] * a["batch"] * comm.size}))


def _mpiexec() -> str:
    exe = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    found = exe if os.path.exists(exe) else shutil.which("mpiexec")
    if not found:
        raise RuntimeError("mpiexec not found: pip install mpich (or install an MPI)")
    return found


def _launch(a: dict, mode: str, ranks: int, steps: int, bind: bool = True) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               NUMBA_NUM_THREADS="1", ASRKIT_NO_PROGRESS="1")
    code = ("import json, sys; from asrkit.bench.mpi import worker; "
            "worker(json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3]))")
    # the 1-rank baseline goes through the same launcher (and pinning) as the N-rank runs
    cmd = [_mpiexec(), "-n", str(ranks)] + (["-bind-to", "core"] if bind else []) + \
        [sys.executable, "-c", code, json.dumps(a), mode, str(steps)]
    load = os.getloadavg()[0]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError(f"{mode} with {ranks} ranks failed: {r.stderr[-2000:]}")
    res = json.loads(r.stdout.strip().splitlines()[-1])
    res["load"] = max(load, os.getloadavg()[0])
    return res


def run(args) -> list[Case]:
    """One case per mode: ratio = throughput with ``--ranks`` ranks / with one rank."""
    a = {k: getattr(args, k) for k in ("frames", "batch", "dim", "hidden", "layers", "classes",
                                       "block_size")}
    steps = max(args.repeat, 2)
    bind = not args.no_bind
    if bind and args.ranks > (os.cpu_count() or 1):
        print(f"bench mpi: {args.ranks} ranks on {os.cpu_count()} cores: ranks share cores",
              file=sys.stderr)
    # a 1-rank baseline before and after every mode (against drifting machine load); each mode
    # is compared with the mean of its two neighbours
    bases = [_launch(a, "allreduce", 1, steps, bind)]
    results = {}
    for mode in args.modes:
        results[mode] = _launch(a, mode, args.ranks, steps, bind)
        bases.append(_launch(a, "allreduce", 1, steps, bind))
    cases = []
    for i, (mode, res) in enumerate(results.items()):
        before, after = bases[i], bases[i + 1]
        base_s = 0.5 * (before["step_s"] + after["step_s"])
        best_base_s = min(before["best_step_s"], after["best_step_s"])
        # per unit of work (one rank-minibatch): time / ranks, so the ratio is the speed-up
        per_unit = res["step_s"] / res["ranks"]
        cases.append(Case(f"{mode}: {args.ranks} ranks vs 1", per_unit, "1 rank", base_s, {
            "step_ms_1_rank": round(1e3 * base_s, 1),
            f"step_ms_{args.ranks}_ranks": round(1e3 * res["step_s"], 1),
            "exchange_ms": round(1e3 * res["exchange_s"], 2),
            "exchange_ms_min": round(1e3 * res["exchange_min_s"], 2),
            "frames_per_s": round(res["frames_per_step"] / res["step_s"]),
            "bytes_per_step": int(res["bytes_per_step"]),
            "speedup": round(base_s / per_unit, 3),
            # from the fastest block of each run: less sensitive to other processes
            "speedup_best": round(best_base_s * res["ranks"] / res["best_step_s"], 3),
            "load_1min": round(max(res["load"], before["load"], after["load"]), 2)}))
    return cases
