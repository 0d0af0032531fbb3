"""Learners against torch.optim, clipping against torch's clip_grad_norm_, newbob."""

import numpy as np
import pytest

from asrkit.training import LearnerConfig, Optimizer, Schedule, clip_gradients

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
    ours = [p0.copy()]
    opt = Optimizer(cfg, [p0.shape])
    tp = torch.nn.Parameter(torch.from_numpy(p0.copy()))
    topt = torch_cls([tp], lr=0.05, **kwargs)
    for _ in range(5):
        g = rng.standard_normal(p0.shape).astype(np.float32)
        opt.step(ours, [g.copy()], 0.05)
        tp.grad = torch.from_numpy(g.copy())
        topt.step()
    np.testing.assert_allclose(ours[0], tp.detach().numpy(), rtol=1e-5, atol=1e-6)
    state = opt.state_dict()
    again = Optimizer(cfg, [p0.shape])
    again.load_state_dict(state)
    assert again.count == 5


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


def test_newbob_halves_when_cv_stops_improving_and_stops_at_min_lr():
    s = Schedule(LearnerConfig(lr=1.0, newbob=True, newbob_threshold=0.01, min_lr=0.3,
                               warmup_steps=4))
    assert s.lr(1, 0) == 0.25 and s.lr(4, 0) == 1.0
    assert not s.on_cv(2.0)
    assert not s.on_cv(1.5)          # 25% better
    assert s.on_cv(1.499)            # < 1% better: halve
    assert s.lr(10, 1) == 0.5 and not s.stop(1)
    assert s.on_cv(1.6)              # worse: halve again
    assert s.stop(2)
    fresh = Schedule(s.config)
    fresh.load_state_dict(s.state_dict())
    assert fresh.lr(10, 1) == 0.25 and fresh.best_cv == 1.499


def test_momentum_time_constant_is_cntks_per_minibatch_momentum():
    opt = Optimizer(LearnerConfig(type="sgd", momentum_time_constant=1000.0), [(1,)])
    assert opt.momentum(1000) == pytest.approx(np.exp(-1.0))
    p, v = [np.zeros(1, np.float32)], None
    for frames in (500, 2000):
        opt.step(p, [np.ones(1, np.float32)], 0.1, frames)
    v = np.exp(-2.0) * 1.0 + 1.0  # v1 = g; v2 = exp(-2000/1000) v1 + g
    np.testing.assert_allclose(p[0], -0.1 * (1.0 + v), rtol=1e-6)


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
    ours = [p0.copy()]
    opt = Optimizer(cfg, [p0.shape])
    for g, n in zip(sums, frames):
        opt.step(ours, [(g / n).astype(np.float32)], 0.01, frames=n)
    ref = _cntk_fsadagrad(p0, sums, frames, 0.01, 0.8, 500.0)
    np.testing.assert_allclose(ours[0], ref, rtol=1e-5, atol=1e-6)
    # the smoothed frame count travels with the slots (so checkpoints and BMUF carry it)
    state = opt.state_dict()
    assert len(state["slots2"]) == 2 and state["slots2"][1][0] > 0
    again = Optimizer(cfg, [p0.shape])
    again.load_state_dict(state)
    a, b = [ours[0].copy()], [ours[0].copy()]
    g = rng.standard_normal(p0.shape).astype(np.float32)
    opt.step(a, [g.copy()], 0.01, 100)
    again.step(b, [g.copy()], 0.01, 100)
    np.testing.assert_array_equal(a[0], b[0])


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
