"""Atomic file writes: a file either has its old content or its complete new content.

The data goes to a temporary file in the same folder (``.NAME.XXXXXXXX.tmp``), is flushed and
fsynced, then renamed over the target (``os.replace`` is atomic on POSIX), so a crash never
leaves a torn output. A writer killed outright (SIGKILL, power loss) leaves its temporary file
behind; the writer holds an advisory lock (``flock``) on it while it writes, so
``remove_stale_temporaries`` can tell such leftovers from a write still in progress.
"""

from __future__ import annotations

import contextlib
import glob
import os
import tempfile
from collections.abc import Iterator
from typing import IO

try:
    import fcntl
except ImportError:  # not POSIX: no locks, and stale temporaries are left alone
    fcntl = None


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
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held until the file is closed: "a writer is alive"
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


def remove_stale_temporaries(path: str | os.PathLike) -> list[str]:
    """Remove the temporary files that ``atomic_open`` writers of ``path`` killed mid-write
    left beside it (``.NAME.*.tmp``), skipping any a live writer still holds; returns the
    paths removed. Does nothing where advisory locks are unavailable."""
    if fcntl is None:
        return []
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    pattern = os.path.join(glob.escape(folder), f".{glob.escape(os.path.basename(path))}.*.tmp")
    removed = []
    for tmp in glob.glob(pattern):
        try:
            fd = os.open(tmp, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # a writer holds it
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
                removed.append(tmp)
        finally:
            os.close(fd)
    return removed
