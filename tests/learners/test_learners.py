"""Learners against torch.optim, schedules, clipping, and a BLSTM-CTC model that learns."""

import math

import numpy as np
import pytest

import asrkit.ops as O
from asrkit import losses
from asrkit.graph import input_variable, parameter
from asrkit.layers import BLSTM, Dense, Sequential
from asrkit.learners import (
    SGD,
    Adam,
    AdamW,
    FSAdaGrad,
    NewBob,
    Piecewise,
    Trainer,
    Warmup,
    clip_gradients,
    clip_per_sample,
    momentum_as_time_constant,
)

torch = pytest.importorskip("torch")


def _run_against_torch(make_ours, make_ref, rng, steps=5):
    w0 = rng.standard_normal((3, 2)).astype(np.float32)
    p = parameter((3, 2), init=w0)
    tp = torch.nn.Parameter(torch.from_numpy(w0.copy()))
    ours, ref = make_ours([p]), make_ref([tp])
    for _ in range(steps):
        g = rng.standard_normal((3, 2)).astype(np.float32)
        ours.update({p: g}, sample_count=1)
        tp.grad = torch.from_numpy(g.copy())
        ref.step()
    np.testing.assert_allclose(p.value, tp.detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name,ours,ref", [
    ("sgd", lambda ps: SGD(ps, 0.1), lambda ps: torch.optim.SGD(ps, 0.1)),
    ("momentum", lambda ps: SGD(ps, 0.1, momentum=0.9),
     lambda ps: torch.optim.SGD(ps, 0.1, momentum=0.9)),
    ("nesterov_l2", lambda ps: SGD(ps, 0.1, momentum=0.9, nesterov=True, l2=0.01),
     lambda ps: torch.optim.SGD(ps, 0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("adam", lambda ps: Adam(ps, 0.01), lambda ps: torch.optim.Adam(ps, 0.01)),
    ("adamw", lambda ps: AdamW(ps, 0.01, weight_decay=0.1),
     lambda ps: torch.optim.AdamW(ps, 0.01, weight_decay=0.1)),
])
def test_update_rules_match_torch(name, ours, ref, rng):
    _run_against_torch(ours, ref, rng)


def test_learning_rate_units_and_time_constants():
    p = parameter(1, init=0.0)
    SGD([p], 0.1).update({p: np.array([4.0], np.float32)}, sample_count=4)
    assert p.value[0] == pytest.approx(-0.1)  # per minibatch: the mean gradient
    SGD([p], 0.1, lr_per_sample=True).update({p: np.array([4.0], np.float32)}, sample_count=4)
    assert p.value[0] == pytest.approx(-0.5)  # per sample: the summed gradient
    assert momentum_as_time_constant(1000, 100) == pytest.approx(math.exp(-0.1))


def test_fsadagrad_normalises_gradient_scale():
    a, b = parameter(2, init=0.0), parameter(2, init=0.0)
    la = FSAdaGrad([a], 0.01, momentum=0.0, variance_time_constant=10.0)
    lb = FSAdaGrad([b], 0.01, momentum=0.0, variance_time_constant=10.0)
    for _ in range(3):
        la.update({a: np.array([1.0, -2.0], np.float32)}, 5)
        lb.update({b: np.array([100.0, -200.0], np.float32)}, 5)
    np.testing.assert_allclose(a.value, b.value, rtol=1e-5)  # scale-free, like AdaGrad
    assert a.value[0] < 0 < a.value[1]


def test_clipping():
    g = [np.array([3.0, 4.0], np.float32), np.array([0.0], np.float32)]
    norm = clip_gradients(g, 1.0)
    assert norm == pytest.approx(5.0)
    assert np.linalg.norm(g[0]) == pytest.approx(1.0, rel=1e-5)
    np.testing.assert_array_equal(clip_per_sample(np.array([5.0, -9.0]), 2.0, 2), [4.0, -4.0])
    np.testing.assert_allclose(np.linalg.norm(clip_per_sample(np.array([3.0, 4.0]), 1.0, 2,
                                                              truncation=False)), 2.0)


def test_schedules():
    pw = Piecewise([(2, 0.1), 0.05], epoch_size=100)
    assert [pw(0, s) for s in (0, 150, 250, 900)] == [0.1, 0.1, 0.05, 0.05]
    wu = Warmup(1.0, 4, decay="inverse_sqrt")
    assert wu(0, 0) == 0.25 and wu(3, 0) == 1.0 and wu(15, 0) == pytest.approx(0.5)
    cos = Warmup(1.0, 2, decay="cosine", total_steps=12)
    assert cos(11, 0) == pytest.approx(0.0, abs=1e-12)
    nb = NewBob(1.0, start_threshold=0.05, stop_threshold=0.01)
    assert nb.epoch_end(10.0) and nb.lr == 1.0
    assert nb.epoch_end(8.0) and nb.lr == 1.0   # 20% better: keep the rate
    assert nb.epoch_end(7.9) and nb.lr == 0.5   # 1.25%: start halving
    assert nb.epoch_end(7.5) and nb.lr == 0.25  # 5%: keep halving
    assert nb.epoch_end(7.6) is False or nb.rejected  # worse: rejected, and the gain is < 1%
    assert nb.rejected


def _toy_ctc_batch(rng, B=4, C=4, D=6):
    """Frames that encode their label (one-hot + noise), blanks between labels."""
    feats, labels = [], []
    for _ in range(B):
        lab = rng.integers(1, C, rng.integers(2, 4))
        frames = []
        for c in lab:
            frames += [c] * 2 + [0]
        x = np.eye(D)[frames] + 0.1 * rng.standard_normal((len(frames), D))
        feats.append(x.astype(np.float32))
        labels.append(lab.astype(np.int32))
    T, S = max(map(len, feats)), max(map(len, labels))
    X = np.zeros((T, B, D), np.float32)
    Y = np.zeros((S, B), np.int32)
    for b, (x, y) in enumerate(zip(feats, labels)):
        X[: len(x), b], Y[: len(y), b] = x, y
    return (X, np.array([len(x) for x in feats], np.int32)), \
        (Y, np.array([len(y) for y in labels], np.int32))


def test_blstm_ctc_model_loss_falls(rng):
    C = 4
    x = input_variable(6, name="features")
    y = input_variable((), dtype=np.int32, dynamic_axes=("labels", "batch"), name="labels")
    model = Sequential([BLSTM(8), Dense(C)])
    logits = model(x)
    trainer = Trainer(O.ctc_loss(logits, y), Adam(model.parameters, 0.05),
                      metric=O.ctc_greedy_errors(logits, y))
    batch = _toy_ctc_batch(rng)
    feeds = {x: batch[0], y: batch[1]}
    first = trainer.test_minibatch(feeds)
    for _ in range(40):
        trainer.train_minibatch(feeds)
    last = trainer.test_minibatch(feeds)
    assert last["loss"] < 0.3 * first["loss"]
    assert last["metric"] <= first["metric"]
    assert first["samples"] == 4


def test_cross_entropy_criterion_with_sgd(rng):
    x = input_variable(5)
    y = input_variable((), dtype=np.int32)
    z = Dense(3)(x)
    ce = losses.cross_entropy(z, y, reduction="none")
    trainer = Trainer(ce, SGD(z.parameters, 0.5, momentum=0.5),
                      metric=O.classification_error(z, y))
    X = rng.standard_normal((6, 3, 5)).astype(np.float32)
    Y = np.argmax(X[..., :3], axis=-1).astype(np.int32)
    feeds = {x: (X, [6, 4, 5]), y: (Y, [6, 4, 5])}
    before = trainer.test_minibatch(feeds)
    assert before["samples"] == 15
    for _ in range(30):
        trainer.train_minibatch(feeds)
    after = trainer.test_minibatch(feeds)
    assert after["loss"] < 0.5 * before["loss"] and after["metric"] <= 1
