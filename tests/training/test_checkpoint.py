"""Checkpoint files: atomic writes, the ``last`` pointer, rotation and stale temporary files."""

import os

import numpy as np

from asrkit.training.checkpoint import (
    checkpoint_dir,
    latest_checkpoint,
    read_checkpoint,
    write_checkpoint,
)


def test_write_rotates_points_last_and_removes_stale_temporaries(tmp_path):
    out = str(tmp_path)
    folder = checkpoint_dir(out)
    os.makedirs(folder)
    # what a writer killed mid-write leaves behind
    for stale in (".ckpt-00000001.npz.abc123.tmp", ".last.xyz.tmp"):
        (tmp_path / "checkpoints" / stale).write_bytes(b"torn")
    for step in range(1, 6):
        path = write_checkpoint(out, step, {"step": step}, {"param/w": np.full(3, step, "f4")},
                                keep=2)
    assert sorted(os.listdir(folder)) == ["ckpt-00000004.npz", "ckpt-00000005.npz", "last"]
    assert latest_checkpoint(out) == path
    header, arrays = read_checkpoint(path)
    assert header["step"] == 5 and np.array_equal(arrays["param/w"], np.full(3, 5, "f4"))
