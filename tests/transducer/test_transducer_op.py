"""The transducer criterion op against a torch autograd DP, rnnt_loss on joined logits, and the
gradient checker; the prediction network's start frame."""

import numpy as np
import pytest

import asrkit.ops as O
from asrkit.graph import check_grads, evaluate, forward_backward, input_variable, parameter
from asrkit.kernels import rnnt_loss

torch = pytest.importorskip("torch")


def _torch_rnnt(enc, pred, W, b, targets, il, tl, blank):
    """Costs [B] of the additive joiner + RNN-T by the Graves DP, written in torch (autograd
    gives the reference gradients)."""
    costs = []
    for n in range(enc.shape[1]):
        T, U = int(il[n]), int(tl[n])
        if T == 0:
            costs.append(torch.tensor(float("inf"), dtype=enc.dtype))
            continue
        logits = torch.tanh(enc[:T, n][:, None, :] + pred[: U + 1, n][None, :, :]) @ W.T + b
        lp = torch.log_softmax(logits, dim=-1)  # [T, U+1, V]
        y = torch.as_tensor(targets[n, :U], dtype=torch.long)
        alpha = [[None] * (U + 1) for _ in range(T)]
        alpha[0][0] = torch.zeros((), dtype=enc.dtype)
        for t in range(T):
            for u in range(U + 1):
                if t == 0 and u == 0:
                    continue
                terms = []
                if t > 0:
                    terms.append(alpha[t - 1][u] + lp[t - 1, u, blank])
                if u > 0:
                    terms.append(alpha[t][u - 1] + lp[t, u - 1, y[u - 1]])
                alpha[t][u] = torch.logsumexp(torch.stack(terms), 0)
        costs.append(-(alpha[T - 1][U] + lp[T - 1, U, blank]))
    return torch.stack(costs)


def _case(rng, T=5, B=3, U=3, H=6, V=5, dtype=np.float64):
    enc = rng.standard_normal((T, B, H)).astype(dtype)
    pred = rng.standard_normal((U + 1, B, H)).astype(dtype)
    W = (0.7 * rng.standard_normal((V, H))).astype(dtype)
    b = (0.3 * rng.standard_normal(V)).astype(dtype)
    il = np.array([T, T - 2, 3][:B], np.int32)
    tl = np.array([U, 1, 2][:B], np.int32)
    targets = rng.integers(1, V, (B, U)).astype(np.int32)
    return enc, pred, W, b, targets, il, tl


def _graph(H, V, W, b):
    enc = input_variable(H, name="enc")
    pred = input_variable(H, dynamic_axes=("pred", "batch"), name="pred")
    labels = input_variable((), dtype=np.int32, dynamic_axes=("labels", "batch"), name="labels")
    Wp = parameter(W.shape, init=W, name="Wj", dtype=W.dtype)
    bp = parameter(b.shape, init=b, name="bj", dtype=b.dtype)
    return enc, pred, labels, Wp, bp, O.transducer_loss(enc, pred, labels, Wp, bp)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_costs_and_gradients_equal_a_torch_autograd_dp(dtype):
    rng = np.random.default_rng(0)
    enc, pred, W, b, targets, il, tl = _case(rng, dtype=dtype)
    T, B, H = enc.shape
    e, p, y, Wp, bp, costs = _graph(H, W.shape[0], W, b)
    feeds = {e: (enc, il), p: (pred, tl + 1), y: (np.ascontiguousarray(targets.T), tl)}
    values, grads = forward_backward(O.sum_all(costs), [Wp, bp, e, p], feeds,
                                     dtype=np.dtype(dtype))
    te, tp, tW, tb = (torch.tensor(a.astype(np.float64), requires_grad=True)
                      for a in (enc, pred, W, b))
    ref = _torch_rnnt(te, tp, tW, tb, targets, il, tl, 0)
    ref.sum().backward()
    (got,) = evaluate([costs], feeds, dtype=np.dtype(dtype))
    tol = 1e-9 if dtype == np.float64 else 2e-5
    np.testing.assert_allclose(got, ref.detach().numpy(), rtol=tol, atol=tol)
    for mine, theirs in ((grads[Wp], tW), (grads[bp], tb)):
        np.testing.assert_allclose(mine, theirs.grad.numpy(), rtol=50 * tol, atol=50 * tol)
    # input gradients: valid frames and label positions only (padding is zero by contract)
    ge, gp = np.asarray(grads[e]), np.asarray(grads[p])
    for n in range(B):
        np.testing.assert_allclose(ge[: il[n], n], te.grad.numpy()[: il[n], n],
                                   rtol=50 * tol, atol=50 * tol)
        np.testing.assert_allclose(gp[: tl[n] + 1, n], tp.grad.numpy()[: tl[n] + 1, n],
                                   rtol=50 * tol, atol=50 * tol)
        assert not ge[il[n]:, n].any() and not gp[tl[n] + 1:, n].any()


