"""GEMM on CUDA device arrays: ``c = alpha * op(a) @ op(b) + beta * c``.

Backends, first available wins (``ASRKIT_CUDA_GEMM=nvmath|cupy|numba`` forces one):

* ``nvmath``: cuBLAS ``sgemm``/``dgemm`` through ``nvmath.bindings.cublas`` on the raw device
  pointers (no copies; one cuBLAS handle per thread, on the legacy default stream like numba's
  kernels), for operands whose rows are contiguous;
* ``cupy``: ``cupy.matmul`` (cuBLAS) on zero-copy views of the arrays;
* ``numba``: a shared-memory tiled numba.cuda kernel. It handles any strides and is what runs
  under numba's CUDA simulator, where the tile is shrunk to 4x4 because every simulated thread is
  a Python thread.

Row-major operands map onto column-major cuBLAS by computing ``c^T = op(b)^T op(a)^T``.
"""

from __future__ import annotations

import math
import os
import threading

import numpy as np

from asrkit.kernels._device import DeviceUnavailableError, cuda_simulated

try:
    from numba import cuda, float32, float64
except ImportError as e:  # pragma: no cover - depends on the install
    raise DeviceUnavailableError(
        "device='cuda' needs numba-cuda: pip install 'asrkit[cuda]'") from e

TILE = 4 if cuda_simulated() else 16  # threads per block side; the block computes TILE x TILE


def _make_tiled_kernel(nbtype):
    @cuda.jit
    def kernel(a, b, c, trans_a, trans_b, alpha, beta):
        sa = cuda.shared.array((TILE, TILE), nbtype)
        sb = cuda.shared.array((TILE, TILE), nbtype)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        row = cuda.blockIdx.y * TILE + ty
        col = cuda.blockIdx.x * TILE + tx
        M, N = c.shape
        K = a.shape[0] if trans_a else a.shape[1]
        acc = nbtype(0)
        for k0 in range(0, K, TILE):
            ka = k0 + tx
            if row < M and ka < K:
                sa[ty, tx] = a[ka, row] if trans_a else a[row, ka]
            else:
                sa[ty, tx] = 0
            kb = k0 + ty
            if kb < K and col < N:
                sb[ty, tx] = b[col, kb] if trans_b else b[kb, col]
            else:
                sb[ty, tx] = 0
            cuda.syncthreads()
            for kk in range(TILE):
                acc += sa[ty, kk] * sb[kk, tx]
            cuda.syncthreads()
        if row < M and col < N:
            if beta == 0:  # c may hold garbage (even NaN) when beta is 0: never read it
                c[row, col] = alpha * acc
            else:
                c[row, col] = alpha * acc + beta * c[row, col]

    return kernel


_TILED = {np.dtype(np.float32): _make_tiled_kernel(float32),
          np.dtype(np.float64): _make_tiled_kernel(float64)}


def _op_shape(a, trans):
    return (a.shape[1], a.shape[0]) if trans else tuple(a.shape)


def _row_major_ld(a):
    """Leading dimension (elements) of a 2-D array with contiguous rows, else None."""
    item = a.dtype.itemsize
    s0, s1 = a.strides
    if a.shape[1] == 1 or s1 == item:
        return max(s0 // item, a.shape[1], 1) if s0 else max(a.shape[1], 1)
    return None


class _NvmathBlas(threading.local):
    def __init__(self):
        from nvmath.bindings import cublas

        self.cublas = cublas
        self.handle = cublas.create()


_NVMATH = None


def _backend() -> str:
    forced = os.environ.get("ASRKIT_CUDA_GEMM")
    if forced:
        return forced
    if cuda_simulated():
        return "numba"
    for name, module in (("nvmath", "nvmath.bindings.cublas"), ("cupy", "cupy")):
        try:
            __import__(module)
            return name
        except ImportError:
            continue
    return "numba"


BACKEND = _backend()


def _pointer(a) -> int:
    return a.__cuda_array_interface__["data"][0]


def _gemm_nvmath(a, b, c, trans_a, trans_b, alpha, beta) -> bool:
    global _NVMATH
    lda, ldb, ldc = _row_major_ld(a), _row_major_ld(b), _row_major_ld(c)
    if None in (lda, ldb, ldc) or c.dtype not in (np.float32, np.float64):
        return False
    if _NVMATH is None:
        _NVMATH = _NvmathBlas()
    blas = _NVMATH
    M, N = c.shape
    K = a.shape[0] if trans_a else a.shape[1]
    scalars = np.array([alpha, beta], dtype=c.dtype)  # host pointers (cuBLAS pointer mode host)
    fn = blas.cublas.sgemm if c.dtype == np.float32 else blas.cublas.dgemm
    # column-major view: c^T [N, M] = op(b)^T [N, K] @ op(a)^T [K, M]
    fn(blas.handle, int(trans_b), int(trans_a), N, M, K,
       scalars.ctypes.data, _pointer(b), ldb, _pointer(a), lda,
       scalars.ctypes.data + c.dtype.itemsize, _pointer(c), ldc)
    return True


def _gemm_cupy(a, b, c, trans_a, trans_b, alpha, beta):
    import cupy

    A, Bm, C = cupy.asarray(a), cupy.asarray(b), cupy.asarray(c)
    A = A.T if trans_a else A
    Bm = Bm.T if trans_b else Bm
    if alpha == 1 and beta == 0:
        cupy.matmul(A, Bm, out=C)
    else:
        prod = cupy.matmul(A, Bm)
        if beta == 0:
            cupy.multiply(prod, alpha, out=C)
        else:
            C *= beta
            C += alpha * prod


def gemm(a, b, c=None, *, trans_a=False, trans_b=False, alpha=1.0, beta=0.0):
    """``c = alpha * op(a) @ op(b) + beta * c`` on 2-D CUDA device arrays of one float dtype.

    ``op(x)`` is ``x.T`` when the matching ``trans_*`` flag is set. ``c [M, N]`` is allocated
    when None (then ``beta`` must be 0). Returns ``c``. Works on numba device arrays (and any
    ``__cuda_array_interface__`` array through the cuBLAS backends).
    """
    M, K = _op_shape(a, trans_a)
    K2, N = _op_shape(b, trans_b)
    if K != K2:
        raise ValueError(f"gemm: inner dimensions differ: op(a) is {M}x{K}, op(b) is {K2}x{N}")
    if c is None:
        if beta != 0:
            raise ValueError("gemm: beta != 0 needs an output array c")
        c = cuda.device_array((M, N), dtype=a.dtype)
    if tuple(c.shape) != (M, N):
        raise ValueError(f"gemm: c has shape {tuple(c.shape)}, expected {(M, N)}")
    if M == 0 or N == 0:
        return c
    if BACKEND == "nvmath" and K > 0 and _gemm_nvmath(a, b, c, trans_a, trans_b, alpha, beta):
        return c
    if BACKEND == "cupy":
        _gemm_cupy(a, b, c, trans_a, trans_b, alpha, beta)
        return c
    kernel = _TILED[np.dtype(c.dtype)]
    grid = (math.ceil(N / TILE), math.ceil(M / TILE))
    kernel[grid, (TILE, TILE)](a, b, c, bool(trans_a), bool(trans_b), c.dtype.type(alpha),
                               c.dtype.type(beta))
    return c
