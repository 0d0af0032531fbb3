"""Data-parallel training under ``mpiexec -n 2`` against one rank on the same global minibatches."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from asrkit.distributed import shard_by_duration
from asrkit.io import DataDir
from asrkit.models import load
from asrkit.training import Reader, Trainer, load_train_config
from tests.training.datadirs import synthetic_dir

pytestmark = pytest.mark.mpi
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CONFIG = """
[network]
[[network.layers]]
type = "blstm"
hidden = 8
num_layers = 2
[reader]
data_dir = "{data}"
tokens = "{tokens}"
minibatch_frames = 240
bucket_pool = 8
[learner]
type = "sgd"
lr = 0.2
momentum = 0.9
clip_norm = 1.0
[distributed]
mode = "{mode}"
block_size = 2
onebit_min_size = 16
[train]
epochs = 2
log_every = 1
"""


def _mpiexec():
    exe = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return exe if os.path.exists(exe) else shutil.which("mpiexec")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("mpi_train")
    data, tokens = synthetic_dir(str(root / "train"), num_utts=16)
    confs = {}
    for mode in ("allreduce", "1bit", "bmuf"):
        confs[mode] = root / f"{mode}.toml"
        confs[mode].write_text(CONFIG.format(data=data, tokens=tokens, mode=mode))
    return root, confs


def _train(conf, out, n=2, *extra):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               NUMBA_NUM_THREADS="1", PYTHONPATH=ROOT)
    cmd = [_mpiexec(), "-n", str(n), sys.executable, "-m", "asrkit", "train", str(conf),
           "--out", str(out), *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def _params(out):
    return load(os.path.join(out, "final.mdl")).state_dict()


class _UnionReader:
    """One rank reading, at each step, the union of what the two ranks' shards read."""

    def __init__(self, readers):
        self.readers = readers
        self.tokens, self.dim, self.problems = readers[0].tokens, readers[0].dim, []

    def plan(self, epoch):
        plans = [r.plan(epoch) for r in self.readers]
        n = max(len(p) for p in plans)
        return [[u for p in plans if i < len(p) for u in p[i]] for i in range(n)]

    def load(self, utts, epoch=0, index=0):
        return self.readers[0].load(utts, epoch, index)


def test_two_rank_allreduce_equals_one_rank_on_the_global_minibatches(corpus, tmp_path):
    _, confs = corpus
    _train(confs["allreduce"], tmp_path / "two")
    cfg = load_train_config(confs["allreduce"], out_dir=str(tmp_path / "one"))
    rc = cfg.reader
    readers = [Reader(rc, rank=k, size=2, minibatch_frames=rc.minibatch_frames // 2,
                      log=lambda m: None) for k in range(2)]
    Trainer(cfg, reader=_UnionReader(readers), log=lambda m: None).train()
    one, two = _params(tmp_path / "one"), _params(tmp_path / "two")
    for k in one:
        np.testing.assert_allclose(two[k], one[k], rtol=1e-4, atol=2e-5, err_msg=k)


@pytest.mark.parametrize("mode", ["allreduce", pytest.param("1bit", marks=pytest.mark.slow),
                                  "bmuf"])
def test_multi_rank_resume_after_a_stop_matches_an_uninterrupted_run(corpus, tmp_path, mode):
    _, confs = corpus
    full = _train(confs[mode], tmp_path / "full")
    assert "wrote" in full.stderr
    _train(confs[mode], tmp_path / "part", 2, "--set", "train.max_steps=3")
    assert not (tmp_path / "part" / "final.mdl").exists()
    _train(confs[mode], tmp_path / "part", 2, "--resume")
    a, b = _params(tmp_path / "full"), _params(tmp_path / "part")
    for k in a:
        np.testing.assert_allclose(b[k], a[k], rtol=1e-5, atol=1e-6, err_msg=f"{mode} {k}")
    log = (tmp_path / "part" / "train_log.jsonl").read_text().splitlines()
    assert len(log) == len((tmp_path / "full" / "train_log.jsonl").read_text().splitlines())


