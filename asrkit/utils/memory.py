"""How much memory this machine (or this container) has, and byte counts for messages.

Sizes read from files or configs are checked against :func:`memory_limit_bytes` before anything
is allocated, so an absurd size is a one-line error with the figure instead of a MemoryError
minutes later (or the OOM killer).
"""

from __future__ import annotations

import os


def memory_limit_bytes() -> int:
    """Physical memory, or the cgroup's limit when a container sets a lower one (bytes)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = 1 << 40
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path, encoding="ascii") as f:
                text = f.read().strip()
        except (OSError, UnicodeDecodeError):
            continue
        if text.isdigit() and 0 < int(text) < total:
            total = int(text)
    return int(total)


def format_bytes(n: float) -> str:
    """``n`` bytes in binary units, e.g. ``238.4 GiB``."""
    n = float(n)
    if abs(n) < 1024:
        return f"{n:.0f} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if abs(n) < 1024:
            return f"{n:.1f} {unit}"
    return f"{n / 1024:.1f} PiB"


# glibc mallopt parameters
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 << 20       # glibc's largest (HEAP_MAX_SIZE / 2 on 64-bit)
TRIM_THRESHOLD = 1 << 30
MALLOC_ENV = "ASRKIT_MALLOC"    # "default": leave glibc's malloc as it is
_MALLOC_TUNED: list = []


def keep_freed_memory() -> bool:
    """Let glibc's malloc keep freed blocks of up to 32 MiB for reuse instead of returning them
    to the system; once per process, where the C library is glibc and ``ASRKIT_MALLOC`` is not
    ``default``. Returns whether it is in effect.

    A training step allocates its activations and gradients afresh (numpy arrays of megabytes),
    and by default glibc serves blocks that large with ``mmap`` and trims the top of its heap
    once more than its trim threshold lies free (128 KiB, adapting up to 64 MiB): each step's
    memory then comes back as fresh pages, which the kernel faults in and zeroes one 4 KiB page
    at a time (a Conformer block's step on one thread: 16,200 page faults, 580 ms against 540
    ms without them). With a fixed mmap threshold of 32 MiB and a trim threshold of 1 GiB, the
    blocks freed at the end of a step serve the next one. The cost is that the process keeps
    its peak heap (up to 1 GiB of it free) instead of shrinking between steps, as a caching
    allocator (torch's on CUDA) does. The graph executor calls this when it is made.
    """
    if _MALLOC_TUNED:
        return _MALLOC_TUNED[0]
    ok = False
    if os.environ.get(MALLOC_ENV, "").strip().lower() != "default":
        try:
            import ctypes

            libc = ctypes.CDLL(None)
            if hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "mallopt"):
                ok = bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and \
                    bool(libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
        except (OSError, AttributeError):
            ok = False
    _MALLOC_TUNED.append(ok)
    return ok
