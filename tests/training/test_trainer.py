"""The Trainer: loss falls on real features, TOML + CLI, exact resume, NaN skipping, logs."""

import json
import os

import numpy as np
import pytest

from asrkit.cli.main import main
from asrkit.models import load
from asrkit.training import Trainer, latest_checkpoint, parse_train_config, read_checkpoint
from tests.training.datadirs import synthetic_dir


def _config(data, tokens, out, cv=None, **sections):
    d = {"network": {"layers": [{"type": "blstm", "hidden": 16}]},
         "reader": {"data_dir": data, "tokens": tokens, "minibatch_frames": 200,
                    "cv_data_dir": cv or ""},
         "learner": {"type": "adam", "lr": 0.01},
         "train": {"epochs": 2, "out_dir": out, "log_every": 1}}
    for k, v in sections.items():
        d.setdefault(k, {}).update(v)
    return parse_train_config(d, "test.toml")


def _log(out):
    with open(os.path.join(out, "train_log.jsonl")) as f:
        return [json.loads(line) for line in f]


def test_blstm_ctc_loss_falls_on_real_features(digits, tmp_path):
    train, test, tokens = digits
    out = str(tmp_path / "exp")
    cfg = _config(train, tokens, out, cv=test,
                  network={"stack_frames": 3, "subsample_frames": 3,
                           "layers": [{"type": "blstm", "hidden": 32, "num_layers": 2}]},
                  reader={"minibatch_frames": 1500, "spec_augment": {"time_warp": 0}},
                  learner={"lr": 0.005}, train={"epochs": 6})
    Trainer(cfg, log=lambda m: None).train()
    log = _log(out)
    train_loss = [r["loss"] for r in log if r["kind"] == "train"]
    cv = [r for r in log if r["kind"] == "cv"]
    assert len(cv) == 6 and all(0 <= r["cv_error"] for r in cv)
    assert np.mean(train_loss[-3:]) < 0.7 * np.mean(train_loss[:3])
    assert cv[-1]["loss"] < cv[0]["loss"]
    assert {"step", "kind", "loss", "lr", "frames_per_s"} <= set(log[0])
    model = load(os.path.join(out, "final.mdl"))
    assert model.input_dim == 40 and model.tokens[0] == "<blk>"


