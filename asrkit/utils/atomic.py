"""Atomic file writes: a file either has its old content or its complete new content.

The data goes to a temporary file in the same folder, is flushed and fsynced, then renamed over
the target (``os.replace`` is atomic on POSIX), so a crash never leaves a torn output.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from typing import IO


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", **kwargs) -> Iterator[IO]:
    """Open ``path`` for writing through a temporary file that replaces it on success.

    Takes a path and an ``open`` mode ("w", "wb", "wt"); yields the open file object. On an
    exception the temporary file is removed and ``path`` is untouched.
    """
    if not any(m in mode for m in "wx"):
        raise ValueError(f"atomic_open writes only; got mode {mode!r}")
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    # mkstemp makes the file 0600; give it the mode an ordinary open() would (0666 & ~umask)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    try:
        with os.fdopen(fd, mode.replace("x", "w"), **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` atomically."""
    with atomic_open(path, "w", encoding=encoding) as f:
        f.write(text)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_open(path, "wb") as f:
        f.write(data)
