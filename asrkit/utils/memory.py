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