def test_trains_from_a_toml_file_with_the_command(tmp_path, capsys):
    data, tokens = synthetic_dir(str(tmp_path / "d"), num_utts=10)
    conf = tmp_path / "small_train.toml"
    conf.write_text(
        '[network]\n[[network.layers]]\ntype = "blstm"\nhidden = 12\n'
        '[[network.layers]]\ntype = "dense"\ndim = 16\n'
        '[reader]\nminibatch_frames = 150\n'
        '[learner]\ntype = "adam"\nlr = 0.02\n[train]\nepochs = 4\nlog_every = 1\n')
    out = tmp_path / "exp"
    rc = main(["train", str(conf), "--data", data, "--tokens", tokens, "--cv-data", data,
               "--out", str(out), "--set", "train.checkpoint_every=3", "--json"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["model"] == str(out / "final.mdl") and summary["cv_error"] is not None
    log = _log(out)
    losses = [r["loss"] for r in log if r["kind"] == "train"]
    assert np.mean(losses[-3:]) < np.mean(losses[:3])
    assert os.path.basename(latest_checkpoint(str(out))) == f"ckpt-{summary['steps']:08d}.npz"
    rc = main(["train", str(conf), "--data", data, "--set", "learner.lr=-1"])
    assert rc == 2
    assert "[learner].lr: must be > 0" in capsys.readouterr().err


SGD = {"type": "sgd", "lr": 0.3, "momentum": 0.9, "warmup_steps": 3}


@pytest.mark.parametrize("learner, distributed", [
    (SGD, {}),
    ({"type": "fsadagrad", "lr": 0.05, "momentum_time_constant": 500.0, "warmup_steps": 3,
      "variance_time_constant": 2000.0}, {}),
    # one rank still quantises: the residuals (biases [32], matrices) go through the checkpoint
    (SGD, {"mode": "1bit", "onebit_min_size": 16}),
], ids=["sgd", "fsadagrad", "sgd-1bit"])
def test_resume_after_a_stop_is_bit_identical(tmp_path, learner, distributed):
    data, tokens = synthetic_dir(str(tmp_path / "d"), num_utts=12)
    sections = dict(network={"layers": [{"type": "blstm", "hidden": 8, "num_layers": 2,
                                         "dropout": 0.2}]},
                    reader={"spec_augment": {"time_warp": 0, "freq_mask_width": 2,
                                             "time_mask_width": 3}},
                    learner=learner, distributed=distributed,
                    train={"epochs": 3, "checkpoint_every": 2})
    full = str(tmp_path / "full")
    Trainer(_config(data, tokens, full, cv=data, **sections), log=lambda m: None).train()
    part = str(tmp_path / "part")
    stop = _config(data, tokens, part, cv=data, **sections)
    stop.train.max_steps = 5  # "killed" after step 5 (odd: between two periodic checkpoints)
    t = Trainer(stop, log=lambda m: None)
    t.train()
    assert t.step == 5 and not os.path.exists(os.path.join(part, "final.mdl"))
    assert read_checkpoint(latest_checkpoint(part))[0]["step"] == 5
    resumed = Trainer(_config(data, tokens, part, cv=data, **sections), log=lambda m: None)
    resumed.train(resume=True)
    a, b = load(os.path.join(full, "final.mdl")), load(os.path.join(part, "final.mdl"))
    for k, v in a.state_dict().items():
        np.testing.assert_array_equal(v, b.state_dict()[k], err_msg=k)
    strip = [{k: r[k] for k in ("step", "kind", "loss")} for r in _log(full)]
    assert strip == [{k: r[k] for k in ("step", "kind", "loss")} for r in _log(part)]


class _PoisonedReader:
    """Wraps a reader; the minibatch at plan index ``bad`` of epoch 0 gets a NaN feature."""

    def __init__(self, reader, bad):
        self.reader, self.bad = reader, bad

    def __getattr__(self, name):
        return getattr(self.reader, name)

    def load(self, utts, epoch=0, index=0):
        batch = self.reader.load(utts, epoch, index)
        if epoch == 0 and index == self.bad:
            batch.feats[0, 0, 0] = np.nan
        return batch


def test_a_nonfinite_minibatch_is_skipped_and_counted(tmp_path):
    data, tokens = synthetic_dir(str(tmp_path / "d"), num_utts=8)
    cfg = _config(data, tokens, str(tmp_path / "exp"), train={"epochs": 1})
    messages = []
    t = Trainer(cfg, log=messages.append)
    t.reader = _PoisonedReader(t.reader, bad=1)
    batches = [t.reader.load(u, 0, i) for i, u in enumerate(t.reader.plan(0)[:2])]
    t.train_step(batches[0])
    before = [p.copy() for p in t.params]
    res = t.train_step(batches[1])
    assert not res["applied"] and t.skipped_steps == 1
    for p, q in zip(before, t.params):
        np.testing.assert_array_equal(p, q)
    assert any("non-finite" in m for m in messages)
    assert all(np.isfinite(p).all() for p in t.params)


def test_frame_level_cross_entropy_training(tmp_path):
    data, tokens = synthetic_dir(str(tmp_path / "d"), num_utts=10)
    out = str(tmp_path / "exp")
    cfg = _config(data, tokens, out, cv=data, criterion={"type": "cross_entropy"},
                  reader={"frame_targets": f"scp:{data}/ali.scp"},
                  network={"layers": [{"type": "tdnn", "dim": 16, "context": 3},
                                      {"type": "lstm", "hidden": 12}]},
                  learner={"lr": 0.02}, train={"epochs": 4})
    Trainer(cfg, log=lambda m: None).train()
    cv = [r for r in _log(out) if r["kind"] == "cv"]
    assert cv[-1]["loss"] < 0.7 * cv[0]["loss"]
    assert cv[-1]["cv_error"] < cv[0]["cv_error"]  # frame error rate
    with pytest.raises(Exception, match="needs \\[reader\\].frame_targets"):
        _config(data, tokens, out, criterion={"type": "cross_entropy"})


def test_resume_after_sigkill_matches_an_uninterrupted_run(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    data, tokens = synthetic_dir(str(tmp_path / "d"), num_utts=12)
    conf = tmp_path / "kill_train.toml"
    conf.write_text(
        f'[network]\n[[network.layers]]\ntype = "blstm"\nhidden = 8\n'
        f'[reader]\ndata_dir = "{data}"\ntokens = "{tokens}"\nminibatch_frames = 100\n'
        f'[learner]\ntype = "sgd"\nlr = 0.1\n[train]\nepochs = 6\ncheckpoint_every = 2\n')
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "asrkit", "train", str(conf)]
    subprocess.run(cmd + ["--out", str(tmp_path / "full")], check=True, env=env,
                   capture_output=True, timeout=300)
    proc = subprocess.Popen(cmd + ["--out", str(tmp_path / "part")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    last = tmp_path / "part" / "checkpoints" / "last"
    deadline = time.time() + 120
    while not last.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_early = not (tmp_path / "part" / "final.mdl").exists()
    subprocess.run(cmd + ["--out", str(tmp_path / "part"), "--resume"], check=True, env=env,
                   capture_output=True, timeout=300)
    a = load(tmp_path / "full" / "final.mdl").state_dict()
    b = load(tmp_path / "part" / "final.mdl").state_dict()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    assert killed_early, "the run finished before the kill; make it longer"


def test_init_starts_from_a_pretrained_models_parameters(tmp_path):
    data, tokens = synthetic_dir(str(tmp_path / "d"), num_utts=8)
    first = str(tmp_path / "first")
    Trainer(_config(data, tokens, first, train={"epochs": 1}), log=lambda m: None).train()
    pre = load(os.path.join(first, "final.mdl")).state_dict()
    cfg = _config(data, tokens, str(tmp_path / "second"), train={"init": f"{first}/final.mdl"})
    t = Trainer(cfg, log=lambda m: None)
    for k, v in t.model.state_dict().items():
        np.testing.assert_array_equal(v, pre[k], err_msg=k)
    other = _config(data, tokens, str(tmp_path / "third"),
                    network={"layers": [{"type": "blstm", "hidden": 12}]},
                    train={"init": f"{first}/final.mdl"})
    with pytest.raises(RuntimeError, match=r"first/final.mdl: its \[network\] differs"):
        Trainer(other, log=lambda m: None)
    # another seed and dropout shape no parameter: fine-tuning may change them
    tuned = _config(data, tokens, str(tmp_path / "fourth"),
                    network={"seed": 7, "layers": [{"type": "blstm", "hidden": 16,
                                                    "dropout": 0.3}]},
                    train={"init": f"{first}/final.mdl", "epochs": 1})
    t = Trainer(tuned, log=lambda m: None)
    for k, v in t.model.state_dict().items():
        np.testing.assert_array_equal(v, pre[k], err_msg=k)
    t.train()
    assert load(str(tmp_path / "fourth" / "final.mdl")).network["layers"][0]["dropout"] == 0.3


def test_a_checkpoint_of_an_older_asrkit_is_refused_with_the_way_out(tmp_path):
    from asrkit.training import TrainingError
    from tests.fuzz.npz_files import header_of, read_members, with_header, write_members

    data, tokens = synthetic_dir(str(tmp_path / "d"), num_utts=6)
    out = str(tmp_path / "exp")
    Trainer(_config(data, tokens, out, train={"max_steps": 1}), log=lambda m: None).train()
    path = latest_checkpoint(out)
    members = read_members(path)
    write_members(path, with_header(members, {**header_of(members), "version": 1}))
    assert read_checkpoint(path)[0]["version"] == 1  # its parameters still read (model average)
    with pytest.raises(TrainingError, match="version 1.*cannot resume.*asrkit model average"):
        Trainer(_config(data, tokens, out), log=lambda m: None).train(resume=True)
