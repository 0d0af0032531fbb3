"""One-file archives of arrays plus a JSON header, written atomically: the one npz format of
acoustic models, graph model files, LSTM LMs and training checkpoints.

The file is a plain ``.npz`` (readable by ``numpy.load`` without pickles): the entry
``__header__`` holds UTF-8 JSON as a uint8 array, every other entry is one named array. Writing
goes through :func:`asrkit.utils.atomic_open`, so a crash never leaves a torn file.

Reading goes through :class:`asrkit.utils.npz.NpzReader`: members are read only when asked for,
each one's npy header checked (dtype, shape, size) before its data is, so a damaged or hostile
file is an :class:`ArchiveError` naming it, never a crash, a huge allocation or a hang.
"""

from __future__ import annotations

import json
import os

import numpy as np

from asrkit.utils import atomic_open
from asrkit.utils.npz import NpzError, NpzReader

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


class Archive:
    """An archive open for reading: ``header`` (the JSON dict), ``names`` (the arrays it holds)
    ``shape(name)`` (what one declares) and ``read(name, shape=None, kinds=...)`` (one checked
    array). A context manager."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        try:
            self._npz = NpzReader(self.path)
        except NpzError as e:
            raise ArchiveError(str(e)) from None
        try:
            if HEADER not in self._npz:
                raise ArchiveError(f"{self.path}: not an asrkit archive (no {HEADER} entry)")
            raw = self._npz.read(HEADER, kinds="u", max_bytes=1 << 30)
            if raw.ndim != 1 or raw.dtype != np.uint8:
                raise ArchiveError(f"{self.path}: {HEADER} is not a byte string")
            try:
                header = json.loads(raw.tobytes().decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
                raise ArchiveError(f"{self.path}: corrupt header (not UTF-8 JSON: "
                                   f"{str(e)[:200]})") from None
            if not isinstance(header, dict):
                raise ArchiveError(f"{self.path}: corrupt header: not a JSON object (a "
                                   f"{type(header).__name__})")
        except (ArchiveError, NpzError) as e:
            self.close()
            raise ArchiveError(str(e)) from None
        self.header = header

    @property
    def names(self) -> list[str]:
        """The arrays in the file (the header excluded), in file order."""
        return [n for n in self._npz.names if n != HEADER]

    def __contains__(self, name: str) -> bool:
        return name != HEADER and name in self._npz

    def shape(self, name: str) -> tuple[int, ...]:
        """The shape array ``name`` declares (its header, checked; no data is read)."""
        try:
            return self._npz.info(name)[0]
        except NpzError as e:
            raise ArchiveError(str(e)) from None

    def read(self, name: str, shape: tuple | None = None, kinds: str = "biufc") -> np.ndarray:
        """The array ``name``; ``shape`` and ``kinds`` (dtype kinds, e.g. ``"f"``) are checked
        against its npy header before the data is read. Raises ArchiveError naming the file."""
        if name == HEADER:
            raise ArchiveError(f"{self.path}: {HEADER} is not an array")
        try:
            return self._npz.read(name, shape=shape, kinds=kinds)
        except NpzError as e:
            raise ArchiveError(str(e)) from None

    def close(self) -> None:
        """Close the file."""
        self._npz.close()

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def check_format(header: dict, where: str, fmt: str, version: int, what: str) -> None:
    """Raise ArchiveError naming ``where`` unless ``header`` has format tag ``fmt`` and an
    integer ``version`` of at most ``version`` (``what``: the kind of file, for the message)."""
    if header.get("format") != fmt:
        raise ArchiveError(f"{where}: not an {what} (format {header.get('format')!r})")
    v = header.get("version", 0)
    if not isinstance(v, int) or isinstance(v, bool) or v > version:
        raise ArchiveError(f"{where}: {what} format version {v!r} is not one this asrkit reads "
                           f"(<= {version})")


def load_archive(path: str | os.PathLike, names=None) -> tuple[dict, dict[str, np.ndarray]]:
    """Read an archive written by :func:`save_archive`; returns ``(header, {name: array})``
    with the arrays ``names`` (default: all of them)."""
    with Archive(path) as a:
        wanted = a.names if names is None else list(names)
        return a.header, {k: a.read(k) for k in wanted}
