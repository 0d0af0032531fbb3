"""CTC loss: the numpy twin against torch.nn.functional.ctc_loss, and by finite differences.

Also holds ``make_batch``, the random ragged batches the CPU and CUDA tests reuse.
"""

import numpy as np
import pytest

from asrkit.kernels.reference import ctc as ref

torch = pytest.importorskip("torch")


def make_batch(rng, T, B, C, S, blank=0, scale=2.0, dtype=np.float32, repeats=True):
    """A random ragged CTC batch: (logits [T, B, C], targets int32 [B, S], input_lengths,
    target_lengths), every sequence feasible; the last sequence is full length."""
    labels = np.array([c for c in range(C) if c != blank])
    logits = (rng.standard_normal((T, B, C)) * scale).astype(dtype)
    targets = rng.choice(labels, size=(B, S)).astype(np.int32)
    if repeats and S >= 2:
        targets[0, 1] = targets[0, 0]  # a repeated label needs a blank between
    input_lengths = rng.integers(max(1, T // 2), T + 1, size=B).astype(np.int32)
    input_lengths[-1] = T
    target_lengths = np.zeros(B, dtype=np.int32)
    for b in range(B):
        for L in range(S, -1, -1):
            if ref.min_frames(targets[b, :L]) <= input_lengths[b]:
                target_lengths[b] = rng.integers(0, L + 1) if b % 3 == 2 else L
                break
    return logits, targets, input_lengths, target_lengths


def torch_ctc(logits, targets, input_lengths, target_lengths, blank=0):
    """torch's costs [B] and d sum(costs) / d logits, going through log_softmax as users do."""
    x = torch.tensor(logits, dtype=torch.float64, requires_grad=True)
    costs = torch.nn.functional.ctc_loss(
        x.log_softmax(-1), torch.tensor(targets, dtype=torch.long),
        torch.tensor(input_lengths, dtype=torch.long),
        torch.tensor(target_lengths, dtype=torch.long), blank=blank, reduction="none",
        zero_infinity=False)
    costs.sum().backward()
    return costs.detach().numpy(), x.grad.numpy()


@pytest.mark.parametrize("blank", ["first", "middle", "last"])
def test_twin_matches_torch(rng, blank):
    C = 6
    blank = {"first": 0, "middle": 3, "last": C - 1}[blank]
    batch = make_batch(rng, T=12, B=5, C=C, S=5, blank=blank)
    costs, grad = ref.ctc_loss(*batch, blank=blank)
    want_costs, want_grad = torch_ctc(*batch, blank=blank)
    assert costs.dtype == np.float32 and grad.dtype == np.float32
    np.testing.assert_allclose(costs, want_costs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(grad, want_grad, atol=1e-5)


def test_twin_matches_torch_sum_reduction_on_long_sequences(rng):
    logits, targets, il, tl = make_batch(rng, T=80, B=3, C=20, S=25, scale=4.0)
    costs, grad = ref.ctc_loss(logits, targets, il, tl)
    x = torch.tensor(logits, requires_grad=True)
    total = torch.nn.functional.ctc_loss(x.log_softmax(-1), torch.tensor(targets),
                                         torch.tensor(il), torch.tensor(tl), reduction="sum")
    total.backward()
    assert costs.sum() > 100  # large values: agreement is relative
    np.testing.assert_allclose(costs.sum(), total.item(), rtol=1e-5)
    # torch accumulates alpha/beta in float32 here; against its float64 run we agree far closer
    np.testing.assert_allclose(grad, x.grad.numpy(), atol=5e-4)
    want_costs, want_grad = torch_ctc(logits, targets, il, tl)
    np.testing.assert_allclose(costs, want_costs, rtol=1e-6)
    np.testing.assert_allclose(grad, want_grad, atol=1e-6)


def test_edge_shapes_match_torch(rng):
    # T=1 with one label, T=1 with an empty target, and an empty target over several frames
    logits = rng.standard_normal((3, 3, 4)).astype(np.float32)
    targets = np.array([[2, 0], [1, 1], [3, 3]], dtype=np.int32)
    il = np.array([1, 1, 3], dtype=np.int32)
    tl = np.array([1, 0, 0], dtype=np.int32)
    costs, grad = ref.ctc_loss(logits, targets, il, tl)
    want_costs, want_grad = torch_ctc(logits, targets, il, tl)
    np.testing.assert_allclose(costs, want_costs, rtol=1e-5)
    np.testing.assert_allclose(grad, want_grad, atol=1e-5)


def test_impossible_alignment_costs_inf_with_zero_grad(rng):
    logits = rng.standard_normal((4, 3, 5)).astype(np.float32)
    # 3 labels in 2 frames; "1 1" needs 3 frames (blank between); "1 2 2" fits exactly in 4
    targets = np.array([[1, 2, 3], [1, 1, 0], [1, 2, 2]], dtype=np.int32)
    il = np.array([2, 2, 4], dtype=np.int32)
    tl = np.array([3, 2, 3], dtype=np.int32)
    costs, grad = ref.ctc_loss(logits, targets, il, tl)
    want_costs, _ = torch_ctc(logits, targets, il, tl)
    assert np.isinf(want_costs[:2]).all() and np.isinf(costs[:2]).all()
    assert not grad[:, :2].any()
    np.testing.assert_allclose(costs[2], want_costs[2], rtol=1e-5)


def test_padded_frames_get_zero_grad(rng):
    logits, targets, il, tl = make_batch(rng, T=10, B=4, C=5, S=3)
    il[:] = [10, 6, 3, 8]
    _, grad = ref.ctc_loss(logits, targets, il, np.minimum(tl, 2))
    for b, n in enumerate(il):
        assert not grad[n:, b].any()
        assert np.abs(grad[:n, b]).sum() > 0
        np.testing.assert_allclose(grad[:n, b].sum(axis=-1), 0, atol=1e-6)  # softmax rows


def test_twin_gradient_by_finite_differences(rng):
    logits, targets, il, tl = make_batch(rng, T=7, B=3, C=4, S=3, dtype=np.float64)
    costs, grad = ref.ctc_loss(logits, targets, il, tl)
    assert costs.dtype == np.float64 and grad.dtype == np.float64
    f = lambda x: ref.ctc_loss(x, targets, il, tl)[0].sum()
    eps = 1e-6
    for _ in range(3):  # random directions, as jax.test_util.check_grads does
        v = rng.standard_normal(logits.shape)
        numeric = (f(logits + eps * v) - f(logits - eps * v)) / (2 * eps)
        np.testing.assert_allclose(numeric, (grad * v).sum(), rtol=1e-7, atol=1e-8)
    for idx in [(0, 0, 0), (3, 1, 2), (6, 2, 3)]:
        e = np.zeros_like(logits)
        e[idx] = eps
        numeric = (f(logits + e) - f(logits - e)) / (2 * eps)
        np.testing.assert_allclose(numeric, grad[idx], rtol=1e-6, atol=1e-9)
