"""Checkpoints: everything needed to continue a run exactly, in one atomically written file.

A checkpoint is an archive (``asrkit.utils.archive``) whose header holds the config, the model
header, the position (global step, epoch, next minibatch of the epoch's plan), the schedule and
counters, the learner's counters and scalars (``optimizer_count``, ``optimizer_samples``,
``optimizer_scalars``), and whose arrays are the parameters (``param/<name>``), the learner's
slots by parameter name (``opt/<slot>/<name>``, e.g. ``opt/m/lstm.W``; ``opt@<rank>/<slot>/..``
per rank under BMUF), block-momentum state (``bmuf/<what>/<i>``) and each rank's 1-bit residuals
(``onebit/<rank>/<name>``, shaped like the parameter; older checkpoints hold them as the
``[rows, cols]`` the exchange quantises, e.g. ``[32, 1]`` for a bias, and read into that shape).
Files are ``OUT/checkpoints/ckpt-<step>.npz``; ``OUT/checkpoints/last`` names the newest, and is
replaced only after the checkpoint itself is complete.

Version 1 (asrkit before one learner stack: slots as ``opt/slots/<i>``, ``opt/slots2/<i>``)
still reads, for its parameters (``asrkit model average``, ``[train] init`` after averaging);
resuming one is refused with a message saying so.

Reading trusts nothing: :func:`read_checkpoint` checks the header (counters, schedule, the model
header with its parameter shapes), reads only the arrays a checkpoint holds, each against the
shape its parameter gives it, and refuses NaN/inf. :func:`latest_checkpoint` returns the newest
checkpoint that reads: a damaged newest one (truncated by a full disk, a torn copy) is skipped with
a warning naming it, and the run resumes from the previous one; writing refuses non-finite
parameters, so a diverged run never replaces a good checkpoint.
"""

from __future__ import annotations

import glob
import math
import os
import re
import sys

import numpy as np

from asrkit.distributed.onebit import matrix_shape
from asrkit.learners import LEARNER_CLASSES
from asrkit.models import Archive, ArchiveError, check_model_header, non_finite, save_archive
from asrkit.utils import atomic_write_text
from asrkit.utils.archive import check_format

FORMAT = "asrkit-checkpoint"
VERSION = 2
NAME = re.compile(r"ckpt-(\d+)\.npz")
# header counters: name -> smallest value
COUNTERS = {"step": 0, "epoch": 0, "batch_index": 0, "optimizer_count": 0, "skipped_steps": 0,
            "ranks": 1, "bmuf_steps_in_block": 0}
# array prefixes a checkpoint holds by parameter index (<prefix>/<index>, local/<rank>/<index>)
PREFIXES = ("bmuf/global", "bmuf/start", "bmuf/delta")


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
    bad = non_finite({k: v for k, v in arrays.items() if k.startswith("param/")})
    if bad:
        raise ArchiveError(f"{checkpoint_dir(out_dir)}: checkpoint of step {step} not written: "
                           f"the parameters are not finite ({bad}); the run diverged (try a "
                           "smaller [learner].lr or a [learner].clip_norm)")
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


def _candidates(folder: str) -> list[str]:
    """Checkpoint paths, newest first: the one ``last`` names, then the others by step."""
    found = sorted((p for p in glob.glob(os.path.join(folder, "ckpt-*.npz"))
                    if NAME.fullmatch(os.path.basename(p))),
                   key=lambda p: int(NAME.fullmatch(os.path.basename(p)).group(1)), reverse=True)
    try:
        with open(os.path.join(folder, "last"), "rb") as f:
            name = f.read(4096).decode("utf-8", "replace").strip()
    except OSError:
        name = ""
    named = os.path.join(folder, name)
    if NAME.fullmatch(name) and named in found:  # a bare file name in this folder, nothing else
        found.remove(named)
        found.insert(0, named)
    return found


_verified: dict[str, tuple] = {}  # path -> (file signature, (header, arrays)) just checked


def _signature(path: str) -> tuple:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns, st.st_ino


def latest_checkpoint(out_dir: str, log=None) -> str | None:
    """Path of the newest intact checkpoint in ``out_dir`` (None when there is none).

    A checkpoint that does not read (see :func:`read_checkpoint`) is skipped with a warning
    through ``log`` (default: stderr) naming it, and the previous one is tried. Raises
    ArchiveError naming the folder when checkpoints exist but none is intact: resuming from
    scratch would silently throw the run away.
    """
    folder = checkpoint_dir(out_dir)
    say = log if log is not None else (lambda m: print(m, file=sys.stderr, flush=True))
    damaged = []
    for path in _candidates(folder):
        try:
            data = read_checkpoint(path)
        except ArchiveError as e:
            damaged.append(path)
            why = str(e).removeprefix(f"{path}: ")
            say(f"warning: {path}: damaged checkpoint skipped ({why}); trying the previous one")
            continue
        _verified.clear()
        _verified[path] = (_signature(path), data)
        return path
    if damaged:
        raise ArchiveError(f"{folder}: no intact checkpoint to resume from ({len(damaged)} "
                           "damaged, see the warnings above); remove the folder to start over")
    return None


