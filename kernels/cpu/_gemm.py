"""Row-major GEMMs callable from njit code: numpy's own OpenBLAS through its CBLAS entry point.

The LSTM recurrences run a small GEMM (``[B, K] @ [K, N]``, B ~ 16) on every step. Calling it
through ``np.matmul`` from a Python loop costs several microseconds per call in interpreter and
numba-dispatch overhead; calling ``cblas_?gemm`` directly from one njit loop over all steps costs
nothing extra. numpy's wheels bundle OpenBLAS (``libscipy_openblas64_``, ILP64, symbols
``scipy_cblas_sgemm64_``/``..._dgemm64_``); :func:`gemm_function` finds the library numpy has
loaded and returns its GEMM as a ctypes function, which njit code takes as an argument (the
address is read at call time, so the compiled code stays cacheable). Where no CBLAS is found
(a numpy built on Accelerate or MKL) it returns a numba ``cfunc`` with the same C signature: a
plain triple loop, slow but correct.

:func:`matmul_rows` is the njit call site; :func:`gemm_plan` picks, once per shape, how the
product is split: OpenBLAS runs GEMMs with ``m*n*k <= 100**3`` through unpacked "small matrix"
kernels, while bigger ones re-pack the weight on every call, which for a per-step product costs
more than the multiply. Measured on the 2-core Zen 5 VM (SkylakeX kernels, one thread, 300 calls):
``[16, 320] @ [320, 1280]`` 33.1 ms whole, 22.0 ms in column blocks of 192; ``[16, 1280] @
[1280, 320]`` 33.1 ms whole, 21.2 ms in row (K) blocks of 192 accumulated. The best split
depends on the BLAS and the CPU, so the first use of a shape times the candidates and keeps the
fastest (cuDNN's benchmark mode).
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
SMALL_GEMM_MNK = 1_000_000  # OpenBLAS's small-matrix limit (m*n*k)
WHOLE, COLUMN_BLOCKS, K_BLOCKS = 0, 1, 2

_LOCK = threading.Lock()
_FUNCS: dict = {}   # dtype char -> ctypes GEMM
_PLANS: dict = {}   # (rows, K, N, dtype char, source) -> (mode, width)


def _prototype(ctype, blasint):
    return ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int, ctypes.c_int, blasint, blasint,
                            blasint, ctype, ctypes.c_void_p, blasint, ctypes.c_void_p, blasint,
                            ctype, ctypes.c_void_p, blasint)


def _openblas_paths() -> list[str]:
    """Shared libraries that may hold numpy's BLAS: numpy's bundled library folders first (so
    that another package's OpenBLAS, e.g. scipy's, is not picked), then the libraries with
    "blas" in their name that this process has mapped (Linux)."""
    root = os.path.dirname(os.path.dirname(np.__file__))
    paths = []
    for pattern in ("numpy.libs/*blas*", "numpy/.dylibs/*blas*"):
        paths += sorted(glob.glob(os.path.join(root, pattern)))
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                p = line.split()[-1]
                if "blas" in os.path.basename(p).lower() and p not in paths:
                    paths.append(p)
    except OSError:
        pass
    return paths


# (symbol pattern, 64-bit integers): numpy's scipy-openblas, then a plain OpenBLAS
_SYMBOLS = (("scipy_cblas_{}gemm64_", True), ("cblas_{}gemm64_", True),
            ("scipy_cblas_{}gemm", False), ("cblas_{}gemm", False))


def _blas_gemm(char: str):
    """``cblas_?gemm`` of numpy's BLAS as a ctypes function, checked on a small product, or
    None where none is found."""
    ctype = ctypes.c_float if char == "s" else ctypes.c_double
    dt = np.float32 if char == "s" else np.float64
    for path in _openblas_paths():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for pattern, ilp64 in _SYMBOLS:
            try:
                addr = ctypes.cast(getattr(lib, pattern.format(char)), ctypes.c_void_p).value
            except AttributeError:
                continue
            fn = _prototype(ctype, ctypes.c_int64 if ilp64 else ctypes.c_int32)(addr)
            a = np.arange(6, dtype=dt).reshape(2, 3)
            b = np.arange(12, dtype=dt).reshape(3, 4) - 5
            c = np.empty((2, 4), dt)
            fn(ROW_MAJOR, NO_TRANS, NO_TRANS, 2, 4, 3, 1.0, a.ctypes.data, 3, b.ctypes.data, 4,
               0.0, c.ctypes.data, 4)
            if np.array_equal(c, a @ b):
                return fn
    return None


def _fallback_gemm(char: str):
    """A numba ``cfunc`` with CBLAS's signature (row-major, either operand transposed)."""
    from numba import carray, cfunc, types

    real = types.float32 if char == "s" else types.float64
    dt = np.float32 if char == "s" else np.float64
    i64 = types.int64
    sig = types.void(types.int32, types.int32, types.int32, i64, i64, i64, real, types.voidptr,
                     i64, types.voidptr, i64, real, types.voidptr, i64)

    @cfunc(sig, cache=True, nogil=True)
    def gemm(order, ta, tb, M, N, K, alpha, pa, lda, pb, ldb, beta, pc, ldc):
        # op(A) [M, K] is A [M, K] or, transposed (ta == TRANS), A [K, M]; likewise op(B) [K, N]
        A = carray(pa, ((max(K - 1, 0) * lda + M) if ta == TRANS else
                        (max(M - 1, 0) * lda + K),), dt)
        B = carray(pb, ((max(N - 1, 0) * ldb + K) if tb == TRANS else
                        (max(K - 1, 0) * ldb + N),), dt)
        C = carray(pc, (max(M - 1, 0) * ldc + N,), dt)
        for i in range(M):
            for j in range(N):
                C[i * ldc + j] = beta * C[i * ldc + j] if beta != 0 else 0
            for k in range(K):
                a = alpha * (A[k * lda + i] if ta == TRANS else A[i * lda + k])
                if tb == TRANS:
                    for j in range(N):
                        C[i * ldc + j] += a * B[j * ldb + k]
                else:
                    for j in range(N):
                        C[i * ldc + j] += a * B[k * ldb + j]

    return _prototype(ctypes.c_float if char == "s" else ctypes.c_double,
                      ctypes.c_int64)(gemm.address)


