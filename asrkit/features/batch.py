"""Features of many utterances at once, on all cores.

``compute_batch`` validates the options once, then runs the pipeline of
:mod:`asrkit.features.kaldi` on a pool of threads. The numba kernels release the GIL
(``nogil=True``) and so does numpy's FFT, so the threads run in parallel. Work is split into
units of at most ``UNIT_FRAMES`` frames of one utterance, so one long file also keeps every core
busy; every frame goes through exactly the same code as in ``fbank``/``mfcc``/``spectrogram``
and depends only on its own samples, so the results are identical to the single-utterance ones.
Threads pull the next unit from a shared counter, which balances uneven lengths.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Sequence

import numpy as np

from asrkit.features._options import KINDS
from asrkit.features._pipeline import (
    Workspace,
    extract_range,
    finish,
    make_plan,
    new_output,
    prepare_waveform,
)

__all__ = ["compute_batch", "default_num_threads"]

UNIT_FRAMES = 1024  # frames per work unit (10 s at a 10 ms shift)


def default_num_threads() -> int:
    """Threads used when ``num_threads`` is None: the CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return max(1, os.cpu_count() or 1)


def compute_batch(kind: str, waveforms: Sequence, num_threads: int | None = None,
                  **opts) -> list[np.ndarray]:
    """Features of ``kind`` ("fbank", "mfcc", "spectrogram") for each waveform in ``waveforms``.

    Takes a sequence of 1-D waveforms (or 2-D [channels, samples] with ``channel``), the number
    of threads (None: all available CPUs) and the options of :func:`asrkit.features.fbank` etc.
    Returns a list of float32 [frames_i, dims] arrays in input order, each identical to what
    the single-utterance function returns. Bad input raises ValueError naming its index.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown feature kind {kind!r}; expected one of {', '.join(KINDS)}")
    plan = make_plan(kind, opts)
    waveforms = list(waveforms)
    if num_threads is None:
        num_threads = default_num_threads()
    if not isinstance(num_threads, int) or num_threads < 1:
        raise ValueError(f"num_threads={num_threads!r} must be a positive integer")
    threads = min(num_threads, max(1, len(waveforms)))
    waves: list[np.ndarray | None] = [None] * len(waveforms)
    outs: list[np.ndarray | None] = [None] * len(waveforms)

    def prepare(i: int, _state) -> None:
        waves[i] = prepare_waveform(plan, waveforms[i], f"{kind}: waveform {i}")
        outs[i] = new_output(plan, waves[i].shape[0])

    _parallel(len(waveforms), prepare, threads)
    units = [(i, start, min(start + UNIT_FRAMES, len(out)))
             for i, out in enumerate(outs) for start in range(0, len(out), UNIT_FRAMES)]

    def fill(u: int, ws: Workspace) -> None:
        i, start, stop = units[u]
        extract_range(plan, waves[i], outs[i], start, stop, ws)

    _parallel(len(units), fill, min(num_threads, max(1, len(units))), lambda: Workspace(plan))
    return [finish(plan, out) for out in outs]


def _parallel(count: int, fn: Callable, threads: int, state: Callable = lambda: None) -> None:
    """Call ``fn(i, state)`` for i in range(count) on ``threads`` threads, each with its own
    ``state()``. Items are pulled from a shared counter; the first failure stops the others
    and is re-raised (the one with the lowest index, if several fail).
    """
    counter = itertools.count()  # next() on a count is atomic under the GIL
    errors: list[tuple[int, BaseException]] = []

    def work():
        st = state()
        while not errors:
            i = next(counter)
            if i >= count:
                return
            try:
                fn(i, st)
            except BaseException as e:  # re-raised in the calling thread below
                errors.append((i, e))
                return

    if threads <= 1:
        work()
    else:
        pool = [threading.Thread(target=work, daemon=True) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    if errors:
        raise min(errors, key=lambda item: item[0])[1]
