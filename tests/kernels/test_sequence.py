"""Sequence kernels: the numpy twin against torch / hand-built expectations, and every device
against the twin (CUDA under the simulator, tiny shapes)."""

import numpy as np
import pytest
import torch

from asrkit.kernels import sequence as seq

LENGTHS = np.array([5, 0, 2, 4], np.int32)
T, B, D = 5, 4, 3

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def to_device(a, device):
    if device != "cuda" or a is None:
        return a
    from numba import cuda

    return cuda.to_device(np.ascontiguousarray(a))


def to_host(a):
    return a.copy_to_host() if hasattr(a, "copy_to_host") else np.asarray(a)


def batch(rng, dtype=np.float32, shape=(T, B, D)):
    x = rng.standard_normal(shape).astype(dtype)
    x[3:, 2] = 1e4  # padding garbage that must never show
    x[:, 1] = -1e4
    return x


# ---- the twin against torch and against hand-built expectations --------------------------------

@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("axis", [-1, 0])
def test_reference_softmax_matches_torch(rng, log, axis):
    x = batch(rng, np.float64)
    dy = rng.standard_normal(x.shape)
    fn = seq.masked_log_softmax if log else seq.masked_softmax
    bwd = seq.masked_log_softmax_backward if log else seq.masked_softmax_backward
    y = fn(x, LENGTHS, axis, device="reference")
    dx = bwd(dy, y, LENGTHS, axis, device="reference")
    for b, L in enumerate(LENGTHS):
        xt = torch.tensor(x[:L, b], requires_grad=True)
        dim = 1 if axis == -1 else 0
        yt = torch.log_softmax(xt, dim) if log else torch.softmax(xt, dim)
        (yt * torch.tensor(dy[:L, b])).sum().backward()
        np.testing.assert_allclose(y[:L, b], yt.detach().numpy(), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(dx[:L, b], xt.grad.numpy(), rtol=1e-10, atol=1e-12)
        assert not y[L:, b].any() and not dx[L:, b].any()


def test_reference_splice_is_kaldi_splice(rng):
    x = batch(rng)
    y = seq.splice_frames(x, LENGTHS, left=2, right=1, device="reference")
    assert y.shape == (T, B, 4 * D)
    L = LENGTHS[3]
    frames = x[:L, 3]
    # Kaldi splice-feats: rows t-2, t-1, t, t+1 with the first/last row repeated at the edges
    expected = np.concatenate([frames[np.clip(np.arange(L) + o, 0, L - 1)] for o in (-2, -1, 0, 1)],
                              axis=1)
    np.testing.assert_array_equal(y[:L, 3], expected)
    assert not y[L:, 3].any() and not y[:, 1].any()


def test_reference_reverse_and_mean(rng):
    x = batch(rng)
    y = seq.sequence_reverse(x, LENGTHS, device="reference")
    np.testing.assert_array_equal(y[:2, 2], x[:2, 2][::-1])
    assert not y[2:, 2].any()
    m = seq.masked_mean(x, LENGTHS, device="reference")
    np.testing.assert_allclose(m[3], x[:4, 3].mean(0), rtol=1e-6)
    assert not m[1].any()


@pytest.mark.parametrize("name", ["masked_softmax", "masked_log_softmax"])
@pytest.mark.parametrize("axis", [-1, 0])
def test_reference_softmax_gradient_by_finite_differences(rng, name, axis):
    x = batch(rng, np.float64)
    r, v = rng.standard_normal(x.shape), rng.standard_normal(x.shape)
    fn = getattr(seq, name)
    y = fn(x, LENGTHS, axis, device="reference")
    dx = getattr(seq, name + "_backward")(r, y, LENGTHS, axis, device="reference")
    eps = 1e-6
    numeric = ((fn(x + eps * v, LENGTHS, axis, device="reference")
                - fn(x - eps * v, LENGTHS, axis, device="reference")) * r).sum() / (2 * eps)
    np.testing.assert_allclose((dx * v).sum(), numeric, rtol=1e-7)


# ---- linear ops: the backward is the adjoint of the forward --------------------------------------

LINEAR = {
    "masked_sum": (lambda x, d: seq.masked_sum(x, LENGTHS, device=d),
                   lambda g, d: seq.masked_sum_backward(g, LENGTHS, T, device=d)),
    "masked_mean": (lambda x, d: seq.masked_mean(x, LENGTHS, device=d),
                    lambda g, d: seq.masked_mean_backward(g, LENGTHS, T, device=d)),
    "sequence_reverse": (lambda x, d: seq.sequence_reverse(x, LENGTHS, device=d),
                         lambda g, d: seq.sequence_reverse_backward(g, LENGTHS, device=d)),
    "splice_frames": (lambda x, d: seq.splice_frames(x, LENGTHS, 2, 1, device=d),
                      lambda g, d: seq.splice_frames_backward(g, LENGTHS, 2, 1, device=d)),
}


@pytest.mark.parametrize("name", sorted(LINEAR))
def test_reference_backward_is_adjoint(rng, name):
    fwd, bwd = LINEAR[name]
    x = rng.standard_normal((T, B, D))
    y = fwd(x, "reference")
    g = rng.standard_normal(y.shape)
    dx = bwd(g, "reference")
    assert dx.shape == x.shape
    np.testing.assert_allclose((y * g).sum(), (dx * x).sum(), rtol=1e-10)


# ---- every device against the twin --------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(LINEAR))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_linear_ops_match_reference(rng, device, name, dtype):
    fwd, bwd = LINEAR[name]
    x = batch(rng, dtype)
    y_ref = fwd(x, "reference")
    g = rng.standard_normal(y_ref.shape).astype(dtype)
    dx_ref = bwd(g, "reference")
    y = fwd(to_device(x, device), device)
    dx = bwd(to_device(g, device), device)
    tol = 1e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(to_host(y), y_ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(to_host(dx), dx_ref, rtol=tol, atol=tol)
    assert to_host(y).dtype == dtype and to_host(dx).dtype == dtype


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax_matches_reference(rng, device, log, axis):
    name = "masked_log_softmax" if log else "masked_softmax"
    x = batch(rng)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    y_ref = getattr(seq, name)(x, LENGTHS, axis, device="reference")
    dx_ref = getattr(seq, name + "_backward")(dy, y_ref, LENGTHS, axis, device="reference")
    y = getattr(seq, name)(to_device(x, device), LENGTHS, axis, device=device)
    dx = getattr(seq, name + "_backward")(to_device(dy, device), y, LENGTHS, axis, device=device)
    np.testing.assert_allclose(to_host(y), y_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(to_host(dx), dx_ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_trailing_feature_axes(rng, device):
    x = rng.standard_normal((T, B, 2, 3)).astype(np.float32)
    s = seq.masked_sum(to_device(x, device), LENGTHS, device=device)
    assert s.shape == (B, 2, 3)
    np.testing.assert_allclose(to_host(s), seq.masked_sum(x, LENGTHS, device="reference"),
                               rtol=1e-6)
    ys = seq.masked_softmax(to_device(x, device), LENGTHS, axis=0, device=device)
    np.testing.assert_allclose(to_host(ys).sum(0)[[0, 2, 3]], 1.0, rtol=1e-5)


def test_bad_arguments():
    x = np.zeros((3, 2, 4), np.float32)
    with pytest.raises(ValueError, match="lengths\\[0\\] = 4 is outside"):
        seq.masked_sum(x, np.array([4, 1]))
    with pytest.raises(ValueError, match="axis must be"):
        seq.masked_softmax(x, None, axis=1)
    with pytest.raises(ValueError, match="contexts must be >= 0"):
        seq.splice_frames(x, None, -1, 0)
    with pytest.raises(ValueError, match="expected an array \\[T, B, D\\]"):
        seq.splice_frames(x[0], None, 1, 1)
