"""``Recognizer.transcribe_many`` over worker processes: each loads the model folder once and
transcribes the items it is given; results come back in input order.

Workers are started with ``spawn`` (a fork would copy the parent's BLAS and numba thread pools
in an undefined state) and run single-threaded: ``nj`` workers use ``nj`` cores, not
``nj x cores`` threads fighting over them.
"""

from __future__ import annotations

import os

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "NUMBA_NUM_THREADS")

_recognizer = None  # the worker's Recognizer


def _start_worker(settings: dict) -> None:
    # set before numpy and numba load in this fresh process, which is why this module
    # imports neither at its top
    for name in THREAD_VARIABLES:
        os.environ[name] = "1"
    global _recognizer
    from asrkit.recognizer.recognizer import Recognizer

    settings = dict(settings)
    _recognizer = Recognizer.from_dir(settings.pop("path"), **settings)


def _transcribe(item):
    from asrkit.recognizer.options import RecognizerError

    try:
        return _recognizer.transcribe(*item)
    except RecognizerError as e:
        return e


def transcribe_in_workers(settings: dict, items: list[tuple], nj: int):
    """Yield the Result or RecognizerError of each ``(audio, sample_rate)`` item, in order,
    computed by ``nj`` worker processes each holding ``Recognizer.from_dir(**settings)``."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    from asrkit.recognizer.options import RecognizerError

    pool = ProcessPoolExecutor(nj, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_start_worker, initargs=(settings,))
    try:
        yield from pool.map(_transcribe, items)
    except BrokenProcessPool as e:
        raise RecognizerError(f"a transcription worker process died ({e}); the machine may be "
                              "out of memory: try a smaller nj") from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
