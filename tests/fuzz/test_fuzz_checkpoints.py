"""Fuzzing checkpoints through ``asrkit train --resume``: a damaged newest checkpoint falls back
to the previous intact one with a warning naming the damaged file; nothing intact left is a clean
failure naming the folder, never a silent restart from scratch.

A tiny run (4-dim features, a 4-cell LSTM) stops after step 3 with checkpoints at steps 1, 2
and 3; each case damages a copy and resumes to step 4 in a child process with a time limit.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from tests.fuzz.harness import assert_clean_failure, mutations, run_cli
from tests.fuzz.npz_files import header_of, npy_bytes, read_members, with_header, write_members
from tests.training.datadirs import synthetic_dir

slow = pytest.mark.slow
CONF = """[network]
[[network.layers]]
type = "lstm"
hidden = 4
[reader]
data_dir = "{data}"
tokens = "{tokens}"
minibatch_frames = 60
[learner]
type = "adam"
lr = 0.01
[train]
epochs = 1
checkpoint_every = 1
keep_checkpoints = 3
max_steps = 3
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """(config, out dir) of a run stopped after step 3, checkpoints 1, 2 and 3 in place."""
    root = tmp_path_factory.mktemp("ckpt")
    data, tokens = synthetic_dir(str(root / "train"), num_utts=10, dim=4)
    conf = root / "train.toml"
    conf.write_text(CONF.format(data=data, tokens=tokens))
    out = str(root / "exp")
    res = run_cli(["train", str(conf), "--out", out])
    assert res.returncode == 0, res.describe()
    names = sorted(os.listdir(os.path.join(out, "checkpoints")))
    assert names == ["ckpt-00000001.npz", "ckpt-00000002.npz", "ckpt-00000003.npz", "last"]
    return str(conf), out


def _copy(run_dir, tmp_path):
    conf, out = run_dir
    dst = str(tmp_path / "exp")
    shutil.copytree(out, dst)
    return conf, dst, os.path.join(dst, "checkpoints")


def _resume(conf, out):
    return run_cli(["train", conf, "--out", out, "--resume", "--set", "train.max_steps=4"])


def _assert_fell_back(res, bad: str, used: str):
    """Exit 0, a warning naming the damaged ``bad`` file, resumed from ``used``."""
    assert res.returncode == 0, res.describe()
    assert "Traceback" not in res.stderr, res.describe()
    warn = [ln for ln in res.stderr.splitlines() if bad in ln]
    assert warn and "warning" in warn[0], res.describe()
    assert f"resumed from {used}" in res.stderr, res.describe()


def _truncate(path):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def _empty(path):
    open(path, "wb").close()


def _bad_step(path):
    members = read_members(path)
    write_members(path, with_header(members, {**header_of(members), "step": "three"}))


def _bad_shape(path):
    members = read_members(path)
    write_members(path, {**members, "param/output.b": npy_bytes(np.zeros(9, np.float32))})


def _no_schedule(path):
    members = read_members(path)
    h = header_of(members)
    h.pop("schedule")
    write_members(path, with_header(members, h))


DAMAGE = {"truncated": _truncate, "empty": _empty, "header-step-a-string": _bad_step,
          "param-wrong-shape": _bad_shape, "header-no-schedule": _no_schedule}


@pytest.mark.parametrize("how", [d if d == "truncated" else pytest.param(d, marks=slow)
                                 for d in DAMAGE])
def test_a_damaged_newest_checkpoint_falls_back_to_the_previous(run_dir, tmp_path, how):
    conf, out, folder = _copy(run_dir, tmp_path)
    newest = os.path.join(folder, "ckpt-00000003.npz")
    DAMAGE[how](newest)
    _assert_fell_back(_resume(conf, out), newest, os.path.join(folder, "ckpt-00000002.npz"))


@slow
@pytest.mark.parametrize("seed", range(8))
def test_byte_mutants_of_the_newest_checkpoint(run_dir, tmp_path, seed):
    """A flipped byte either leaves the checkpoint readable (a byte the format ignores) or makes
    the run fall back to the previous checkpoint."""
    conf, out, folder = _copy(run_dir, tmp_path)
    newest = os.path.join(folder, "ckpt-00000003.npz")
    with open(newest, "rb") as f:
        (data,) = mutations(f.read(), seed, 1, text=False)
    with open(newest, "wb") as f:
        f.write(data)
    res = _resume(conf, out)
    assert res.returncode == 0, res.describe()
    if f"warning: {newest}" in res.stderr:
        _assert_fell_back(res, newest, os.path.join(folder, "ckpt-00000002.npz"))
    else:
        assert f"resumed from {newest}" in res.stderr, res.describe()


@slow
@pytest.mark.parametrize("last", [b"\xff\xfe\x00garbage\n", b"ckpt-00000009.npz\n",
                                  b"../../etc/passwd\n"], ids=["binary", "missing", "outside"])
def test_a_bad_last_pointer_uses_the_newest_intact_checkpoint(run_dir, tmp_path, last):
    conf, out, folder = _copy(run_dir, tmp_path)
    with open(os.path.join(folder, "last"), "wb") as f:
        f.write(last)
    res = _resume(conf, out)
    assert res.returncode == 0, res.describe()
    assert "Traceback" not in res.stderr, res.describe()
    assert f"resumed from {os.path.join(folder, 'ckpt-00000003.npz')}" in res.stderr, \
        res.describe()


@slow
def test_no_intact_checkpoint_is_a_clean_failure(run_dir, tmp_path):
    conf, out, folder = _copy(run_dir, tmp_path)
    for step in (1, 2, 3):
        _truncate(os.path.join(folder, f"ckpt-{step:08d}.npz"))
    res = _resume(conf, out)
    assert_clean_failure(res, names=folder)
    assert not os.path.exists(os.path.join(out, "final.mdl"))