def test_a_failing_rank_aborts_the_training_job_with_a_message(corpus, tmp_path):
    _, confs = corpus
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("")  # rank 0 cannot create OUT under a file; rank 1 writes nothing
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1", PYTHONPATH=ROOT)
    r = subprocess.run([_mpiexec(), "-n", "2", sys.executable, "-m", "asrkit", "train",
                        str(confs["allreduce"]), "--out", str(blocker / "out")],
                       capture_output=True, text=True, timeout=180, env=env, cwd=ROOT)
    assert r.returncode != 0
    assert "rank 0 of 2 failed; aborting all ranks" in r.stderr
    assert "not_a_dir" in r.stderr


def _cv_dir(root, empty_rank1):
    """A CV set where most utterances are bad: 6 with unknown tokens (dropped by every rank's
    reader), and either only one usable utterance (rank 1's shard is empty) or four whose
    features rank 1 cannot read (its shard is all bad, found only when loading)."""
    bad_text = {f"s0-bad{i}": "xyz" for i in range(6)}
    cv, _ = synthetic_dir(str(root / "cv"), num_utts=1 if empty_rank1 else 4, seed=1,
                          extra_text=bad_text)
    if not empty_rank1:
        frames = {u: float(n) for u, n in DataDir.read(cv).utt2num_frames().items()
                  if u in DataDir.read(cv).text() and not u.startswith("s0-bad")}
        rank1 = set(shard_by_duration(frames, 1, 2))
        scp = (root / "cv" / "feats.scp").read_text().splitlines()
        (root / "cv" / "feats.scp").write_text("".join(
            (f"{line.split()[0]} {root}/missing.ark:9" if line.split()[0] in rank1 else line)
            + "\n" for line in scp))
    return cv


@pytest.mark.parametrize("empty_rank1", [True, False], ids=["empty_shard", "all_bad_shard"])
def test_uneven_shards_and_a_mostly_bad_cv_set_keep_the_ranks_in_step(tmp_path, empty_rank1):
    """The old failure: ``allreduce_(n, op="max")`` on a bare array reduced nothing, so ranks
    whose shards cut into different numbers of minibatches ran different collectives
    ("Message truncated; 8 bytes received but buffer size is 16" in evaluate())."""
    data, tokens = synthetic_dir(str(tmp_path / "train"), num_utts=5)  # shards of 2 and 3 mbs
    cv = _cv_dir(tmp_path, empty_rank1)
    conf = tmp_path / "c.toml"
    conf.write_text(CONFIG.format(data=data, tokens=tokens, mode="1bit")
                    .replace("minibatch_frames = 240", "minibatch_frames = 60")
                    .replace("[learner]", f'cv_data_dir = "{cv}"\n[learner]'))
    cfg = load_train_config(conf)
    plans = [len(Reader(cfg.reader, rank=k, size=2, minibatch_frames=30,
                        log=lambda m: None).plan(0)) for k in range(2)]
    assert plans[0] != plans[1]  # the ranks' shards cut into different numbers of minibatches
    r = _train(conf, tmp_path / "out", 2, "--json")
    cv_records = [json.loads(line) for line in (tmp_path / "out" / "train_log.jsonl")
                  .read_text().splitlines() if '"cv"' in line]
    assert len(cv_records) == 2 and all(np.isfinite(c["loss"]) for c in cv_records)
    # the CV figures are those of the utterances rank 0 holds, as one rank computes them
    result = json.loads(r.stdout)
    one = Trainer(load_train_config(conf, out_dir=str(tmp_path / "one")),
                  model=load(os.path.join(tmp_path / "out", "final.mdl")), log=lambda m: None)
    expect = one.evaluate()
    assert result["cv_loss"] == pytest.approx(expect["loss"], rel=1e-5)
    assert result["cv_error"] == pytest.approx(expect["cv_error"], rel=1e-5)
