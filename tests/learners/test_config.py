"""The ``[learner]`` section's learners against torch.optim, clipping against torch's
clip_grad_norm_, newbob, FSAdaGrad against CNTK's rule."""

import json

import numpy as np
import pytest

from asrkit.graph import parameter
from asrkit.learners import LearnerConfig, build_learner, clip_gradients

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("kind,torch_cls,kwargs", [
    ("sgd", torch.optim.SGD, {"momentum": 0.9, "weight_decay": 0.01}),
    ("sgd-nesterov", torch.optim.SGD, {"momentum": 0.8, "nesterov": True}),
    ("adam", torch.optim.Adam, {"betas": (0.8, 0.99), "weight_decay": 0.01}),
    ("adamw", torch.optim.AdamW, {"weight_decay": 0.1}),
])
def test_updates_match_torch_optim(kind, torch_cls, kwargs, rng):
    cfg = LearnerConfig(type=kind.split("-")[0], lr=0.05, momentum=kwargs.get("momentum", 0.9),
                        nesterov=kwargs.get("nesterov", False),
                        beta1=kwargs.get("betas", (0.9, 0.999))[0],
                        beta2=kwargs.get("betas", (0.9, 0.999))[1],
                        l2=kwargs.get("weight_decay", 0.0))
    p0 = rng.standard_normal((4, 3)).astype(np.float32)
    ours = parameter(p0.shape, init=p0.copy())
    opt = build_learner(cfg, [ours])
    tp = torch.nn.Parameter(torch.from_numpy(p0.copy()))
    topt = torch_cls([tp], lr=0.05, **kwargs)
    for _ in range(5):
        g = rng.standard_normal(p0.shape).astype(np.float32)
        opt.apply([g.copy()], 1, 0.05)
        tp.grad = torch.from_numpy(g.copy())
        topt.step()
    np.testing.assert_allclose(ours.value, tp.detach().numpy(), rtol=1e-5, atol=1e-6)
    state = opt.state_dict()
    again = build_learner(cfg, [parameter(p0.shape)])
    again.load_state_dict(state)
    assert again.step == 5


def test_global_norm_clipping_matches_torch(rng):
    gs = [rng.standard_normal((5, 4)).astype(np.float32), rng.standard_normal(3).astype(np.float32)]
    ts = [torch.nn.Parameter(torch.zeros(g.shape)) for g in gs]
    for t, g in zip(ts, gs):
        t.grad = torch.from_numpy(g.copy())
    norm = clip_gradients(gs, clip_norm=1.0)
    tnorm = torch.nn.utils.clip_grad_norm_(ts, 1.0)
    assert norm == pytest.approx(float(tnorm), rel=1e-5)
    for g, t in zip(gs, ts):
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_newbob_is_nnet1s_and_stops_at_min_lr():
    cfg = LearnerConfig(lr=1.0, newbob=True, newbob_threshold=0.01, min_lr=0.3, warmup_steps=4)
    s = build_learner(cfg, [parameter(1)]).schedule
    assert s(0, 0, 0) == 0.25 and s(3, 0, 0) == 1.0
    assert s.epoch_end(2.0)          # the baseline
    assert s.epoch_end(1.5)          # 25% better: keep the rate
    assert s.epoch_end(1.499)        # < 1% better: halve, and every epoch from now on
    assert s(10, 0, 1) == 0.5 and s.decaying
    fresh = build_learner(cfg, [parameter(1)]).schedule
    fresh.load_state_dict(s.state_dict())
    assert not s.epoch_end(1.6)      # worse while decaying: rejected, and stop
    assert s.rejected and s.best_cv == 1.499
    assert fresh(10, 0, 1) == 0.5 and fresh.best_cv == 1.499
    fresh.stop_threshold = -1.0      # never stopped by the gain: min_lr stops it
    assert not fresh.epoch_end(1.6) and fresh.lr == 0.25


