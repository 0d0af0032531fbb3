"""Thread synchronisation inside njit code: atomics, a spin-then-yield barrier and a gang of
persistent threads that run one njit function each.

A recurrence split across threads (each thread owns some of the hidden units) must wait once per
time step until every thread has written its part of the state. Starting threads per step costs
tens of microseconds; a step of an LSTM layer takes about as long. So the threads are started
once per call (from a pool that lives as long as the process), each runs the whole recurrence in
one nogil njit call, and they meet at :func:`barrier` on a shared ``int64`` array: an atomic
counter and a generation number (sense reversal), spinning with the CPU's pause instruction for a
while and then yielding the core (``sched_yield``), so that a loaded machine, where a thread can be
descheduled while the others wait for it, degrades gracefully instead of burning the waiters'
time slices.

:class:`Gang` hands out up to ``n`` threads (the caller's and ``n - 1`` pool threads) for one
call at a time; a second caller that finds it busy runs with one thread, so threads never wait
at a barrier for a partner that cannot start (no deadlock, whatever the nesting).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

SPINS = 4000  # pause-loop iterations before a waiter starts yielding its core (~50-100 us)


def _element_pointer(context, builder, aryty, ary, idx):
    array = context.make_array(aryty)(context, builder, ary)
    return cgutils.get_item_pointer(context, builder, aryty, array, [idx])


@intrinsic
def atomic_add(typingctx, ary, idx, value):
    """``old = ary[idx]; ary[idx] += value`` atomically (sequentially consistent); int64 array."""
    if not (isinstance(ary, types.Array) and ary.dtype == types.int64 and ary.ndim == 1):
        return None

    def codegen(context, builder, sig, args):
        ptr = _element_pointer(context, builder, sig.args[0], args[0], args[1])
        val = context.cast(builder, args[2], sig.args[2], types.int64)
        return builder.atomic_rmw("add", ptr, val, "seq_cst")

    return types.int64(ary, idx, value), codegen


@intrinsic
def atomic_load(typingctx, ary, idx):
    """``ary[idx]`` read atomically (sequentially consistent); int64 array."""
    if not (isinstance(ary, types.Array) and ary.dtype == types.int64 and ary.ndim == 1):
        return None

    def codegen(context, builder, sig, args):
        ptr = _element_pointer(context, builder, sig.args[0], args[0], args[1])
        return builder.load_atomic(ptr, "seq_cst", 8)

    return types.int64(ary, idx), codegen


@intrinsic
def atomic_store(typingctx, ary, idx, value):
    """``ary[idx] = value`` atomically (sequentially consistent); int64 array."""
    if not (isinstance(ary, types.Array) and ary.dtype == types.int64 and ary.ndim == 1):
        return None

    def codegen(context, builder, sig, args):
        ptr = _element_pointer(context, builder, sig.args[0], args[0], args[1])
        val = context.cast(builder, args[2], sig.args[2], types.int64)
        builder.store_atomic(val, ptr, "seq_cst", 8)
        return context.get_dummy_value()

    return types.void(ary, idx, value), codegen


_MACHINE = platform.machine().lower()
_PAUSE = ("llvm.x86.sse2.pause" if _MACHINE in ("x86_64", "amd64", "i686", "i386") else
          "llvm.aarch64.hint" if _MACHINE in ("aarch64", "arm64") else "")


@intrinsic
def cpu_relax(typingctx):
    """The CPU's spin-wait hint (x86 ``pause``, ARM ``yield``; nothing elsewhere), through
    LLVM's intrinsics (numba's JIT has no inline-assembly parser)."""

    def codegen(context, builder, sig, args):
        if _PAUSE == "llvm.x86.sse2.pause":
            fn = cgutils.get_or_insert_function(builder.module,
                                                ir.FunctionType(ir.VoidType(), []), _PAUSE)
            builder.call(fn, [])
        elif _PAUSE:
            i32 = ir.IntType(32)
            fn = cgutils.get_or_insert_function(builder.module,
                                                ir.FunctionType(ir.VoidType(), [i32]), _PAUSE)
            builder.call(fn, [ir.Constant(i32, 1)])  # hint #1 is YIELD
        return context.get_dummy_value()

    return types.void(), codegen


@njit(cache=True, nogil=True)
def barrier(sync, nthreads, yield_fn):
    """Wait until ``nthreads`` threads have called this with the same ``sync`` (int64 [3] from
    :func:`new_barrier`: arrival count, generation, abort flag). Writes made before the call are
    visible to every thread after it. Returns False, without waiting, once a thread has set the
    abort flag (:func:`abort`): the caller then stops. ``yield_fn``: :func:`yield_function`."""
    if nthreads <= 1:
        return atomic_load(sync, 2) == 0
    gen = atomic_load(sync, 1)
    if atomic_add(sync, 0, 1) == nthreads - 1:
        atomic_store(sync, 0, 0)
        atomic_add(sync, 1, 1)
        return atomic_load(sync, 2) == 0
    spins = 0
    while atomic_load(sync, 1) == gen:
        if atomic_load(sync, 2) != 0:
            return False
        if spins < SPINS:
            spins += 1
            cpu_relax()
        else:
            yield_fn()
    return atomic_load(sync, 2) == 0


@njit(cache=True, nogil=True)
def abort(sync):
    """Release every thread waiting at (or arriving at) the barrier ``sync``; they return
    False."""
    atomic_store(sync, 2, 1)


def new_barrier() -> np.ndarray:
    """A fresh barrier state for :func:`barrier`: int64 [3], zeros."""
    return np.zeros(3, np.int64)


_YIELD: list = []


def yield_function():
    """libc's ``sched_yield`` as a ctypes function that njit code can take as an argument (its
    address is read at call time, so the compiled code stays cacheable)."""
    if not _YIELD:
        fn = None
        for name in (None, ctypes.util.find_library("c")):
            try:
                addr = ctypes.cast(ctypes.CDLL(name).sched_yield, ctypes.c_void_p).value
            except (OSError, AttributeError, TypeError):
                continue
            fn = ctypes.CFUNCTYPE(ctypes.c_int)(addr)
            break
        if fn is None:  # no sched_yield (not POSIX): a no-op keeps the waiters spinning
            from numba import cfunc

            @cfunc(types.int32(), cache=True)
            def _no_yield():
                return 0

            fn = ctypes.CFUNCTYPE(ctypes.c_int)(_no_yield.address)
        _YIELD.append(fn)
    return _YIELD[0]


class Gang:
    """Up to ``size`` threads for one call at a time: the caller's and ``size - 1`` persistent
    pool threads. :meth:`run` gives every thread ``fn(k, n)`` (k = 0 .. n-1, n threads); a
    ``fn`` that meets the others at a :func:`barrier` should call :func:`abort` on it when it
    fails, so that the others stop waiting."""

    def __init__(self, size: int, name: str):
        self.size = max(1, int(size))
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._name = name

    def run(self, n: int, fn) -> int:
        """Run ``fn(k, n)`` on ``n`` threads at once (fewer if the gang is smaller, 1 if another
        call holds it); returns the thread count used. ``fn`` must not start another run on
        this gang."""
        n = max(1, min(int(n), self.size))
        if n == 1 or not self._lock.acquire(blocking=False):
            fn(0, 1)
            return 1
        try:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.size - 1,
                                                thread_name_prefix=self._name)
            futures = [self._pool.submit(fn, k, n) for k in range(1, n)]
            try:
                fn(0, n)
            finally:
                errors = [f.exception() for f in futures]
            for e in errors:
                if e is not None:
                    raise e
            return n
        finally:
            self._lock.release()


def cpu_count() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
