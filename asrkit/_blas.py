"""Pick OpenBLAS's AVX-512 kernels on AMD CPUs that its runtime detection does not know.

numpy's wheels ship OpenBLAS built with ``DYNAMIC_ARCH``: at load time it reads the CPU model and
picks a kernel set. OpenBLAS 0.3.31 does not know AMD's Zen 5 (family 0x1A) and falls back to
its Haswell (AVX2) kernels, which run sgemm at half the speed its SkylakeX (AVX-512) kernels
reach on the same core: 110 vs 210 GFLOP/s for the big GEMMs of an LSTM layer, and 87 vs 116
GFLOP/s for its per-step ``[16, 320] @ [320, 1280]``, one thread, on the 2-core EPYC VM asrkit is
developed on. :func:`choose_openblas_core` sets ``OPENBLAS_CORETYPE=SkylakeX`` on such CPUs
before numpy loads OpenBLAS, also where the machine pins ``OPENBLAS_CORETYPE=Haswell``, as the
images asrkit is developed on do (``ASRKIT_OPENBLAS_CORETYPE=keep`` opts out). It has to run
before the first ``import numpy`` of the process, which is why ``asrkit/__init__.py`` calls it
and why it imports nothing heavy itself.
"""

from __future__ import annotations

import os
import sys

# what OpenBLAS's SkylakeX kernels execute (its own check in driver/others/dynamic.c)
AVX512_FLAGS = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"})


def cpu_info(path: str = "/proc/cpuinfo") -> tuple[str, int, frozenset]:
    """The first CPU's vendor id, family number and flags from ``/proc/cpuinfo``.

    Returns ``("", 0, frozenset())`` where the file cannot be read (not Linux).
    """
    vendor, family, flags = "", 0, frozenset()
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "vendor_id":
                    vendor = value.strip()
                elif key == "cpu family":
                    family = int(value)
                elif key == "flags":
                    flags = frozenset(value.split())
                    break
    except (OSError, ValueError):
        pass
    return vendor, family, flags


def openblas_core_for(vendor: str, family: int, flags: frozenset) -> str | None:
    """The OpenBLAS core type to force for this CPU, or None to keep OpenBLAS's own choice.

    AMD CPUs of family 0x1A (Zen 5) and later with the AVX-512 subsets of SkylakeX get
    ``"SkylakeX"``; everything else None (Intel CPUs and Zen 4 are detected correctly).
    """
    if vendor == "AuthenticAMD" and family >= 0x1A and AVX512_FLAGS <= flags:
        return "SkylakeX"
    return None


# OpenBLAS core types whose sgemm kernels use AVX-512
AVX512_CORES = frozenset({"skylakex", "cooperlake", "sapphirerapids"})


def choose_openblas_core(environ=None, cpu=None) -> str | None:
    """Set ``OPENBLAS_CORETYPE`` for this process (and its children) where it pays.

    ``ASRKIT_OPENBLAS_CORETYPE`` decides when set: a core name to use, or ``keep`` to leave
    OpenBLAS and ``OPENBLAS_CORETYPE`` alone. Otherwise, on a CPU that :func:`openblas_core_for`
    names, an unset ``OPENBLAS_CORETYPE`` or one naming a kernel set without AVX-512 (some
    machine images pin ``Haswell`` for every program) is replaced. Does nothing once numpy is
    imported (OpenBLAS has then picked its kernels). ``environ`` (default ``os.environ``) is the
    mapping read and written, ``cpu`` (default :func:`cpu_info`) the ``(vendor, family, flags)``
    of the machine; both are for tests. Returns the value set, or None.
    """
    if environ is None:
        if "numpy" in sys.modules:
            return None
        environ = os.environ
    wanted = environ.get("ASRKIT_OPENBLAS_CORETYPE", "").strip()
    if wanted.lower() == "keep":
        return None
    if not wanted:
        current = environ.get("OPENBLAS_CORETYPE", "").strip().lower()
        if current in AVX512_CORES:
            return None
        wanted = openblas_core_for(*(cpu or cpu_info()))
    if wanted:
        environ["OPENBLAS_CORETYPE"] = wanted
    return wanted or None


# OpenBLAS's idle workers spin for 2**28 cycles (about 0.1 s) before they sleep, and asrkit's
# steps mix numpy GEMMs with numba kernels and threads of its own, which the spinning workers
# rob of their cores: a Conformer block's step at 2 threads took 544 ms with the default and
# 449 ms with 2**4 cycles (its attention threads twice as fast), and an LSTM step the same.
THREAD_TIMEOUT = "4"


def choose_thread_timeout(environ=None) -> str | None:
    """Set ``OPENBLAS_THREAD_TIMEOUT`` (log2 of the cycles OpenBLAS's idle workers spin before
    sleeping) to :data:`THREAD_TIMEOUT` unless it is set already; like
    :func:`choose_openblas_core` it only acts before numpy loads OpenBLAS. ``environ``
    (default ``os.environ``) is for tests. Returns the value set, or None."""
    if environ is None:
        if "numpy" in sys.modules:
            return None
        environ = os.environ
    if environ.get("OPENBLAS_THREAD_TIMEOUT", "").strip():
        return None
    environ["OPENBLAS_THREAD_TIMEOUT"] = THREAD_TIMEOUT
    return THREAD_TIMEOUT
