"""RNN-T CPU kernels (numba) against the numpy twin and torch; the dispatcher's checks."""

import numpy as np
import pytest

import asrkit.kernels as K
from asrkit.kernels import rnnt_joiner_loss, rnnt_loss
from asrkit.kernels.reference import rnnt as ref
from tests.kernels.test_rnnt import make_batch, make_joiner, torch_rnnt


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("blank", [0, 5, 8])
def test_cpu_loss_matches_twin(rng, dtype, blank):
    batch = make_batch(rng, B=5, T=11, U=6, V=9, blank=blank, scale=3.0, dtype=dtype)
    costs, grad = rnnt_loss(*batch, blank=blank, device="cpu")
    want_costs, want_grad = ref.rnnt_loss(*batch, blank=blank)
    assert costs.dtype == dtype and grad.dtype == dtype and grad.shape == batch[0].shape
    tol = 1e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(costs, want_costs, rtol=tol)
    np.testing.assert_allclose(grad, want_grad, atol=tol)


def test_cpu_loss_matches_torch_on_longer_sequences(rng):
    logits, targets, il, tl = make_batch(rng, B=3, T=60, U=20, V=40, scale=4.0)
    costs, grad = rnnt_loss(logits, targets, il, tl)  # device None: numpy arrays run on cpu
    want_costs, want_grad = torch_rnnt(logits, targets, il, tl)
    assert costs.sum() > 100  # large values: agreement is relative
    np.testing.assert_allclose(costs, want_costs, rtol=1e-6)
    np.testing.assert_allclose(grad, want_grad, atol=1e-6)


def test_cpu_in_place_writes_the_gradient_over_the_logits(rng):
    logits, targets, il, tl = make_batch(rng, B=4, T=7, U=3, V=6)
    want_costs, want_grad = rnnt_loss(logits, targets, il, tl, device="cpu")
    work = logits.copy()
    costs, grad = rnnt_loss(work, targets, il, tl, device="cpu", in_place=True)
    assert grad is work
    np.testing.assert_array_equal(costs, want_costs)
    np.testing.assert_array_equal(grad, want_grad)
    with pytest.raises(ValueError, match="writeable C-contiguous"):
        rnnt_loss(np.asfortranarray(logits), targets, il, tl, device="cpu", in_place=True)


def test_cpu_no_frames_and_padding(rng):
    logits, targets, il, tl = make_batch(rng, B=4, T=5, U=3, V=4)
    il[1] = 0
    costs, grad = rnnt_loss(logits, targets, il, tl, device="cpu")
    assert costs[1] == np.inf and not grad[1].any()
    for b in range(4):
        assert not grad[b, il[b]:].any() and not grad[b, :, tl[b] + 1:].any()
    noisy = logits.copy()
    for b in range(4):
        noisy[b, il[b]:] = 1e4
        noisy[b, :, tl[b] + 1:] = -1e4
    costs2, grad2 = rnnt_loss(noisy, targets, il, tl, device="cpu")
    np.testing.assert_array_equal(costs, costs2)
    np.testing.assert_array_equal(grad, grad2)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cpu_joiner_loss_matches_twin_without_pruning(rng, dtype):
    from asrkit.kernels.cpu import rnnt as cpu

    args = make_joiner(rng, B=4, T=9, U=5, V=11, H=6, blank=3, dtype=dtype)
    want_costs, want_grads = ref.rnnt_joiner_loss(*args, blank=3)
    # blocks of 7 rows: blocks straddle frames and sequences
    costs, grads = cpu.rnnt_joiner_loss(*args, blank=3, block=7, prune=0.0)
    tol = 2e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(costs, want_costs, rtol=tol)
    for g, w in zip(grads, want_grads):
        assert g.dtype == dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


def test_cpu_joiner_pruning_changes_gradients_below_its_bound(rng):
    args = make_joiner(rng, B=3, T=40, U=12, V=16, H=8, dtype=np.float64)
    want_costs, want_grads = ref.rnnt_joiner_loss(*args)
    for prune in (1e-12, 1e-6):
        costs, grads = rnnt_joiner_loss(*args, device="cpu", prune=prune)
        np.testing.assert_allclose(costs, want_costs, rtol=1e-12)  # the forward is exact
        rows = int(np.sum(args[5] * (args[6] + 1)))  # a bound per node, times the nodes
        bound = 2 * prune * max(np.abs(args[2]).max(), 1.0) * rows
        for g, w in zip(grads, want_grads):
            assert np.abs(g - w).max() <= bound


def test_cpu_joiner_padding_never_reaches_costs_or_gradients(rng):
    enc, pred, weight, bias, targets, il, tl = make_joiner(rng, B=4, T=6, U=4, V=7, H=5)
    costs, grads = rnnt_joiner_loss(enc, pred, weight, bias, targets, il, tl)
    enc2, pred2 = enc.copy(), pred.copy()
    for b in range(4):
        enc2[il[b]:, b] = np.nan
        pred2[tl[b] + 1:, b] = np.nan
    costs2, grads2 = rnnt_joiner_loss(enc2, pred2, weight, bias, targets, il, tl)
    np.testing.assert_array_equal(costs, costs2)
    for g, g2 in zip(grads, grads2):
        np.testing.assert_array_equal(g, g2)
    for b in range(4):
        assert not grads[0][il[b]:, b].any() and not grads[1][tl[b] + 1:, b].any()


