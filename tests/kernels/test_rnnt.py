"""RNN-T loss: the numpy twin against every alignment enumerated, against torch autograd, and by
finite differences.

torchaudio's ``rnnt_loss`` has no build for the installed torch 2.13 and fast_rnnt/k2 ship no
wheel that loads here, so the torch reference is the autograd recursion of ``asrkit bench rnnt``
(``torch_rnnt_loss``: log-softmax, gathers and ``torch.logaddexp`` over the lattice's
anti-diagonals; autograd gives its gradient); where torchaudio does load, it is checked too.
Also holds ``make_batch`` and ``make_joiner``, the random ragged batches the CPU and CUDA tests
reuse.
"""

import itertools

import numpy as np
import pytest

from asrkit.kernels.reference import rnnt as ref

torch = pytest.importorskip("torch")
from asrkit.bench.rnnt import torch_rnnt_loss, torchaudio_rnnt_loss  # noqa: E402


def make_batch(rng, B, T, U, V, blank=0, scale=2.0, dtype=np.float32):
    """A random ragged batch: (logits [B, T, U+1, V], targets int32 [B, U], input_lengths,
    target_lengths); the first sequence is full size, one has an empty target."""
    labels = np.array([c for c in range(V) if c != blank])
    logits = (rng.standard_normal((B, T, U + 1, V)) * scale).astype(dtype)
    targets = rng.choice(labels, size=(B, U)).astype(np.int32)
    il = rng.integers(1, T + 1, size=B).astype(np.int32)
    tl = rng.integers(0, U + 1, size=B).astype(np.int32)
    il[0], tl[0] = T, U
    if B > 2:
        tl[2] = 0
    return logits, targets, il, tl


def make_joiner(rng, B, T, U, V, H, blank=0, dtype=np.float32):
    """Random joiner inputs: (enc [T, B, H], pred [U+1, B, H], weight [V, H], bias [V], targets,
    input_lengths, target_lengths), ragged as in ``make_batch``."""
    _, targets, il, tl = make_batch(rng, B, T, U, V, blank=blank)
    enc = rng.standard_normal((T, B, H)).astype(dtype)
    pred = rng.standard_normal((U + 1, B, H)).astype(dtype)
    weight = (rng.standard_normal((V, H)) * 2 / np.sqrt(H)).astype(dtype)
    bias = rng.standard_normal(V).astype(dtype)
    return enc, pred, weight, bias, targets, il, tl


def brute_force_cost(logits_b, target, blank):
    """-log of the summed probability of every alignment, enumerated: logits [T, U+1, V]."""
    T = logits_b.shape[0]
    U = len(target)
    if T == 0:
        return np.inf
    logp = ref.log_softmax(logits_b)
    scores = []
    # an alignment is T blanks and U labels in some order, ending with a blank
    for label_at in itertools.combinations(range(T - 1 + U), U):
        t = u = 0
        s = 0.0
        for k in range(T - 1 + U):
            if k in label_at:
                s += logp[t, u, target[u]]
                u += 1
            else:
                s += logp[t, u, blank]
                t += 1
        scores.append(s + logp[t, u, blank])
    return -np.logaddexp.reduce(scores)


def torch_rnnt(logits, targets, il, tl, blank=0):
    """torch's float64 costs [B] and d sum(costs) / d logits."""
    x = torch.tensor(logits, dtype=torch.float64, requires_grad=True)
    costs = torch_rnnt_loss(x, torch.tensor(targets), torch.tensor(il), torch.tensor(tl),
                            blank=blank)
    costs.sum().backward()
    return costs.detach().numpy(), x.grad.numpy()


@pytest.mark.parametrize("blank", [0, 2, 4])
def test_costs_equal_every_alignment_enumerated(rng, blank):
    V = 5
    labels = [c for c in range(V) if c != blank]
    for T, U in [(1, 0), (1, 1), (1, 3), (2, 2), (3, 2), (4, 3), (5, 1)]:
        logits = rng.standard_normal((1, T, U + 1, V)) * 2
        target = rng.choice(labels, size=U).astype(np.int32)
        costs, _ = ref.rnnt_loss(logits, target[None], [T], [U], blank=blank)
        np.testing.assert_allclose(costs[0], brute_force_cost(logits[0], target, blank),
                                   rtol=1e-12)


def test_ragged_batch_costs_equal_enumeration_over_the_valid_part(rng):
    logits, targets, il, tl = make_batch(rng, B=4, T=4, U=3, V=6, dtype=np.float64)
    costs, _ = ref.rnnt_loss(logits, targets, il, tl)
    for b in range(4):
        want = brute_force_cost(logits[b, :il[b], :tl[b] + 1], targets[b, :tl[b]], 0)
        np.testing.assert_allclose(costs[b], want, rtol=1e-12)


@pytest.mark.parametrize("blank", [0, 3, 6])
def test_twin_matches_torch_autograd(rng, blank):
    batch = make_batch(rng, B=5, T=9, U=5, V=7, blank=blank)
    costs, grad = ref.rnnt_loss(*batch, blank=blank)
    want_costs, want_grad = torch_rnnt(*batch, blank=blank)
    assert costs.dtype == np.float32 and grad.dtype == np.float32
    np.testing.assert_allclose(costs, want_costs, rtol=1e-6)
    np.testing.assert_allclose(grad, want_grad, atol=2e-7)


