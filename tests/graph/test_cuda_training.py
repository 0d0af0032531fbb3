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
        seen[name] = fn(batch)
        return seen[name]
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
        for p, a, b in zip(cpu.param_nodes, cpu.params, dev.params):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6, err_msg=p.name)
        ev_c, ev_d = cpu.evaluate(), dev.evaluate()
    np.testing.assert_allclose(ev_d["loss"], ev_c["loss"], rtol=1e-5)
    assert ev_d["cv_error"] == ev_c["cv_error"]