def test_cpu_joiner_matches_rnnt_loss_on_the_joiner_logits(rng):
    enc, pred, weight, bias, targets, il, tl = make_joiner(rng, B=3, T=8, U=4, V=9, H=6)
    logits = ref.joiner(enc, pred, weight, bias).astype(np.float32)
    want, _ = rnnt_loss(logits, targets, il, tl)
    costs, _ = rnnt_joiner_loss(enc, pred, weight, bias, targets, il, tl)
    np.testing.assert_allclose(costs, want, rtol=1e-6)


def test_exported_and_reference_device(rng):
    assert K.rnnt_loss is rnnt_loss and "rnnt_joiner_loss" in K.__all__
    batch = make_batch(rng, B=2, T=3, U=2, V=4)
    costs, grad = rnnt_loss(*batch, device="reference")
    want_costs, want_grad = ref.rnnt_loss(*batch)
    np.testing.assert_array_equal(costs, want_costs)
    np.testing.assert_array_equal(grad, want_grad)


@pytest.mark.parametrize("change, message", [
    (lambda a: a.update(logits=a["logits"][0]), r"logits must be \[B, T, U\+1, V\]"),
    (lambda a: a.update(logits=a["logits"].astype(np.int32)), "float32 or float64"),
    (lambda a: a.update(blank=4), r"blank=4 is not a class index in \[0, 4\)"),
    (lambda a: a["targets"].__setitem__((1, 0), 0), r"sequence 1: targets\[1, 0\]=0 is not a"),
    (lambda a: a["targets"].__setitem__((0, 1), 9), r"sequence 0: targets\[0, 1\]=9"),
    (lambda a: a["il"].__setitem__(1, 6), r"sequence 1: input_lengths\[1\]=6 is outside \[0, 5\]"),
    (lambda a: a["tl"].__setitem__(0, 4), r"sequence 0: target_lengths\[0\]=4 is outside"),
    (lambda a: a.update(il=a["il"][:1]), r"input_lengths must have shape \(2,\)"),
    (lambda a: a.update(targets=a["targets"][:1]), r"targets must be padded \[B=2, S\]"),
    (lambda a: a.update(tl=a["tl"].astype(np.float32)), "target_lengths must be integers"),
])
def test_bad_arguments_give_one_line_errors(rng, change, message):
    logits = rng.standard_normal((2, 5, 4, 4)).astype(np.float32)
    a = {"logits": logits, "targets": np.array([[1, 2, 3], [3, 3, 1]], np.int32),
         "il": np.array([5, 3], np.int32), "tl": np.array([3, 2], np.int32), "blank": 0}
    change(a)
    with pytest.raises((ValueError, TypeError), match=message) as e:
        rnnt_loss(a["logits"], a["targets"], a["il"], a["tl"], blank=a["blank"])
    assert "\n" not in str(e.value) and str(e.value).startswith("rnnt_loss: ")


def test_joiner_bad_shapes_give_one_line_errors(rng):
    enc, pred, weight, bias, targets, il, tl = make_joiner(rng, B=2, T=4, U=2, V=5, H=3)
    with pytest.raises(ValueError, match=r"pred must be \[U\+1, B=2, H=3\]"):
        rnnt_joiner_loss(enc, pred[:, :, :2], weight, bias, targets, il, tl)
    with pytest.raises(ValueError, match=r"weight must be \[V, H=3\]"):
        rnnt_joiner_loss(enc, pred, weight.T, bias, targets, il, tl)
    with pytest.raises(ValueError, match=r"bias must be \[V=5\]"):
        rnnt_joiner_loss(enc, pred, weight, bias[:3], targets, il, tl)
    with pytest.raises(TypeError, match="weight is float64 but enc is float32"):
        rnnt_joiner_loss(enc, pred, weight.astype(np.float64), bias, targets, il, tl)
    with pytest.raises(ValueError, match=r"target_lengths\[0\]=3 is outside \[0, 2\]"):
        rnnt_joiner_loss(enc, pred, weight, bias, targets, il, np.array([3, 0], np.int32))
    with pytest.raises(ValueError, match="prune=-1.0 must be >= 0"):
        rnnt_joiner_loss(enc, pred, weight, bias, targets, il, tl, prune=-1.0)


def test_cpu_joiner_threads_split_the_nodes_without_changing_results(rng):
    from asrkit.kernels.cpu import rnnt as cpu

    args = make_joiner(rng, B=3, T=10, U=4, V=8, H=5)
    costs1, grads1 = cpu.rnnt_joiner_loss(*args, block=6, threads=1)
    costs3, grads3 = cpu.rnnt_joiner_loss(*args, block=6, threads=3)
    np.testing.assert_allclose(costs3, costs1, rtol=1e-6)
    for g1, g3 in zip(grads1, grads3):  # sums over nodes in another order
        np.testing.assert_allclose(g3, g1, rtol=1e-5, atol=1e-6)
