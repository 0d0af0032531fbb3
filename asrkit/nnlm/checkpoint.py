"""LSTM LM model files: one ``.npz`` holding a JSON header and the parameters.

The header (entry ``__header__``, UTF-8 JSON as uint8) holds the format tag, the network config,
the vocabulary (ids = positions) and the training history; every other entry is one parameter
by name (``embedding.E``, ``lstm.weight_ih_l0``, ...). ``numpy.load`` reads it without pickles;
the file is written through :func:`asrkit.utils.atomic_open`, so it is never torn.
"""

from __future__ import annotations

import json
import os

import numpy as np

from asrkit.utils import atomic_open
from asrkit.utils.npz import NpzError, NpzReader

FORMAT = "asrkit-lstm-lm"
VERSION = 1
HEADER = "__header__"


class ModelFileError(ValueError):
    """An unreadable or inconsistent model file; the message names the file."""


def write_model_file(path: str | os.PathLike, header: dict, arrays: dict[str, np.ndarray]) -> None:
    """Write ``header`` (JSON-ready dict; the format tag is added) and ``arrays`` to ``path``."""
    head = {"format": FORMAT, "version": VERSION, **header}
    entries = {HEADER: np.frombuffer(json.dumps(head).encode("utf-8"), np.uint8)}
    entries.update({k: np.ascontiguousarray(v) for k, v in arrays.items()})
    with atomic_open(path, "wb") as f:
        np.savez(f, **entries)


def read_model_file(path: str | os.PathLike, want=None) -> tuple[dict, dict[str, np.ndarray]]:
    """Read a file written by :func:`write_model_file`; returns ``(header, {name: array})``
    with the arrays whose names ``want(name)`` accepts (default: all).

    Reading goes through :class:`asrkit.utils.npz.NpzReader`: each member's npy header is
    checked (number dtype, size that the file backs and memory holds) before its data is read,
    and members not wanted are never read. Errors are ModelFileError naming the file.
    """
    path = os.fspath(path)
    try:
        with NpzReader(path) as z:
            if HEADER not in z:
                raise ModelFileError(f"{path}: not an asrkit LSTM LM (no {HEADER} entry)")
            raw = z.read(HEADER, kinds="u", max_bytes=1 << 30)
            try:
                header = json.loads(raw.tobytes().decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
                raise ModelFileError(f"{path}: corrupt header: {str(e)[:200]}") from None
            if not isinstance(header, dict):
                raise ModelFileError(f"{path}: corrupt header: not a JSON object")
            arrays = {k: z.read(k) for k in z.names
                      if k != HEADER and (want is None or want(k))}
    except NpzError as e:
        raise ModelFileError(str(e).replace(": not an npz archive", ": not an asrkit LSTM LM "
                                            "(npz) file")) from None
    if header.get("format") != FORMAT:
        raise ModelFileError(f"{path}: format {header.get('format')!r} is not {FORMAT!r}")
    version = header.get("version", 0)
    if not isinstance(version, int) or isinstance(version, bool) or version > VERSION:
        raise ModelFileError(f"{path}: format version {version!r} is not one this asrkit "
                             f"reads (<= {VERSION})")
    return header, arrays