def test_newbob_state_is_json_after_numpy_cv_losses():
    # the Trainer's CV losses are numpy scalars; the state goes into a JSON checkpoint header
    cfg = LearnerConfig(lr=1.0, newbob=True)
    s = build_learner(cfg, [parameter(1)]).schedule
    for loss in (np.float64(2.0), np.float64(1.5), np.float32(1.7)):
        s.epoch_end(loss)
    state = json.loads(json.dumps(s.state_dict()))
    assert state["rejected"] is True and state["decaying"] is True and state["best_cv"] == 1.5


def test_momentum_time_constant_is_cntks_per_minibatch_momentum():
    p = parameter(1, init=0.0)
    opt = build_learner(LearnerConfig(type="sgd", momentum_time_constant=1000.0), [p])
    assert opt.momentum_for(1000) == pytest.approx(np.exp(-1.0))
    for frames in (500, 2000):
        opt.apply([np.ones(1, np.float32)], frames, 0.1)
    v = np.exp(-2.0) * 1.0 + 1.0  # v1 = g; v2 = exp(-2000/1000) v1 + g
    np.testing.assert_allclose(p.value, -0.1 * (1.0 + v), rtol=1e-6)


def _cntk_fsadagrad(p, grads_sum, frames, lr, momentum, var_tc):
    """CNTK's Matrix::FSAdagradUpdate + CPUMatrix::FSAdagrad, in float64, per-sample rate."""
    p, count = p.astype(np.float64), 0.0
    s, mom = np.zeros_like(p), np.zeros_like(p)
    for g, n in zip(grads_sum, frames):
        vm = np.exp(-n / var_tc)
        count = vm * count + (1 - vm) * n
        s = vm * s + (1 - vm) * g * g
        w = np.minimum(np.sqrt(count) / np.sqrt(s), 10.0)
        mom = momentum * mom + (1 - momentum) * (g * w)  # unit gain
        p = p - (lr / n) * mom
    return p


def test_fsadagrad_is_cntks_rule_on_the_summed_gradient(rng):
    cfg = LearnerConfig(type="fsadagrad", lr=0.01, momentum=0.8, variance_time_constant=500.0)
    p0 = rng.standard_normal((4, 3)).astype(np.float32)
    frames = [120, 80, 200, 150]
    sums = [rng.standard_normal(p0.shape) * n * 0.01 for n in frames]
    ours = parameter(p0.shape, init=p0.copy())
    opt = build_learner(cfg, [ours])
    for g, n in zip(sums, frames):
        opt.apply([(g / n).astype(np.float32)], n, 0.01)
    ref = _cntk_fsadagrad(p0, sums, frames, 0.01, 0.8, 500.0)
    np.testing.assert_allclose(ours.value, ref, rtol=1e-5, atol=1e-6)
    # the smoothed frame count travels with the state (so checkpoints and BMUF carry it)
    state = opt.state_dict()
    assert sorted(state["slots"]) == ["mom", "s"] and state["scalars"]["count"] > 0
    b = parameter(p0.shape, init=ours.value.copy())
    again = build_learner(cfg, [b])
    again.load_state_dict(state)
    g = rng.standard_normal(p0.shape).astype(np.float32)
    opt.apply([g.copy()], 100, 0.01)
    again.apply([g.copy()], 100, 0.01)
    np.testing.assert_array_equal(ours.value, b.value)


def test_fsadagrad_from_toml_and_its_options_are_checked():
    from asrkit.config.acoustic_net import ConfigError
    from asrkit.training import parse_train_config

    net = {"layers": [{"type": "blstm", "hidden": 4}]}
    cfg = parse_train_config({"network": net, "learner": {
        "type": "fsadagrad", "lr": 0.002, "variance_time_constant": 36000,
        "target_denominator": 0.5, "momentum_time_constant": 2500}}, "f.toml")
    assert cfg.learner.type == "fsadagrad" and cfg.learner.variance_time_constant == 36000.0
    with pytest.raises(ConfigError, match=r"f.toml: \[learner\].variance_time_constant: must"):
        parse_train_config({"network": net, "learner": {"type": "fsadagrad",
                                                        "variance_time_constant": 0}}, "f.toml")
