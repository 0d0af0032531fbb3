"""The learners on the device (asrkit.learners.DeviceLearner, kernels/cuda/update.py) against
the host path: scale by 1/frames, clip, ``Learner.apply``."""

import numpy as np
import pytest

from asrkit.graph import parameter
from asrkit.learners import LearnerConfig, build_learner, clip_gradients

pytestmark = pytest.mark.cuda

SHAPES = [(5, 3), (7,), (2, 2, 3)]
CASES = [
    dict(type="sgd", momentum=0.9, clip_norm=0.5, l2=1e-2),
    dict(type="sgd", momentum=0.9, nesterov=True, clip_value=0.3),
    dict(type="sgd", momentum=0.0, clip_norm=0.5),
    dict(type="sgd", momentum_time_constant=200.0, clip_norm=100.0, clip_value=0.5),
    dict(type="adam", clip_norm=0.5, l2=1e-2, lr=1e-2),
    dict(type="adamw", clip_norm=0.5, clip_value=0.2, l2=1e-1, lr=1e-2),
    dict(type="fsadagrad", momentum=0.9, clip_norm=0.5, l2=1e-3, variance_time_constant=500.0),
    dict(type="fsadagrad", momentum=0.0, clip_norm=0.0, clip_value=0.2),
]


def _host_step(opt, grads, lr, frames, cfg):
    grads = [g * np.float32(1.0 / frames) for g in grads]
    clip_gradients(grads, cfg.clip_norm, cfg.clip_value)
    opt.apply(grads, frames, lr)


def _learner(cfg, arrays):
    return build_learner(cfg, [parameter(a.shape, init=a.copy()) for a in arrays])


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_device_update_matches_host(case, rng):
    from numba import cuda

    from asrkit.learners import DeviceLearner

    cfg = LearnerConfig(**({"lr": 0.1} | case))
    params = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    host = _learner(cfg, params)
    dev = DeviceLearner(_learner(cfg, params))
    for step, frames in enumerate((40, 25, 60), 1):
        grads = [(rng.standard_normal(s) * frames).astype(np.float32) for s in SHAPES]
        lr = cfg.lr * (1 + step) / 3
        _host_step(host, grads, lr, frames, cfg)
        d_grads = [cuda.to_device(g) for g in grads]
        assert dev.step(d_grads, lr, frames, 1.0 / frames)
        for g, d in zip(grads, d_grads):  # the raw gradients are left alone
            np.testing.assert_array_equal(d.copy_to_host(), g)
    dev.download()
    for a, b, p0 in zip(host.parameters, dev.learner.parameters, params):
        assert np.abs(b.value - p0).max() > 1e-4  # the parameters moved
        np.testing.assert_allclose(b.value, a.value, rtol=1e-5, atol=1e-6)
    assert dev.learner.step == host.step == 3
    for k in host.slots:
        for a, b in zip(host.slots[k], dev.learner.slots[k]):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-7)


def test_non_finite_gradient_changes_nothing(rng):
    from numba import cuda

    from asrkit.learners import DeviceLearner

    cfg = LearnerConfig(type="adam", clip_value=1.0)
    params = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    dev = DeviceLearner(_learner(cfg, params))
    grads = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    grads[1][3] = np.nan
    grads[2][0, 1, 2] = np.inf
    assert not dev.step([cuda.to_device(g) for g in grads], 0.1, 10, 0.1)
    dev.download()
    for a, b in zip(params, dev.learner.parameters):
        np.testing.assert_array_equal(a, b.value)
    assert dev.learner.step == 0


def test_global_sumsq_matches_numpy(rng):
    from numba import cuda

    from asrkit.kernels.cuda.update import global_sumsq

    grads = [rng.standard_normal(s).astype(np.float32) for s in [(300,), (3, 7), (1,)]]
    ss, bad = global_sumsq([cuda.to_device(g) for g in grads], 0.5, 0.4)
    want = sum(float(np.sum(np.clip(g * np.float32(0.5), -0.4, 0.4).astype(np.float64) ** 2))
               for g in grads)
    assert bad == 0
    assert ss == pytest.approx(want, rel=1e-6)
    ss2, _ = global_sumsq([cuda.to_device(g) for g in grads], 0.5, 0.4)
    assert ss2 == ss  # fixed launch shape: the same bits every time


def test_upload_restores_state(rng):
    from asrkit.learners import DeviceLearner

    cfg = LearnerConfig(type="fsadagrad")
    params = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    opt = _learner(cfg, [np.zeros(s, np.float32) for s in SHAPES])
    dev = DeviceLearner(opt)
    slots = [a for k in opt.slots for a in opt.slots[k]]
    for p, v in zip(opt.parameters, params):
        p.value[...] = v
    for s in slots:
        s[...] = rng.standard_normal(s.shape)
    dev.upload()
    want = [p.copy() for p in params] + [s.copy() for s in slots]
    for a in [p.value for p in opt.parameters] + slots:
        a[...] = 0
    dev.download()
    for a, b in zip(want, [p.value for p in opt.parameters] + slots):
        np.testing.assert_array_equal(a, b)


def test_a_strided_gradient_is_read_correctly(rng):
    from numba import cuda

    from asrkit.learners import DeviceLearner

    cfg = LearnerConfig(type="sgd", momentum=0.5, clip_norm=0.0)
    p = rng.standard_normal((4, 3)).astype(np.float32)
    g = rng.standard_normal((3, 4)).astype(np.float32)
    dev = DeviceLearner(_learner(cfg, [p]))
    assert dev.step([cuda.to_device(g).T], 0.1, 1, 1.0)
    dev.download()
    np.testing.assert_allclose(dev.learner.parameters[0].value, p - np.float32(0.1) * g.T,
                               rtol=1e-6)