def gemm_function(dtype, blas: bool | None = None):
    """The GEMM njit code calls for ``dtype`` (float32 or float64): numpy's OpenBLAS
    ``cblas_?gemm`` as a ctypes function, or the numba fallback where there is none, or where
    ``blas`` is False or the environment sets ``ASRKIT_LSTM_GEMM=numba``."""
    char = "s" if np.dtype(dtype) == np.float32 else "d"
    if blas is None:
        blas = os.environ.get("ASRKIT_LSTM_GEMM", "").lower() != "numba"
    key = char + ("b" if blas else "f")
    with _LOCK:
        fn = _FUNCS.get(key)
        if fn is None:
            fn = (_blas_gemm(char) if blas else None) or _fallback_gemm(char)
            _FUNCS[key] = fn
    return fn


@njit(cache=True, nogil=True)
def matmul_rows(gemm, mode, width, a, w, out, r0, n):
    """``out[r0:r0+n] = a[r0:r0+n] @ w`` through ``gemm``; ``a [B, K]``, ``w [K, N]``,
    ``out [B, N]`` C-contiguous of one dtype. ``mode``/``width`` from :func:`gemm_plan`."""
    matmul_rows_into(gemm, mode, width, a, w, out, r0, n, 0)


@njit(cache=True, nogil=True)
def matmul_rows_into(gemm, mode, width, a, w, out, r0, n, col0):
    """``out[r0:r0+n, col0:col0+N] = a[r0:r0+n] @ w``: as :func:`matmul_rows` into a column
    band of a wider C-contiguous ``out [B, >= col0+N]`` (e.g. one thread's hidden units)."""
    if n <= 0:
        return
    K = a.shape[1]
    N = w.shape[1]
    ldc = out.shape[1]
    sz = a.itemsize
    pa = a.ctypes.data + r0 * K * sz
    pc = out.ctypes.data + (r0 * ldc + col0) * sz
    pw = w.ctypes.data
    if mode == COLUMN_BLOCKS:
        for j in range(0, N, width):
            nb = min(width, N - j)
            gemm(ROW_MAJOR, NO_TRANS, NO_TRANS, n, nb, K, 1.0, pa, K, pw + j * sz, N, 0.0,
                 pc + j * sz, ldc)
    elif mode == K_BLOCKS:
        for k in range(0, K, width):
            kb = min(width, K - k)
            gemm(ROW_MAJOR, NO_TRANS, NO_TRANS, n, N, kb, 1.0, pa + k * sz, K,
                 pw + k * N * sz, N, 0.0 if k == 0 else 1.0, pc, ldc)
    else:
        gemm(ROW_MAJOR, NO_TRANS, NO_TRANS, n, N, K, 1.0, pa, K, pw, N, 0.0, pc, ldc)


@njit(cache=True, nogil=True)
def gemm_at(gemm, trans_a, trans_b, m, n, k, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc):
    """Row-major ``C = op(A) @ op(B) + beta * C`` on sub-matrices of flat arrays: ``A`` starts
    at element ``a_off`` of ``a`` with leading dimension ``lda`` (likewise ``b``, ``c``);
    ``trans_*`` are :data:`NO_TRANS` or :data:`TRANS`. One dtype throughout; no checks."""
    if m <= 0 or n <= 0:
        return
    sz = c.itemsize
    if k <= 0:
        if beta == 0:
            for i in range(m):
                for j in range(n):
                    c[c_off + i * ldc + j] = 0
        return
    gemm(ROW_MAJOR, trans_a, trans_b, m, n, k, 1.0, a.ctypes.data + a_off * sz, lda,
         b.ctypes.data + b_off * sz, ldb, beta, c.ctypes.data + c_off * sz, ldc)


@njit(cache=True, nogil=True)
def _repeat(gemm, mode, width, a, w, out, reps):
    for _ in range(reps):
        matmul_rows(gemm, mode, width, a, w, out, 0, a.shape[0])


