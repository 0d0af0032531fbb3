"""One-file archives of arrays plus a JSON header, written atomically (models and checkpoints).

The file is a plain ``.npz`` (readable by ``numpy.load`` without pickles): the entry
``__header__`` holds UTF-8 JSON as a uint8 array, every other entry is one named array. Writing
goes through :func:`asrkit.utils.atomic_open`, so a crash never leaves a torn file.
"""

from __future__ import annotations

import json
import os
import zipfile

import numpy as np

from asrkit.utils import atomic_open

HEADER = "__header__"


class ArchiveError(ValueError):
    """An unreadable or inconsistent archive; the message names the file."""


def save_archive(path: str | os.PathLike, header: dict, arrays: dict[str, np.ndarray]) -> None:
    """Write ``header`` (JSON-serialisable dict) and ``arrays`` (name -> array) to ``path``.

    Names may not start with ``__``. The file replaces ``path`` only once fully written.
    """
    for name in arrays:
        if name.startswith("__"):
            raise ValueError(f"array name {name!r} is reserved (starts with '__')")
    entries = {HEADER: np.frombuffer(json.dumps(header, sort_keys=True).encode(), np.uint8)}
    entries.update({k: np.asarray(v) for k, v in arrays.items()})
    with atomic_open(path, "wb") as f:
        np.savez(f, **entries)


def load_archive(path: str | os.PathLike) -> tuple[dict, dict[str, np.ndarray]]:
    """Read an archive written by :func:`save_archive`; returns ``(header, {name: array})``."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ArchiveError(f"{path}: no such file")
    try:
        with np.load(path, allow_pickle=False) as z:
            if HEADER not in z.files:
                raise ArchiveError(f"{path}: not an asrkit archive (no {HEADER} entry)")
            header = json.loads(bytes(z[HEADER]).decode())
            arrays = {k: z[k] for k in z.files if k != HEADER}
    except (zipfile.BadZipFile, OSError, ValueError, json.JSONDecodeError) as e:
        if isinstance(e, ArchiveError):
            raise
        raise ArchiveError(f"{path}: cannot read archive: {e}") from e
    return header, arrays
