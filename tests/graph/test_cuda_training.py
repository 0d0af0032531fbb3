"""A BLSTM-CTC training step of the Trainer on the cuda backend (numba's simulator without a
GPU): every op runs on the device and the loss, the gradients, the updated parameters and the CV
metrics equal the cpu's."""

import warnings

import numpy as np
import pytest

from asrkit.graph.backends import cuda as cuda_backend
from asrkit.training import Trainer, parse_train_config
from tests.training.datadirs import synthetic_dir


def _trainer(data, tokens, out, device):
    cfg = parse_train_config({
        "network": {"stack_frames": 3, "subsample_frames": 3, "seed": 0,
                    "layers": [{"type": "blstm", "hidden": 2, "num_layers": 2, "dropout": 0.2},
                               {"type": "dense", "dim": 4, "activation": "relu"}]},
        "reader": {"data_dir": data, "tokens": tokens, "minibatch_frames": 120,
                   "cv_data_dir": data},
        "learner": {"type": "sgd", "lr": 0.1},
        "train": {"epochs": 1, "out_dir": out, "device": device}}, "test.toml")
    return Trainer(cfg, log=lambda m: None)


def _recording(fn, seen, name):
    """Wrap the Trainer's forward/backward so the test sees the step's loss and gradients."""
    def run(batch):
        loss, grads = fn(batch)
        # copies: the host path scales its gradients in place
        seen[name] = loss, [g.copy() if isinstance(g, np.ndarray) else g.copy_to_host()
                            for g in grads]
        return loss, grads
    return run


@pytest.mark.cuda
def test_blstm_ctc_step_on_cuda_matches_cpu(tmp_path):
    pytest.importorskip("kaldi_io")  # the reader's ark files (absent from some GPU images)
    data, tokens = synthetic_dir(str(tmp_path / "d"), num_utts=3, dim=2, frames_per_token=1)
    cpu = _trainer(data, tokens, str(tmp_path / "cpu"), "cpu")
    dev = _trainer(data, tokens, str(tmp_path / "cuda"), "cuda")
    batch = next(iter(cpu.reader.load(u, 0, i) for i, u in enumerate(cpu.reader.plan(0))))
    assert batch.size >= 2 and len(set(batch.lengths.tolist())) > 1  # padding is exercised
    seen = {}
    for name, tr in (("cpu", cpu), ("cuda", dev)):
        tr._local_gradients = _recording(tr._local_gradients, seen, name)
    cuda_backend._warned.clear()
    with warnings.catch_warnings():
        # a host fallback of any op is an error here
        warnings.filterwarnings("error", message="asrkit.graph cuda backend",
                                category=RuntimeWarning)
        step_c, step_d = cpu.train_step(batch), dev.train_step(batch)
        assert step_d["applied"] and step_c["applied"]
        (loss_c, grads_c), (loss_d, grads_d) = seen["cpu"], seen["cuda"]
        np.testing.assert_allclose(loss_d, loss_c, rtol=1e-5)
        for p, gc, gd in zip(cpu.param_nodes, grads_c, grads_d):
            assert np.abs(gc).max() > 0, p.name
            np.testing.assert_allclose(gd, gc, rtol=2e-4, atol=1e-5, err_msg=p.name)
        np.testing.assert_allclose(step_d["loss"], step_c["loss"], rtol=1e-5)
        for p, a, b in zip(cpu.param_nodes, cpu.params, dev.pull_parameters()):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6, err_msg=p.name)
        ev_c, ev_d = cpu.evaluate(), dev.evaluate()
    np.testing.assert_allclose(ev_d["loss"], ev_c["loss"], rtol=1e-5)
    assert ev_d["cv_error"] == ev_c["cv_error"]


def _small(data, tokens, out, device, learner, **train):
    """A dense-only model with frame-level cross-entropy, clipping on: fast under the simulator
    (the CTC step above is tested once; its kernel takes most of a simulated step)."""
    cfg = parse_train_config({
        "network": {"seed": 0, "layers": [{"type": "dense", "dim": 6, "activation": "tanh"}]},
        "criterion": {"type": "cross_entropy"},
        "reader": {"data_dir": data, "tokens": tokens, "minibatch_frames": 60,
                   "frame_targets": f"scp:{data}/ali.scp"},
        "learner": {"clip_norm": 0.05, "clip_value": 0.02} | learner,
        "train": {"epochs": 1, "out_dir": out, "device": device} | train}, "test.toml")
    return Trainer(cfg, log=lambda m: None)


LEARNERS = {
    "sgd": {"type": "sgd", "lr": 0.5, "momentum": 0.9, "l2": 1e-3},
    "nesterov": {"type": "sgd", "lr": 0.5, "momentum_time_constant": 300.0, "nesterov": True},
    "adam": {"type": "adam", "lr": 0.01, "l2": 1e-3},
    "adamw": {"type": "adamw", "lr": 0.01, "l2": 0.1},
    "fsadagrad": {"type": "fsadagrad", "lr": 0.01, "variance_time_constant": 400.0},
}