def read_checkpoint(path: str) -> tuple[dict, dict[str, np.ndarray]]:
    """``(header, arrays)`` of a checkpoint, every part checked; raises ArchiveError (a
    ValueError) naming the file if it is not an intact one."""
    cached = _verified.pop(path, None)
    if cached is not None and os.path.isfile(path) and cached[0] == _signature(path):
        return cached[1]
    with Archive(path) as archive:
        header = archive.header
        shapes = _check_header(header, path)
        arrays = {}
        for name in archive.names:
            want = _expected_shape(name, shapes)
            if want is None:
                continue  # not something a checkpoint holds: never read
            arrays[name] = _read_member(archive, name, want)
    missing = [n for n in shapes if f"param/{n}" not in arrays]
    if missing:
        raise ArchiveError(f"{path}: parameters missing: {', '.join(missing)}")
    missing = _missing_slots(header, arrays)
    if missing:
        raise ArchiveError(f"{path}: learner slots missing: {', '.join(missing[:3])}")
    bad = non_finite(arrays)
    if bad:
        raise ArchiveError(f"{path}: arrays are not finite ({bad})")
    return header, arrays


def _read_member(archive: Archive, name: str, want: tuple) -> np.ndarray:
    """Member ``name`` of shape ``want``: a 1-bit residual in the ``[rows, cols]`` layout
    asrkit saved them in before is read as that and reshaped (the same values, in order)."""
    legacy = matrix_shape(want)
    if name.startswith("onebit/") and legacy != tuple(want) and archive.shape(name) == legacy:
        return archive.read(name, shape=legacy, kinds="f").reshape(want)
    return archive.read(name, shape=want, kinds="f")


def _check_header(header: dict, path: str) -> dict[str, tuple]:
    """Check a checkpoint header; returns the model's ``{parameter: shape}``."""
    check_format(header, path, FORMAT, VERSION, "asrkit checkpoint")
    for key, low in COUNTERS.items():
        v = header.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or v < low:
            raise ArchiveError(f"{path}: header key '{key}': expected an integer >= {low}, got "
                               f"{v!r}")
    schedule = header.get("schedule")
    scale = schedule.get("newbob_scale", 1.0) if isinstance(schedule, dict) else None
    best = schedule.get("best_cv") if isinstance(schedule, dict) else None
    if not _finite_number(scale) or scale <= 0 or not (best is None or _finite_number(best)):
        raise ArchiveError(f"{path}: header key 'schedule': expected an object (newbob_scale "
                           f"> 0 and a finite best_cv or null), got {schedule!r}")
    header.setdefault("optimizer_parameters", [])
    names = header["optimizer_parameters"]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ArchiveError(f"{path}: header key 'optimizer_parameters': expected a list of "
                           "parameter names")
    samples = header.get("optimizer_samples", 0)
    scalars = header.get("optimizer_scalars", [{}])
    if not isinstance(samples, int) or isinstance(samples, bool) or samples < 0 or \
            not isinstance(scalars, list) or not scalars or \
            not all(isinstance(d, dict) and all(map(_finite_number, d.values())) for d in scalars):
        raise ArchiveError(f"{path}: header keys 'optimizer_samples' / 'optimizer_scalars': "
                           "expected an integer >= 0 / a list of objects of finite numbers")
    if not isinstance(header.get("config"), dict) or not isinstance(header.get("model"), dict):
        raise ArchiveError(f"{path}: header keys 'config' and 'model' must be objects")
    return check_model_header(header["model"], f"{path}: model")[5]


def _missing_slots(header: dict, arrays: dict) -> list[str]:
    """The learner slot members that ``optimizer_parameters`` (the learner's parameter names)
    and the learner type call for and the checkpoint lacks (every rank's under BMUF)."""
    learner = header["config"].get("learner", {})
    cls = LEARNER_CLASSES.get(learner.get("type") if isinstance(learner, dict) else None)
    slots = cls.SLOTS if cls is not None else ()
    return [f"opt/{slot}/{name}" for slot in slots for name in header["optimizer_parameters"]
            if f"opt/{slot}/{name}" not in arrays and not all(
                f"opt@{r}/{slot}/{name}" in arrays for r in range(header["ranks"]))]


def _finite_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _expected_shape(name: str, shapes: dict[str, tuple]) -> tuple | None:
    """The shape member ``name`` must have (None: not a checkpoint member)."""
    if name.startswith("param/"):
        return shapes.get(name[len("param/"):])
    if name.startswith(("opt/", "opt@", "onebit/")):  # opt[@rank]/<slot>/<name>, onebit/<rank>/..
        parts = name.split("/", 2)
        return shapes.get(parts[2]) if len(parts) == 3 else None
    prefix, _, index = name.rpartition("/")
    if prefix not in PREFIXES and not prefix.startswith("local/"):
        return None
    order = list(shapes.values())
    return order[int(index)] if index.isdigit() and int(index) < len(order) else None
