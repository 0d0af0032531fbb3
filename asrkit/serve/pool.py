"""Bounded model work for the server: a thread pool sized to the cores, an admission limit, and
the count of what runs and waits.

The model steps release the GIL where they spend their time (the fused LSTM and GEMM kernels
are ``nogil``; onnxruntime and numpy do the same), so threads share one loaded model instead of
one copy per process, and a stream's state stays in the server's memory between chunks. A job
that cannot be admitted (``workers`` running and ``max_queue`` waiting) is refused at once
(HTTP 503), never queued without bound. A job that outruns its timeout is answered with an
error, but its slot is freed only when its thread really ends, so a slow model can never let
more work in than the limits say.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import threading


class Busy(Exception):
    """The pool is full: the request is refused (HTTP 503)."""


@dataclasses.dataclass
class PoolStats:
    """What the pool is doing: jobs running, waiting, done, refused and timed out."""

    workers: int
    max_queue: int
    running: int = 0
    waiting: int = 0
    done: int = 0
    refused: int = 0
    timed_out: int = 0


class ModelPool:
    """``workers`` threads for model work and at most ``max_queue`` jobs waiting for one."""

    def __init__(self, workers: int, max_queue: int):
        if workers < 1 or max_queue < 0:
            raise ValueError(f"workers must be >= 1 and max_queue >= 0, got {workers}, "
                             f"{max_queue}")
        self.executor = concurrent.futures.ThreadPoolExecutor(
            workers, thread_name_prefix="asrkit-model")
        self.stats = PoolStats(workers, max_queue)
        self._lock = threading.Lock()

    def _admit(self) -> None:
        with self._lock:
            s = self.stats
            if s.running + s.waiting >= s.workers + s.max_queue:
                s.refused += 1
                raise Busy(f"the server is busy ({s.running} jobs running, {s.waiting} "
                           "waiting): try again later")
            s.waiting += 1

    def _job(self, fn, args):
        with self._lock:
            self.stats.waiting -= 1
            self.stats.running += 1
        try:
            return fn(*args)
        finally:
            with self._lock:
                self.stats.running -= 1
                self.stats.done += 1

    async def run(self, fn, *args, timeout: float | None = None, admit: bool = True):
        """Run ``fn(*args)`` on a model thread and return its result.

        admit: count the job against the limits (Busy when full); streams, admitted once when
        they open, pass False for each chunk. timeout: seconds before ``TimeoutError`` (the
        thread goes on to its end; its slot stays taken until then).
        """
        if admit:
            self._admit()
        else:
            with self._lock:
                self.stats.waiting += 1
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self.executor, self._job, fn, args)
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        except TimeoutError:
            with self._lock:
                self.stats.timed_out += 1
            future.add_done_callback(lambda f: f.exception())  # retrieved, never logged
            raise

    def shutdown(self) -> None:
        """Stop taking jobs; waiting jobs are cancelled, running ones end on their own."""
        self.executor.shutdown(wait=False, cancel_futures=True)
