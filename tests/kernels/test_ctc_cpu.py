"""CTC loss on the CPU kernel and through the public dispatcher, against the numpy twin."""

import numpy as np
import pytest

from asrkit.kernels import DeviceUnavailableError, ctc_loss
from asrkit.kernels.reference import ctc as ref
from tests.kernels.test_ctc import make_batch, torch_ctc


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("blank", [0, 2, 4])
def test_cpu_matches_twin(rng, dtype, blank):
    batch = make_batch(rng, T=15, B=6, C=5, S=6, blank=blank, scale=3.0, dtype=dtype)
    costs, grad = ctc_loss(*batch, blank=blank, device="cpu")
    want_costs, want_grad = ref.ctc_loss(*batch, blank=blank)
    assert costs.dtype == dtype and grad.dtype == dtype and grad.shape == batch[0].shape
    tol = 1e-5 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(costs, want_costs, rtol=tol)
    np.testing.assert_allclose(grad, want_grad, atol=tol)


def test_cpu_random_ragged_shapes(rng):
    for _ in range(20):
        T, B, C, S = (int(v) for v in rng.integers(1, [9, 5, 7, 6]))
        C = max(C, 2)
        blank = int(rng.integers(0, C))
        batch = make_batch(rng, T, B, C, S, blank=blank, scale=3.0)
        costs, grad = ctc_loss(*batch, blank=blank)
        want_costs, want_grad = ref.ctc_loss(*batch, blank=blank)
        np.testing.assert_allclose(costs, want_costs, rtol=1e-5)
        np.testing.assert_allclose(grad, want_grad, atol=1e-5)


def test_cpu_matches_torch_at_training_sizes(rng):
    # T close to 2S+1 exercises the band of states that can still finish
    batch = make_batch(rng, T=60, B=4, C=30, S=28, scale=3.0)
    costs, grad = ctc_loss(*batch)
    want_costs, want_grad = torch_ctc(*batch)
    np.testing.assert_allclose(costs, want_costs, rtol=1e-5)
    np.testing.assert_allclose(grad, want_grad, atol=1e-5)


def test_cpu_impossible_and_empty(rng):
    logits = rng.standard_normal((3, 4, 4)).astype(np.float32)
    targets = np.array([[1, 1], [1, 2], [0, 0], [3, 0]], dtype=np.int32)
    il = np.array([2, 1, 0, 0], dtype=np.int32)
    tl = np.array([2, 2, 0, 1], dtype=np.int32)
    costs, grad = ctc_loss(logits, targets, il, tl)
    np.testing.assert_array_equal(costs, [np.inf, np.inf, 0.0, np.inf])
    assert not grad.any()


def test_peaked_extreme_logits_stay_finite(rng):
    # probabilities far below float32's range must not turn into NaN: log space throughout
    logits, targets, il, tl = make_batch(rng, T=30, B=2, C=6, S=8, scale=60.0)
    costs, grad = ctc_loss(logits, targets, il, tl)
    want_costs, want_grad = ref.ctc_loss(logits, targets, il, tl)
    assert np.isfinite(costs).all() and np.isfinite(grad).all()
    np.testing.assert_allclose(costs, want_costs, rtol=1e-5)
    np.testing.assert_allclose(grad, want_grad, atol=1e-5)


@pytest.mark.parametrize("change, message", [
    (lambda a: a["targets"].__setitem__((1, 0), 0), r"sequence 1: targets\[1, 0\]=0"),
    (lambda a: a["targets"].__setitem__((0, 0), 9), r"sequence 0: targets\[0, 0\]=9"),
    (lambda a: a["il"].__setitem__(2, 11), r"sequence 2: input_lengths\[2\]=11"),
    (lambda a: a["tl"].__setitem__(1, 4), r"sequence 1: target_lengths\[1\]=4"),
    (lambda a: a.__setitem__("targets", a["targets"][:2]), r"targets must be padded"),
    (lambda a: a.__setitem__("blank", 5), r"blank=5"),
    (lambda a: a.__setitem__("logits", a["logits"][0]), r"logits must be \[T, B, C\]"),
])
def test_bad_input_names_the_sequence(rng, change, message):
    logits, targets, il, tl = make_batch(rng, T=10, B=3, C=5, S=3)
    tl[:] = 3
    args = {"logits": logits, "targets": targets, "il": il, "tl": tl, "blank": 0}
    change(args)
    with pytest.raises(ValueError, match=message):
        ctc_loss(args["logits"], args["targets"], args["il"], args["tl"], blank=args["blank"])


def test_reference_device_runs_the_twin(rng):
    batch = make_batch(rng, T=6, B=2, C=4, S=2)
    costs, grad = ctc_loss(*batch, device="reference")
    want_costs, want_grad = ref.ctc_loss(*batch)
    np.testing.assert_array_equal(costs, want_costs)
    np.testing.assert_array_equal(grad, want_grad)


def test_cuda_without_gpu_raises_clear_error(rng, monkeypatch):
    from numba import cuda

    import asrkit.kernels._device as device

    monkeypatch.setattr(device, "cuda_simulated", lambda: False)
    monkeypatch.setattr(cuda, "is_available", lambda: False)
    with pytest.raises(DeviceUnavailableError, match="no CUDA GPU"):
        ctc_loss(*make_batch(rng, T=4, B=1, C=3, S=1), device="cuda")


@pytest.mark.parametrize("device", ["reference", "cpu"])
def test_empty_targets_cost_the_all_blank_path(rng, device):
    logits = rng.standard_normal((5, 2, 4)).astype(np.float32)
    targets = np.zeros((2, 0), dtype=np.int32)  # S = 0
    il = np.array([5, 1], dtype=np.int32)
    costs, grad = ctc_loss(logits, targets, il, np.zeros(2, np.int32), blank=3, device=device)
    logp = ref.log_softmax(logits)
    np.testing.assert_allclose(costs, [-logp[:5, 0, 3].sum(), -logp[0, 1, 3]], rtol=1e-6)
    onehot = np.zeros(4)
    onehot[3] = 1
    np.testing.assert_allclose(grad[0, 1], np.exp(logp[0, 1]) - onehot, atol=1e-6)
    assert not grad[1:, 1].any()
