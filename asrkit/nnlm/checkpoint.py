"""LSTM LM model files: one ``.npz`` holding a JSON header and the parameters.

The header (entry ``__header__``, UTF-8 JSON as uint8) holds the format tag, the network config,
the vocabulary (ids = positions) and the training history; every other entry is one parameter
by name (``embedding.E``, ``lstm.weight_ih_l0``, ...). ``numpy.load`` reads it without pickles;
the file is written through :func:`asrkit.utils.atomic_open`, so it is never torn.
"""

from __future__ import annotations

import json
import os
import zipfile

import numpy as np

from asrkit.utils import atomic_open

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


def read_model_file(path: str | os.PathLike) -> tuple[dict, dict[str, np.ndarray]]:
    """Read a file written by :func:`write_model_file`; returns ``(header, {name: array})``."""
    if not os.path.exists(path):
        raise ModelFileError(f"{path}: no such file")
    try:
        with np.load(path, allow_pickle=False) as z:
            if HEADER not in z.files:
                raise ModelFileError(f"{path}: not an asrkit LSTM LM (no {HEADER} entry)")
            try:
                header = json.loads(z[HEADER].tobytes().decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise ModelFileError(f"{path}: corrupt header: {e}") from None
            arrays = {k: z[k] for k in z.files if k != HEADER}
    except ModelFileError:
        raise
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        raise ModelFileError(f"{path}: not an asrkit LSTM LM (npz) file: {e}") from None
    if header.get("format") != FORMAT:
        raise ModelFileError(f"{path}: format {header.get('format')!r} is not {FORMAT!r}")
    if int(header.get("version", 0)) > VERSION:
        raise ModelFileError(f"{path}: format version {header['version']} is newer than this "
                             f"asrkit reads ({VERSION})")
    return header, arrays
