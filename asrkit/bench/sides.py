"""Time and measure each side of a benchmark in its own fresh process.

On a small machine, two libraries timed in one process disturb each other: after a call,
OpenBLAS's and OpenMP's worker threads keep spinning for a while and steal the next call's cores,
and numba's, OpenBLAS's and torch's thread pools compete. So a side (``"asrkit"`` or a reference
such as ``"torch"``) is measured alone in a new interpreter, one after the other, and the figures
are the median and the spread (first and third quartiles) of repeated runs.

A benchmark module that uses this defines ``measure_side(side: str, params: dict, repeat: int)
-> dict`` (JSON-ready), usually by building a step function and returning
``measure_step(step, repeat)``; ``run_side(module, side, params, repeat)`` runs it in a child.
"""

from __future__ import annotations

import ctypes
import dataclasses
import gc
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable


@dataclasses.dataclass
class Timing:
    """Wall times of repeated runs, in seconds: median and quartiles (the spread)."""

    median: float
    q1: float
    q3: float
    runs: int

    @classmethod
    def of(cls, times: list[float]) -> Timing:
        """Summarise a list of wall times (seconds)."""
        if not times:
            raise ValueError("no timed runs")
        if len(times) == 1:
            return cls(times[0], times[0], times[0], 1)
        q = statistics.quantiles(times, n=4, method="inclusive")
        return cls(statistics.median(times), q[0], q[2], len(times))

    def as_dict(self) -> dict:
        """JSON-ready dict (seconds)."""
        return dataclasses.asdict(self)


def time_runs(fn: Callable[[], object], repeat: int = 5, warmup: int = 1,
              min_time: float = 0.0) -> Timing:
    """Time ``fn()`` ``repeat`` times (and on until ``min_time`` seconds are spent) after
    ``warmup`` untimed runs, with the garbage collector off; returns the median and spread."""
    for _ in range(warmup):
        fn()
    times: list[float] = []
    spent = 0.0
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        while len(times) < repeat or spent < min_time:
            t0 = time.perf_counter()
            fn()
            dt = time.perf_counter() - t0
            times.append(dt)
            spent += dt
    finally:
        if was_enabled:
            gc.enable()
    return Timing.of(times)


def rss_bytes() -> int:
    """This process's resident set size in bytes (Linux ``/proc/self/statm``)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_growth(fn: Callable[[], object], trace_numpy: bool = False) -> tuple[int, int | None]:
    """Peak growth of the resident set (bytes) during one call of ``fn()``, sampled every
    0.2 ms by a thread after ``gc.collect()`` and glibc ``malloc_trim(0)``; with
    ``trace_numpy`` also tracemalloc's peak (numpy allocations are traced) as a cross-check."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    base = rss_bytes()
    peak = [base]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_bytes())
            time.sleep(0.0002)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    traced = None
    try:
        if trace_numpy:
            import tracemalloc

            tracemalloc.start()
            fn()
            traced = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        else:
            fn()
    finally:
        done.set()
        th.join()
    return max(peak[0], rss_bytes()) - base, traced


def measure_step(step: Callable[[], object], repeat: int = 5, memory: bool = True,
                 trace_numpy: bool = False) -> dict:
    """What a ``measure_side`` usually returns: the step's timing (one warm-up run, which also
    compiles) and, with ``memory``, the median peak RSS growth of three more calls (bytes)."""
    out: dict = {"timing": time_runs(step, repeat=repeat).as_dict()}
    if memory:
        runs = [peak_rss_growth(step, trace_numpy) for _ in range(3)]
        out["peak_bytes"] = float(statistics.median(r[0] for r in runs))
        if trace_numpy:
            out["traced_bytes"] = float(statistics.median(r[1] for r in runs))
    return out


def thread_env(threads: int) -> dict:
    """The environment of a side process at ``threads`` threads: OpenBLAS, OpenMP, MKL and numba
    (pass it as ``run_side(..., env=)``; torch's intra-op threads are the side's to set)."""
    n = str(threads)
    return {"OPENBLAS_NUM_THREADS": n, "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n,
            "NUMBA_NUM_THREADS": n}


def run_side(module: str, side: str, params: dict, repeat: int, timeout: float = 3600,
             env: dict | None = None) -> dict:
    """Run ``module.measure_side(side, params, repeat)`` in a fresh interpreter and return its
    dict; ``env`` entries (e.g. thread counts) are added to the child's environment."""
    code = (f"import json, sys; from {module} import measure_side; "
            "print(json.dumps(measure_side(sys.argv[1], json.loads(sys.argv[2]), "
            "int(sys.argv[3]))))")
    child_env = None if env is None else {**os.environ, **{k: str(v) for k, v in env.items()}}
    r = subprocess.run([sys.executable, "-c", code, side, json.dumps(params), str(repeat)],
                       capture_output=True, text=True, timeout=timeout, env=child_env)
    if r.returncode != 0:
        raise RuntimeError(f"measuring {side} ({module}) failed: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])