_SET_LOCAL: list = []  # [ctypes function or None], found once


def blas_threads_local():
    """OpenBLAS's ``openblas_set_num_threads_local(n) -> previous`` (0.3.27+) of the library
    numpy uses, as a ctypes function: it sets the GEMM threads of the calling thread only, so
    threads of our own can each call BLAS single-threaded while numpy elsewhere keeps its
    threads. None where it is not found (another BLAS, an older OpenBLAS)."""
    with _LOCK:
        if not _SET_LOCAL:
            fn = None
            for path in _openblas_paths():
                try:
                    fn = ctypes.CDLL(path).openblas_set_num_threads_local
                except (OSError, AttributeError):
                    continue
                fn.argtypes = [ctypes.c_int]
                fn.restype = ctypes.c_int
                break
            _SET_LOCAL.append(fn)
        return _SET_LOCAL[0]


_SINGLE = [0, None]  # open single-threaded regions, the thread count to restore after them


@contextlib.contextmanager
def single_threaded_blas():
    """A region in which our own worker threads each call BLAS single-threaded (OpenBLAS's
    pool would serialise their GEMMs and oversubscribe the cores); yields True, or False
    where ``blas_threads_local`` is not found (another BLAS: run the work in one thread).

    ``openblas_set_num_threads_local`` sets the process's thread count in numpy's OpenBLAS,
    not the calling thread's, so workers that each set 1 and restore "their" previous value
    race, and the last restore could leave every later numpy GEMM of the process on one
    thread. Here the first region to open saves the count and sets 1, and the last to close
    restores it."""
    set_local = blas_threads_local()
    if set_local is None:
        yield False
        return
    with _LOCK:
        if _SINGLE[0] == 0:
            _SINGLE[1] = set_local(1)
        _SINGLE[0] += 1
    try:
        yield True
    finally:
        with _LOCK:
            _SINGLE[0] -= 1
            if _SINGLE[0] == 0:
                set_local(_SINGLE[1])


_POOL: list = []  # the one worker pool of the CPU kernels, made on first use


def worker_pool() -> ThreadPoolExecutor:
    """The CPU kernels' one pool of worker threads (``cores - 1`` of them; the caller's thread is
    the other), made on first use and shared by the attention, LSTM and RNN-T kernels. Its
    tasks must not wait on one another (a barrier-synchronised gang has its own threads:
    ``_sync.Gang``)."""
    with _LOCK:
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(max_workers=max(1, (os.cpu_count() or 1) - 1),
                                            thread_name_prefix="asrkit-kernel"))
        return _POOL[0]


def in_worker_threads(fn, calls) -> None:
    """``fn(*args)`` for each ``args`` of ``calls``: the first in this thread, the others on
    the :func:`worker_pool`, all inside one :func:`single_threaded_blas` region; where
    that region is not to be had (another BLAS) they run in turn in this thread, and the BLAS
    threads its own GEMMs."""
    with single_threaded_blas() as single:
        if not single:
            for args in calls:
                fn(*args)
            return
        pool = worker_pool()
        futures = [pool.submit(fn, *args) for args in calls[1:]]
        if calls:
            fn(*calls[0])
        for f in futures:
            f.result()


def candidates(rows: int, K: int, N: int) -> list[tuple[int, int]]:
    """The ``(mode, width)`` splits worth timing for ``[rows, K] @ [K, N]``."""
    out = [(WHOLE, 0)]
    if rows * K * N > SMALL_GEMM_MNK:
        wn = max(16, SMALL_GEMM_MNK // max(rows * K, 1) // 16 * 16)
        wk = max(16, SMALL_GEMM_MNK // max(rows * N, 1) // 16 * 16)
        if wn < N:
            out.append((COLUMN_BLOCKS, wn))
        if wk < K:
            out.append((K_BLOCKS, wk))
    return out


def gemm_plan(gemm, rows: int, K: int, N: int, dtype) -> tuple[int, int]:
    """``(mode, width)`` for :func:`matmul_rows` with up to ``rows`` rows of ``[*, K] @ [K, N]``:
    the fastest of :func:`candidates`, timed once per shape and process (a few milliseconds)."""
    key = (rows, K, N, np.dtype(dtype).char, ctypes.cast(gemm, ctypes.c_void_p).value)
    with _LOCK:
        plan = _PLANS.get(key)
    if plan is not None:
        return plan
    cands = candidates(rows, K, N)
    if len(cands) > 1:
        rng = np.random.default_rng(0)
        a = rng.standard_normal((rows, K)).astype(dtype)
        w = rng.standard_normal((K, N)).astype(dtype)
        out = np.empty((rows, N), dtype)
        best: dict = {}
        for _ in range(3):
            for c in cands:
                t0 = time.perf_counter()
                _repeat(gemm, c[0], c[1], a, w, out, 8)
                dt = time.perf_counter() - t0
                best[c] = min(dt, best.get(c, dt))
        plan = min(cands, key=best.__getitem__)
    else:
        plan = cands[0]
    with _LOCK:
        _PLANS[key] = plan
    return plan
