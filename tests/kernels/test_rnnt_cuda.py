"""RNN-T kernels on CUDA (numba's simulator without a GPU; tiny shapes) against the numpy twin."""

import numpy as np
import pytest

from asrkit.kernels import rnnt_joiner_loss, rnnt_loss
from asrkit.kernels.reference import rnnt as ref
from tests.kernels.test_rnnt import make_batch, make_joiner

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("blank", [0, 4])
def test_cuda_loss_matches_twin(rng, blank):
    batch = make_batch(rng, B=3, T=4, U=3, V=5, blank=blank, scale=3.0)
    batch[2][1] = 0  # a sequence without frames: inf, zero gradient
    costs, grad = rnnt_loss(*batch, blank=blank, device="cuda")
    assert isinstance(costs, np.ndarray) and grad.dtype == np.float32
    want_costs, want_grad = ref.rnnt_loss(*batch, blank=blank)
    assert costs[1] == np.inf and not grad[1].any()
    np.testing.assert_allclose(costs, want_costs, rtol=1e-5)
    np.testing.assert_allclose(grad, want_grad, atol=1e-6)


def test_cuda_device_arrays_in_place(rng):
    from numba import cuda

    logits, targets, il, tl = make_batch(rng, B=2, T=3, U=2, V=4, scale=3.0)
    x = cuda.to_device(logits)
    costs, grad = rnnt_loss(x, targets, il, tl, in_place=True)  # device None: follows x
    assert grad is x and hasattr(costs, "copy_to_host")
    want_costs, want_grad = ref.rnnt_loss(logits, targets, il, tl)
    np.testing.assert_allclose(costs.copy_to_host(), want_costs, rtol=1e-5)
    np.testing.assert_allclose(x.copy_to_host(), want_grad, atol=1e-6)


def test_cuda_joiner_loss_matches_twin(rng):
    from asrkit.kernels.cuda import rnnt as cuda_rnnt

    args = make_joiner(rng, B=2, T=3, U=2, V=5, H=3, blank=1)
    want_costs, want_grads = ref.rnnt_joiner_loss(*args, blank=1)
    costs, grads = cuda_rnnt.rnnt_joiner_loss(*args, blank=1, block=5, prune=0.0)
    np.testing.assert_allclose(costs, want_costs, rtol=1e-5)
    for g, w in zip(grads, want_grads):
        assert g.shape == w.shape and g.dtype == np.float32
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_cuda_joiner_through_the_dispatcher_on_device_arrays(rng):
    from numba import cuda

    args = make_joiner(rng, B=2, T=3, U=1, V=4, H=2)
    want_costs, want_grads = ref.rnnt_joiner_loss(*args)
    dev = [cuda.to_device(a) for a in args[:4]]
    costs, grads = rnnt_joiner_loss(*dev, *args[4:])
    assert all(hasattr(g, "copy_to_host") for g in grads)
    np.testing.assert_allclose(costs.copy_to_host(), want_costs, rtol=1e-5)
    for g, w in zip(grads, want_grads):
        np.testing.assert_allclose(g.copy_to_host(), w, rtol=1e-5, atol=1e-5)
