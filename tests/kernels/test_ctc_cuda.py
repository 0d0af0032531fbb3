"""CTC kernels on CUDA (numba's simulator without a GPU; tiny shapes) against the numpy twin."""

import numpy as np
import pytest

from asrkit.kernels import ctc_align, ctc_loss
from asrkit.kernels.reference import ctc as ref
from tests.kernels.test_ctc import make_batch

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("blank", [0, 4])
def test_cuda_loss_matches_twin(rng, blank):
    batch = make_batch(rng, T=6, B=2, C=5, S=3, blank=blank, scale=3.0)
    costs, grad = ctc_loss(*batch, blank=blank, device="cuda")
    assert isinstance(costs, np.ndarray) and grad.dtype == np.float32
    want_costs, want_grad = ref.ctc_loss(*batch, blank=blank)
    np.testing.assert_allclose(costs, want_costs, rtol=1e-5)
    np.testing.assert_allclose(grad, want_grad, atol=1e-5)


def test_cuda_ragged_impossible_and_empty(rng):
    logits = rng.standard_normal((4, 2, 3)).astype(np.float32)
    targets = np.array([[1, 1, 2], [2, 0, 0]], dtype=np.int32)
    il = np.array([4, 2], dtype=np.int32)
    tl = np.array([3, 0], dtype=np.int32)  # "1 1 2" needs 4 frames: fits exactly
    costs, grad = ctc_loss(logits, targets, il, tl, device="cuda")
    want_costs, want_grad = ref.ctc_loss(logits, targets, il, tl)
    np.testing.assert_allclose(costs, want_costs, rtol=1e-5)
    np.testing.assert_allclose(grad, want_grad, atol=1e-5)
    il[0] = 3  # now impossible
    costs, grad = ctc_loss(logits, targets, il, tl, device="cuda")
    assert costs[0] == np.inf and not grad[:, 0].any()
    assert not grad[2:, 1].any()


def test_cuda_device_arrays_in_device_arrays_out(rng):
    from numba import cuda

    logits, targets, il, tl = make_batch(rng, T=5, B=2, C=4, S=2, scale=3.0)
    costs, grad = ctc_loss(cuda.to_device(logits), targets, il, tl)
    assert hasattr(grad, "copy_to_host")
    want_costs, want_grad = ref.ctc_loss(logits, targets, il, tl)
    np.testing.assert_allclose(costs.copy_to_host(), want_costs, rtol=1e-5)
    np.testing.assert_allclose(grad.copy_to_host(), want_grad, atol=1e-5)


def test_cuda_alignment_matches_twin(rng):
    batch = make_batch(rng, T=6, B=2, C=5, S=3, scale=3.0)
    path, scores = ctc_align(*batch, device="cuda", return_scores=True)
    want_path, want_scores = ref.ctc_align(*batch, return_scores=True)
    np.testing.assert_array_equal(path, want_path)
    np.testing.assert_allclose(scores, want_scores)


def test_cuda_training_sizes_on_a_real_gpu(rng):
    from asrkit.kernels._device import cuda_simulated

    if cuda_simulated():
        pytest.skip("training sizes only on a real GPU (NUMBA_ENABLE_CUDASIM=0)")
    batch = make_batch(rng, T=300, B=8, C=80, S=60, scale=3.0)
    costs, grad = ctc_loss(*batch, device="cuda")
    want_costs, want_grad = ctc_loss(*batch, device="cpu")
    np.testing.assert_allclose(costs, want_costs, rtol=1e-5)
    np.testing.assert_allclose(grad, want_grad, atol=1e-5)
    path = ctc_align(*batch, device="cuda")
    np.testing.assert_array_equal(path, ctc_align(*batch, device="cpu"))
