"""Small helpers shared by every layer: atomic file writes, progress bars, logging."""

from asrkit.utils.atomic import (
    atomic_open,
    atomic_write_bytes,
    atomic_write_text,
    remove_stale_temporaries,
)
from asrkit.utils.progress import progress

__all__ = ["atomic_open", "atomic_write_bytes", "atomic_write_text", "progress",
           "remove_stale_temporaries"]
