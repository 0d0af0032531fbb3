"""Checkpoints: everything needed to continue a run exactly, in one atomically written file.

A checkpoint is an archive (``asrkit.models.archive``) whose header holds the config, the model
header, the position (global step, epoch, next minibatch of the epoch's plan), the schedule and
counters, and whose arrays are the parameters (``param/<name>``), the learner's slots
(``opt/<slot>/<i>``), block-momentum state (``bmuf/<what>/<i>``) and each rank's 1-bit residuals
(``onebit/<rank>/<i>``). Files are ``OUT/checkpoints/ckpt-<step>.npz``; ``OUT/checkpoints/last``
names the newest, and is replaced only after the checkpoint itself is complete.
"""

from __future__ import annotations

import glob
import os

import numpy as np

from asrkit.models.archive import load_archive, save_archive
from asrkit.utils import atomic_write_text

FORMAT = "asrkit-checkpoint"
VERSION = 1


def checkpoint_dir(out_dir: str) -> str:
    """``OUT/checkpoints``."""
    return os.path.join(out_dir, "checkpoints")


def flatten(prefix: str, arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
    """``{prefix/i: array}`` for a list of arrays."""
    return {f"{prefix}/{i}": a for i, a in enumerate(arrays)}


def unflatten(prefix: str, arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Inverse of :func:`flatten` (in index order)."""
    items = [(int(k[len(prefix) + 1:]), v) for k, v in arrays.items()
             if k.startswith(prefix + "/") and k[len(prefix) + 1:].isdigit()]
    return [v for _, v in sorted(items, key=lambda kv: kv[0])]


def write_checkpoint(out_dir: str, step: int, header: dict, arrays: dict[str, np.ndarray],
                     keep: int = 3) -> str:
    """Write ``ckpt-<step>.npz`` then point ``last`` at it; keep the newest ``keep`` files.

    Also removes the hidden temporary files (``.ckpt-*.tmp``, ``.last.*.tmp``) that a writer
    killed mid-write leaves behind: only rank 0 writes, one checkpoint at a time, so none of
    them can belong to a write still in progress. Returns the checkpoint's path.
    """
    folder = checkpoint_dir(out_dir)
    os.makedirs(folder, exist_ok=True)
    name = f"ckpt-{step:08d}.npz"
    path = os.path.join(folder, name)
    save_archive(path, {"format": FORMAT, "version": VERSION, **header}, arrays)
    atomic_write_text(os.path.join(folder, "last"), name + "\n")
    if keep > 0:
        for old in sorted(glob.glob(os.path.join(folder, "ckpt-*.npz")))[:-keep]:
            if os.path.basename(old) != name:
                os.unlink(old)
    for stale in glob.glob(os.path.join(folder, ".ckpt-*.tmp")) + \
            glob.glob(os.path.join(folder, ".last.*.tmp")):
        try:
            os.unlink(stale)
        except FileNotFoundError:
            pass
    return path


def latest_checkpoint(out_dir: str) -> str | None:
    """Path of the newest complete checkpoint in ``out_dir`` (None when there is none)."""
    folder = checkpoint_dir(out_dir)
    last = os.path.join(folder, "last")
    if os.path.isfile(last):
        with open(last, encoding="utf-8") as f:
            name = f.read().strip()
        if name and os.path.isfile(os.path.join(folder, name)):
            return os.path.join(folder, name)
    found = sorted(glob.glob(os.path.join(folder, "ckpt-*.npz")))
    return found[-1] if found else None


def read_checkpoint(path: str) -> tuple[dict, dict[str, np.ndarray]]:
    """``(header, arrays)`` of a checkpoint; raises ValueError naming the file if it is not
    one."""
    header, arrays = load_archive(path)
    if header.get("format") != FORMAT:
        raise ValueError(f"{path}: not an asrkit checkpoint (format {header.get('format')!r})")
    return header, arrays