@pytest.mark.cuda
@pytest.mark.parametrize("name", [  # ~15 s each in the simulator: two by default, all --runslow
    pytest.param(n, marks=() if n in ("sgd", "adam") else pytest.mark.slow) for n in LEARNERS])
def test_update_on_the_device_matches_the_host(tmp_path, name):
    pytest.importorskip("kaldi_io")
    data, tokens = synthetic_dir(str(tmp_path / "d"), num_utts=6, dim=3, frames_per_token=2)
    cpu = _small(data, tokens, str(tmp_path / "cpu"), "cpu", LEARNERS[name])
    dev = _small(data, tokens, str(tmp_path / "cuda"), "cuda", LEARNERS[name])
    assert cpu.device_learner is None and dev.device_learner is not None
    start = [p.copy() for p in cpu.params]
    batches = [cpu.reader.load(u, 0, i) for i, u in enumerate(cpu.reader.plan(0))][:3]
    for batch in batches:
        res_c, res_d = cpu.train_step(batch), dev.train_step(batch)
        assert res_c["applied"] and res_d["applied"]
        np.testing.assert_allclose(res_d["loss"], res_c["loss"], rtol=1e-5)
    for p, a, b, s in zip(cpu.param_nodes, cpu.params, dev.pull_parameters(), start):
        assert np.abs(a - s).max() > 1e-4, p.name
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6, err_msg=p.name)
    assert dev.learner.step == cpu.learner.step == len(batches)
    for k in cpu.learner.slots:
        for a, b in zip(cpu.learner.slots[k], dev.learner.slots[k]):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-7)


@pytest.mark.cuda
def test_parameters_stay_on_the_device_between_steps(tmp_path, monkeypatch):
    pytest.importorskip("kaldi_io")
    data, tokens = synthetic_dir(str(tmp_path / "d"), num_utts=6, dim=3, frames_per_token=2)
    tr = _small(data, tokens, str(tmp_path / "cuda"), "cuda", LEARNERS["adam"])
    host_before = [p.copy() for p in tr.params]
    shapes = {tuple(p.shape) for p in tr.params}
    moved = []
    for fn in ("to_host", "to_device"):
        orig = getattr(cuda_backend.Backend, fn)

        def record(self, a, _orig=orig, _fn=fn):
            if isinstance(a, np.ndarray) == (_fn == "to_device"):  # a real copy, no pass-through
                moved.append((_fn, tuple(a.shape)))
            return _orig(self, a)
        monkeypatch.setattr(cuda_backend.Backend, fn, record)
    pulls = []
    monkeypatch.setattr(tr.device_learner, "download", lambda: pulls.append(1))
    for i, u in enumerate(list(tr.reader.plan(0))[:3]):
        assert tr.train_step(tr.reader.load(u, 0, i))["applied"]
        assert all(hasattr(d, "copy_to_host") for d in tr.device_learner.params)
    assert not pulls
    assert moved and not [m for m in moved if m[1] in shapes]  # inputs and the loss only
    for a, b in zip(host_before, tr.params):  # the host copies are untouched until a pull
        np.testing.assert_array_equal(a, b)
    monkeypatch.undo()
    assert any(np.abs(a - b).max() > 0 for a, b in zip(host_before, tr.pull_parameters()))


@pytest.mark.cuda
@pytest.mark.slow  # 2-3 minutes of simulated kernels on 2 cores: run with --runslow
def test_checkpoint_and_resume_on_the_device(tmp_path):
    pytest.importorskip("kaldi_io")
    import os

    from asrkit.models import load
    from asrkit.training import latest_checkpoint, read_checkpoint

    data, tokens = synthetic_dir(str(tmp_path / "d"), num_utts=8, dim=3, frames_per_token=2)
    learner = LEARNERS["fsadagrad"] | {"momentum_time_constant": 200.0}
    full = str(tmp_path / "full")
    _small(data, tokens, full, "cuda", learner, epochs=2, checkpoint_every=2).train()
    part = str(tmp_path / "part")
    t = _small(data, tokens, part, "cuda", learner, epochs=2, checkpoint_every=2, max_steps=3)
    t.train()
    assert t.step == 3 and not os.path.exists(os.path.join(part, "final.mdl"))
    header, arrays = read_checkpoint(latest_checkpoint(part))
    assert header["step"] == 3
    assert all(isinstance(a, np.ndarray) for a in arrays.values())  # host arrays, as on the cpu
    resumed = _small(data, tokens, part, "cuda", learner, epochs=2, checkpoint_every=2)
    resumed.train(resume=True)
    a, b = load(os.path.join(full, "final.mdl")), load(os.path.join(part, "final.mdl"))
    exact = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
    for k, v in a.state_dict().items():
        if exact:  # the simulator is deterministic; a GPU's graph kernels may sum in any order
            np.testing.assert_array_equal(v, b.state_dict()[k], err_msg=k)
        else:
            np.testing.assert_allclose(v, b.state_dict()[k], rtol=1e-5, atol=1e-7, err_msg=k)