def test_costs_equal_rnnt_loss_on_the_explicitly_joined_logits():
    rng = np.random.default_rng(1)
    enc, pred, W, b, targets, il, tl = _case(rng, T=7, U=4, V=9, dtype=np.float32)
    logits = np.tanh(enc.transpose(1, 0, 2)[:, :, None, :] + pred.transpose(1, 0, 2)[:, None]) \
        @ W.T + b  # [B, T, U+1, V]
    want, _ = rnnt_loss(np.ascontiguousarray(logits, np.float32), targets, il, tl)
    e, p, y, *_, costs = _graph(enc.shape[2], W.shape[0], W, b)
    (got,) = evaluate([costs], {e: (enc, il), p: (pred, tl + 1),
                                y: (np.ascontiguousarray(targets.T), tl)})
    np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("reduce", ["per_sequence", "sum"])
def test_passes_the_gradient_checker(reduce):
    rng = np.random.default_rng(2)
    enc, pred, W, b, targets, il, tl = _case(rng)
    e, p, y, Wp, bp, costs = _graph(enc.shape[2], W.shape[0], W, b)
    # per_sequence: the checker weighs each cost by its own random factor (the joiner's
    # weight gradient is then summed sequence by sequence); sum: one factor for all
    node = costs if reduce == "per_sequence" else O.sum_all(costs)
    check_grads(node, {e: (enc, il), p: (pred, tl + 1), y: (np.ascontiguousarray(targets.T), tl)},
                eps=1e-6, tol=1e-6)


def test_a_sequence_without_frames_costs_inf_and_no_gradient():
    rng = np.random.default_rng(3)
    enc, pred, W, b, targets, il, tl = _case(rng)
    il[1] = 0
    e, p, y, Wp, bp, costs = _graph(enc.shape[2], W.shape[0], W, b)
    feeds = {e: (enc, il), p: (pred, tl + 1), y: (np.ascontiguousarray(targets.T), tl)}
    (got,) = evaluate([costs], feeds, dtype=np.float64)
    assert np.isinf(got[1]) and np.all(np.isfinite(got[[0, 2]]))


def test_pred_must_have_one_frame_more_than_the_labels():
    rng = np.random.default_rng(4)
    enc, pred, W, b, targets, il, tl = _case(rng)
    e, p, y, Wp, bp, costs = _graph(enc.shape[2], W.shape[0], W, b)
    with pytest.raises(ValueError, match="one frame more than labels"):
        evaluate([costs], {e: (enc, il), p: (pred, tl), y: (np.ascontiguousarray(targets.T), tl)})


def test_prepend_zero_frame_adds_a_leading_zero_frame_per_sequence():
    x = input_variable(2, dynamic_axes=("labels", "batch"))
    data = np.arange(12, dtype=np.float32).reshape(3, 2, 2) + 1
    lengths = np.array([3, 1], np.int32)
    (out,) = evaluate([O.prepend_zero_frame(x)], {x: (data, lengths)})
    np.testing.assert_array_equal(out.lengths, [4, 2])
    np.testing.assert_array_equal(out.data[0], 0)
    np.testing.assert_array_equal(out.data[1:4, 0], data[:, 0])
    np.testing.assert_array_equal(out.data[1, 1], data[0, 1])
    np.testing.assert_array_equal(out.data[2:, 1], 0)
