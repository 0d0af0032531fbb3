"""Fuzzing training configs (TOML, the ``[network]`` section included) through ``asrkit train``.

Each case is a child process with a time limit on a tiny synthetic data dir (4-dim features, a
4-cell LSTM, one epoch: a valid config trains in seconds). A bad value must fail cleanly naming
the file (and the key); a mutant that still trains must leave a model of finite parameters.
Seeded; a few cases by default, many under ``--runslow``.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.fuzz.harness import assert_clean_failure, assert_clean_outcome, mutations, run_cli
from tests.training.datadirs import synthetic_dir

slow = pytest.mark.slow

NETWORK = """[network]
stack_frames = 1
subsample_frames = 1
seed = 3
[[network.layers]]
type = "tdnn"
dim = 6
context = 3
dilation = 1
stride = 1
activation = "relu"
[[network.layers]]
type = "lstm"
hidden = 4
num_layers = 1
proj = 0
dropout = 0.0
[[network.layers]]
type = "dropout"
rate = 0.1
[[network.layers]]
type = "dense"
dim = 5
activation = "tanh"
"""

REST = """[criterion]
type = "ctc"
zero_infinity = true
[reader]
data_dir = "{data}"
tokens = "{tokens}"
minibatch_frames = 120
bucket_pool = 100
cmvn = "speaker"
seed = 1
[learner]
type = "adam"
lr = 0.01
beta1 = 0.9
beta2 = 0.999
eps = 1e-8
clip_norm = 5.0
warmup_steps = 2
decay = 0.9
[distributed]
mode = "allreduce"
block_size = 8
[train]
epochs = 1
checkpoint_every = 0
keep_checkpoints = 2
log_every = 1
out_dir = "{out}"
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """(data dir, tokens.txt) of 6 utterances of 4-dim features."""
    root = tmp_path_factory.mktemp("cfgdata")
    return synthetic_dir(str(root / "train"), num_utts=6, dim=4)


def _write(tmp_path, text: str | bytes, data) -> tuple[str, str]:
    out = str(tmp_path / "exp")
    if isinstance(text, str):
        text = text.replace("{data}", data[0]).replace("{tokens}", data[1]).replace("{out}", out)
        text = text.encode("utf-8")
    path = tmp_path / "train.toml"
    path.write_bytes(text)
    return str(path), out


def _check(res, conf: str, out: str, names=()):
    """A clean failure naming the config (or one of ``names``), or a finite final.mdl."""
    names = [conf, *names]
    if res.returncode == 0:
        final = os.path.join(out, "final.mdl")
        ok = os.path.isfile(final)
        if ok:
            from asrkit.models import load_archive

            _, arrays = load_archive(final)
            ok = all(np.isfinite(a).all() for a in arrays.values())
        if not ok:
            assert_clean_failure(res, names)  # reports "exit status 0 on bad input"
        return
    assert_clean_outcome(res, names)


def test_the_base_config_trains(data, tmp_path):
    conf, out = _write(tmp_path, NETWORK + REST, data)
    res = run_cli(["train", conf])
    assert res.returncode == 0, res.describe()
    assert os.path.isfile(os.path.join(out, "final.mdl"))


# id -> (edit of the text, what the message must name)
BAD = {
    "blank-99": (lambda t: t.replace("zero_infinity = true", "blank = 99"), "blank"),
    "missing-data-dir": (lambda t: t.replace('data_dir = "{data}"', 'data_dir = "/nope/x"'),
                         "/nope/x"),
    "non-utf8": (lambda t: t.encode() + b"# \xff\xfe caf\xe9\n", "UTF-8"),
    "hidden-1e9": (lambda t: t.replace("hidden = 4", "hidden = 1000000000"), "hidden"),
    "lr-nan": (lambda t: t.replace("lr = 0.01", "lr = nan"), "lr"),
    "lr-inf": (lambda t: t.replace("lr = 0.01", "lr = inf"), "lr"),
    "clip-norm-negative": (lambda t: t.replace("clip_norm = 5.0", "clip_norm = -1"), "clip_norm"),
    "warmup-negative": (lambda t: t.replace("warmup_steps = 2", "warmup_steps = -5"),
                        "warmup_steps"),
    "eps-negative": (lambda t: t.replace("eps = 1e-8", "eps = -1e-8"), "eps"),
    "beta2-above-one": (lambda t: t.replace("beta2 = 0.999", "beta2 = 1.5"), "beta2"),
    "decay-nan": (lambda t: t.replace("decay = 0.9", "decay = nan"), "decay"),
    "momentum-nan": (lambda t: t.replace("[learner]", "[learner]\nmomentum = nan"), "momentum"),
    "l2-inf": (lambda t: t.replace("[learner]", "[learner]\nl2 = inf"), "l2"),
    "label-smoothing-2": (lambda t: t.replace("zero_infinity = true", "label_smoothing = 2.0"),
                          "label_smoothing"),
    "block-lr-nan": (lambda t: t.replace("block_size = 8", "block_lr = nan"), "block_lr"),
    "block-momentum-2": (lambda t: t.replace("block_size = 8", "block_momentum = 2.0"),
                         "block_momentum"),
    "keep-checkpoints-negative": (lambda t: t.replace("keep_checkpoints = 2",
                                                      "keep_checkpoints = -2"),
                                  "keep_checkpoints"),
    "max-steps-negative": (lambda t: t.replace("log_every = 1", "max_steps = -1"), "max_steps"),
    "reader-seed-negative": (lambda t: t.replace("seed = 1", "seed = -1"), "seed"),
    "dim-huge": (lambda t: t.replace("dim = 5", "dim = 99999999999"), "dim"),
    "num-layers-huge": (lambda t: t.replace("num_layers = 1", "num_layers = 1000000000"),
                        "num_layers"),
    "context-huge": (lambda t: t.replace("context = 3", "context = 1000000000"), "context"),
    "stack-frames-huge": (lambda t: t.replace("stack_frames = 1", "stack_frames = 1000000000"),
                          "stack_frames"),
    "dropout-nan": (lambda t: t.replace("dropout = 0.0", "dropout = nan"), "dropout"),
    "layer-type-a-list": (lambda t: t.replace('type = "lstm"', 'type = ["lstm"]'), "type"),
    "reader-not-a-table": (lambda t: t.replace("[reader]", "reader = 5\n[reader_x]"), "reader"),
    "layers-not-tables": (lambda t: NETWORK.split("[[")[0] + "layers = [1, 2]\n"
                          + t[len(NETWORK):], "layers"),
    "spec-augment-negative": (lambda t: t.replace("[learner]", "[reader.spec_augment]\n"
                                                  "num_freq_masks = -3\n[learner]"),
                              "num_freq_masks"),
    "spec-augment-masks-huge": (lambda t: t.replace("[learner]", "[reader.spec_augment]\n"
                                                    "num_time_masks = 99999999999\n[learner]"),
                                "num_time_masks"),
}
DEFAULT_BAD = {"blank-99", "missing-data-dir", "non-utf8", "hidden-1e9", "lr-nan",
               "clip-norm-negative"}


