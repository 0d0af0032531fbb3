"""Arrays reached by address inside numba kernels, so that a kernel called once per word takes
only integers.

A numba call costs a few hundred nanoseconds per array argument (its type is fingerprinted and
a view struct built) but tens per integer. The per-word query kernels therefore take the address
of a small int64 header that lists the model's arrays (``address``, length), and rebuild views of
them inside with ``i64_at``, ``f32_at`` and ``u64_at``. The object that owns the header must
keep every listed array alive (``NgramLM`` holds them as attributes), and the arrays must be
C-contiguous.
"""

from __future__ import annotations

import numpy as np
from numba import carray, njit, types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def _voidptr(typingctx, addr):
    """The integer ``addr`` as a ``void*`` (LLVM inttoptr)."""
    sig = types.voidptr(types.int64)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], cgutils.voidptr_t)

    return sig, codegen


@njit(cache=True, inline="always")
def f32_at(addr, n):
    """The float32 ``[n]`` array at address ``addr``."""
    return carray(_voidptr(addr), n, np.float32)


@njit(cache=True, inline="always")
def u64_at(addr, n):
    """The uint64 ``[n]`` array at address ``addr``."""
    return carray(_voidptr(addr), n, np.uint64)


@njit(cache=True, inline="always")
def i64_at(addr, n):
    """The int64 ``[n]`` array at address ``addr``."""
    return carray(_voidptr(addr), n, np.int64)


def address(a: np.ndarray) -> int:
    """Address of the first element of C-contiguous ``a`` (ValueError otherwise)."""
    if not a.flags.c_contiguous:
        raise ValueError("array reached by address must be C-contiguous")
    return int(a.__array_interface__["data"][0])