def test_twin_matches_torchaudio_where_it_loads(rng):
    ta = torchaudio_rnnt_loss()
    if ta is None:
        pytest.skip("torchaudio does not load beside this torch")
    logits, targets, il, tl = make_batch(rng, B=4, T=8, U=4, V=6)
    x = torch.tensor(logits, requires_grad=True)
    costs = ta(x, torch.tensor(targets), torch.tensor(il), torch.tensor(tl), blank=0,
               reduction="none")
    costs.sum().backward()
    want_costs, want_grad = ref.rnnt_loss(logits, targets, il, tl)
    np.testing.assert_allclose(costs.detach().numpy(), want_costs, rtol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), want_grad, atol=1e-5)


def test_gradient_is_zero_on_padding_and_rows_sum_to_zero(rng):
    logits, targets, il, tl = make_batch(rng, B=4, T=6, U=4, V=5)
    _, grad = ref.rnnt_loss(logits, targets, il, tl)
    for b in range(4):
        assert not grad[b, il[b]:].any() and not grad[b, :, tl[b] + 1:].any()
        # softmax rows minus posteriors that sum to the node's occupancy
        np.testing.assert_allclose(grad[b].sum(axis=-1), 0, atol=1e-6)
        assert np.abs(grad[b, :il[b], :tl[b] + 1]).sum() > 0


def test_padding_never_reaches_costs_or_gradients(rng):
    logits, targets, il, tl = make_batch(rng, B=4, T=6, U=4, V=5)
    costs, grad = ref.rnnt_loss(logits, targets, il, tl)
    noisy, noisy_targets = logits.copy(), targets.copy()
    for b in range(4):
        noisy[b, il[b]:] = 50 * rng.standard_normal(noisy[b, il[b]:].shape)
        noisy[b, :, tl[b] + 1:] = -50
        noisy_targets[b, tl[b]:] = 0  # the blank: not a valid label, but padding is not read
    costs2, grad2 = ref.rnnt_loss(noisy, noisy_targets, il, tl)
    np.testing.assert_array_equal(costs, costs2)
    np.testing.assert_array_equal(grad, grad2)


def test_no_frames_costs_inf_with_zero_gradient(rng):
    logits, targets, il, tl = make_batch(rng, B=3, T=3, U=2, V=4)
    il[1] = 0
    costs, grad = ref.rnnt_loss(logits, targets, il, tl)
    assert costs[1] == np.inf and not grad[1].any()
    assert np.isfinite(costs[[0, 2]]).all()


def test_twin_gradient_by_finite_differences(rng):
    logits, targets, il, tl = make_batch(rng, B=3, T=4, U=3, V=4, dtype=np.float64)
    costs, grad = ref.rnnt_loss(logits, targets, il, tl)
    assert costs.dtype == np.float64 and grad.dtype == np.float64
    f = lambda x: ref.rnnt_loss(x, targets, il, tl)[0].sum()
    eps = 1e-6
    for _ in range(3):  # random directions, as jax.test_util.check_grads does
        v = rng.standard_normal(logits.shape)
        numeric = (f(logits + eps * v) - f(logits - eps * v)) / (2 * eps)
        np.testing.assert_allclose(numeric, (grad * v).sum(), rtol=1e-7, atol=1e-8)
    for idx in [(0, 0, 0, 0), (0, 3, 3, 0), (1, 0, 1, 2), (2, 0, 0, 3)]:
        e = np.zeros_like(logits)
        e[idx] = eps
        numeric = (f(logits + e) - f(logits - e)) / (2 * eps)
        np.testing.assert_allclose(numeric, grad[idx], rtol=1e-6, atol=1e-9)


def test_joiner_twin_matches_torch_autograd(rng):
    enc, pred, weight, bias, targets, il, tl = make_joiner(rng, B=4, T=6, U=3, V=7, H=5,
                                                           dtype=np.float64)
    costs, grads = ref.rnnt_joiner_loss(enc, pred, weight, bias, targets, il, tl)
    params = [torch.tensor(a, requires_grad=True) for a in (enc, pred, weight, bias)]
    e, p, w, b = params
    h = torch.tanh(e.transpose(0, 1)[:, :, None] + p.transpose(0, 1)[:, None])
    logits = torch.nn.functional.linear(h, w, b)
    want = torch_rnnt_loss(logits, torch.tensor(targets), torch.tensor(il), torch.tensor(tl))
    want.sum().backward()
    np.testing.assert_allclose(costs, want.detach().numpy(), rtol=1e-12)
    for g, q in zip(grads, params):
        np.testing.assert_allclose(g, q.grad.numpy(), rtol=1e-10, atol=1e-12)
    for b_ in range(4):  # padded frames and label positions get nothing
        assert not grads[0][il[b_]:, b_].any() and not grads[1][tl[b_] + 1:, b_].any()


def test_joiner_twin_gradient_by_finite_differences(rng):
    args = make_joiner(rng, B=2, T=3, U=2, V=4, H=3, dtype=np.float64)
    _, grads = ref.rnnt_joiner_loss(*args)
    eps = 1e-6
    for i in range(4):
        def f(x, i=i):
            a = list(args)
            a[i] = x
            return ref.rnnt_joiner_loss(*a)[0].sum()
        v = rng.standard_normal(args[i].shape)
        numeric = (f(args[i] + eps * v) - f(args[i] - eps * v)) / (2 * eps)
        np.testing.assert_allclose(numeric, (grads[i] * v).sum(), rtol=1e-7, atol=1e-8)