@pytest.mark.parametrize("case", [c if c in DEFAULT_BAD else pytest.param(c, marks=slow)
                                  for c in BAD])
def test_a_bad_config_fails_cleanly_naming_the_key(data, tmp_path, case):
    edit, key = BAD[case]
    conf, out = _write(tmp_path, edit(NETWORK + REST), data)
    res = run_cli(["train", conf])
    assert_clean_failure(res, names=conf if case != "missing-data-dir" else "/nope/x")
    assert key in res.stderr, res.describe()
    assert not os.path.exists(os.path.join(out, "final.mdl"))


@slow
@pytest.mark.parametrize("override", ["learner.lr=nan", "train.epochs.x=1", "network=3",
                                      "learner.clip_value=-inf", "reader.max_utts=-4"])
def test_a_bad_override_fails_cleanly(data, tmp_path, override):
    conf, _ = _write(tmp_path, NETWORK + REST, data)
    assert_clean_failure(run_cli(["train", conf, "--set", override]),
                         names=override.split("=")[0].split(".")[-1])


@pytest.mark.parametrize("seed", [0, *[pytest.param(s, marks=slow) for s in range(1, 30)]])
def test_config_mutants_fail_cleanly_or_train_a_finite_model(data, tmp_path, seed):
    (text,) = mutations((NETWORK + REST).encode(), seed, 1, text=True)
    conf, out = _write(tmp_path, text.decode("utf-8", "replace"), data)
    _check(run_cli(["train", conf]), conf, out, names=[data[0], data[1]])


@pytest.mark.parametrize("seed", [0, *[pytest.param(s, marks=slow) for s in range(1, 30)]])
def test_network_section_mutants_fail_cleanly_or_train_a_finite_model(data, tmp_path, seed):
    """Mutations of the ``[network]`` lines only."""
    rng_seed = 1000 + seed
    (net,) = mutations(NETWORK.encode(), rng_seed, 1, text=True)
    conf, out = _write(tmp_path, net.decode("utf-8", "replace") + REST, data)
    _check(run_cli(["train", conf]), conf, out)


def test_nan_features_are_reported_by_utterance_and_skipped(tmp_path):
    """One utterance's features hold a NaN: training names it, skips it and still ends with a
    finite model."""
    from asrkit.io import read_table_dict, write_table

    d, tokens = synthetic_dir(str(tmp_path / "nan"), num_utts=6, dim=4)
    feats = read_table_dict(f"scp:{d}/feats.scp")
    bad = sorted(feats)[2]
    feats[bad] = feats[bad].copy()
    feats[bad][3, 1] = np.nan
    write_table(f"ark,scp:{d}/feats.ark,{d}/feats.scp", sorted(feats.items()))
    conf, out = _write(tmp_path, NETWORK + REST, (d, tokens))
    res = run_cli(["train", conf])
    assert res.returncode == 0, res.describe()
    assert f"skipping utterance {bad}" in res.stderr and "NaN" in res.stderr, res.describe()
    _check(res, conf, out)


@slow
def test_a_diverging_run_never_writes_a_model(data, tmp_path):
    """A learning rate that blows the parameters up: no final.mdl of non-finite values."""
    conf, out = _write(tmp_path, (NETWORK + REST).replace("lr = 0.01", "lr = 1e30").replace(
        'type = "adam"', 'type = "sgd"').replace("clip_norm = 5.0", "clip_norm = 0.0"), data)
    _check(run_cli(["train", conf]), conf, out, names=["final.mdl", "lr", "finite"])
