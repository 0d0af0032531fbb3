"""Checkpoint files: atomic writes, the ``last`` pointer, rotation, stale temporary files, and
reading that trusts nothing (a damaged newest checkpoint falls back to the previous one)."""

import os

import numpy as np
import pytest

from asrkit.distributed import LocalCommunicator, OneBitAggregator
from asrkit.distributed.onebit import as_matrix
from asrkit.models import ArchiveError, Model
from asrkit.training.checkpoint import (
    checkpoint_dir,
    latest_checkpoint,
    read_checkpoint,
    write_checkpoint,
)

MODEL = Model({"layers": [{"type": "dense", "dim": 3}]}, 2, ["<blk>", "a"])


def _write(out, step, keep=3, changes=None):
    """A checkpoint of the tiny dense model, as the Trainer writes one."""
    header = {"config": {}, "model": MODEL.header(), "step": step, "epoch": 0,
              "batch_index": step, "schedule": {"newbob_scale": 1.0, "best_cv": None},
              "optimizer_count": step, "skipped_steps": 0, "ranks": 1, "mode": "allreduce",
              "bmuf_steps_in_block": 0}
    arrays = {f"param/{k}": np.full(p.shape, step, np.float32) for k, p in MODEL.params.items()}
    arrays.update({f"opt/v/{k}": np.zeros(p.shape, np.float32) for k, p in MODEL.params.items()})
    for k, v in (changes or {}).items():
        (arrays if "/" in k else header)[k] = v
    return write_checkpoint(out, step, header, arrays, keep=keep)


def test_write_rotates_points_last_and_removes_stale_temporaries(tmp_path):
    out = str(tmp_path)
    folder = checkpoint_dir(out)
    os.makedirs(folder)
    # what a writer killed mid-write leaves behind
    for stale in (".ckpt-00000001.npz.abc123.tmp", ".last.xyz.tmp"):
        (tmp_path / "checkpoints" / stale).write_bytes(b"torn")
    for step in range(1, 6):
        path = _write(out, step, keep=2)
    assert sorted(os.listdir(folder)) == ["ckpt-00000004.npz", "ckpt-00000005.npz", "last"]
    assert latest_checkpoint(out) == path
    header, arrays = read_checkpoint(path)
    assert header["step"] == 5
    assert np.array_equal(arrays["param/output.W"], np.full((3, 2), 5, "f4"))
    assert sorted(arrays) == sorted([f"param/{k}" for k in MODEL.params]
                                    + [f"opt/v/{k}" for k in MODEL.params])


def test_a_damaged_newest_checkpoint_falls_back_with_a_warning(tmp_path):
    out = str(tmp_path)
    first, second, third = (_write(out, s) for s in (1, 2, 3))
    with open(third, "r+b") as f:
        f.truncate(os.path.getsize(third) // 2)
    said = []
    assert latest_checkpoint(out, log=said.append) == second
    assert len(said) == 1 and said[0].startswith(f"warning: {third}: damaged checkpoint")
    with open(second, "r+b") as f:
        f.seek(-30, os.SEEK_END)
        f.write(b"\xff" * 10)  # the zip directory
    said.clear()
    assert latest_checkpoint(out, log=said.append) == first and len(said) == 2
    os.truncate(first, 0)
    with pytest.raises(ArchiveError, match="no intact checkpoint to resume from"):
        latest_checkpoint(out, log=said.append)


@pytest.mark.parametrize("change,match", [
    ({"step": "three"}, "header key 'step': expected an integer >= 0"),
    ({"ranks": 0}, "header key 'ranks': expected an integer >= 1"),
    ({"schedule": {"newbob_scale": float("nan"), "best_cv": None}}, "header key 'schedule'"),
    ({"model": {"format": "x"}}, "not an asrkit model"),
    ({"param/output.b": np.zeros(5, np.float32)}, r"member 'param/output.b': shape \[5\]"),
    ({"opt/v/output.b": np.zeros((4, 4), np.float32)}, r"member 'opt/v/output.b': shape \[4, 4\]"),
    ({"opt/v/output.W": np.ones((3, 2), np.int64)}, "expected one of kinds 'f'"),
    ({"config": {"learner": {"type": "adam"}}, "optimizer_parameters": ["output.b"]},
     "learner slots missing: opt/m/output.b"),
    ({"onebit/0/output.b": np.zeros((1, 2), np.float32)},
     r"member 'onebit/0/output.b': shape \[1, 2\], expected \[2\]"),
], ids=["step", "ranks", "schedule", "model", "param-shape", "slot-shape", "slot-dtype",
        "slot-missing", "residual-shape"])
def test_every_part_of_a_checkpoint_is_checked(tmp_path, change, match):
    out = str(tmp_path)
    good = _write(out, 1)
    bad = _write(out, 2, changes=change)
    with pytest.raises(ArchiveError, match=match):
        read_checkpoint(bad)
    assert latest_checkpoint(out, log=lambda m: None) == good


def test_non_finite_parameters_are_never_written(tmp_path):
    out = str(tmp_path)
    good = _write(out, 1)
    with pytest.raises(ArchiveError, match="step 2 not written: the parameters are not finite"):
        _write(out, 2, changes={"param/output.b": np.array([0, np.nan], np.float32)})
    assert latest_checkpoint(out) == good


@pytest.mark.parametrize("last", [b"\xff\xfe junk", b"../../etc/passwd", b"ckpt-00000009.npz",
                                  b""], ids=["binary", "outside", "missing", "empty"])
def test_a_bad_last_pointer_falls_back_to_the_newest_file(tmp_path, last):
    out = str(tmp_path)
    _write(out, 1)
    newest = _write(out, 2)
    (tmp_path / "checkpoints" / "last").write_bytes(last)
    assert latest_checkpoint(out, log=lambda m: None) == newest


@pytest.mark.parametrize("legacy", [False, True], ids=["now", "before-the-fix"])
def test_one_bit_residuals_round_trip_and_the_resumed_exchange_continues_exactly(tmp_path,
                                                                                  legacy):
    """Residuals of a matrix and of bias vectors (``[3]``, once saved as ``[3, 1]``) read back
    in their parameter's shape, and an aggregator restored from them quantises as the one
    that was never stopped."""
    rng = np.random.default_rng(0)
    names = list(MODEL.params)
    steps = [[rng.normal(size=p.shape).astype(np.float32) for p in MODEL.params.values()]
             for _ in range(4)]
    agg = OneBitAggregator(LocalCommunicator(), min_size=1)  # every tensor quantised
    for grads in steps[:2]:
        agg.aggregate_([g.copy() for g in grads])
    saved = agg.state_dict()["residuals"]
    assert [r.shape for r in saved] == [p.shape for p in MODEL.params.values()]
    if legacy:  # the [rows, cols] layout asrkit wrote them in before
        saved = [as_matrix(r) for r in saved]
    path = _write(str(tmp_path), 2, changes={f"onebit/0/{k}": r for k, r in zip(names, saved)})
    _, arrays = read_checkpoint(path)
    resumed = OneBitAggregator(LocalCommunicator(), min_size=1)
    resumed.load_state_dict({"residuals": [arrays[f"onebit/0/{k}"] for k in names]})
    for grads in steps[2:]:
        a, b = [g.copy() for g in grads], [g.copy() for g in grads]
        agg.aggregate_(a)
        resumed.aggregate_(b)
        for k, x, y in zip(names, a, b):
            np.testing.assert_array_equal(y, x, err_msg=k)
    for k, x, y in zip(names, agg.residuals, resumed.residuals):
        np.testing.assert_array_equal(y, x, err_msg=k)
