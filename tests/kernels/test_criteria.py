"""Frame classification kernels: the numpy twin against torch, CUDA (simulator) against it."""

import numpy as np
import pytest
import torch

from asrkit.kernels.reference import criteria as ref
from tests.kernels._devices import DEVICES, dev, host, module


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_reference_cross_entropy_matches_torch(rng, smoothing):
    z = rng.standard_normal((4, 3, 6))
    labels = rng.integers(-1, 6, (4, 3))
    tz = torch.tensor(z, requires_grad=True)
    loss_t = torch.nn.functional.cross_entropy(tz.reshape(-1, 6), torch.tensor(labels).reshape(-1),
                                               ignore_index=-1, reduction="none",
                                               label_smoothing=smoothing)
    g = rng.standard_normal(loss_t.shape)
    loss_t.backward(torch.tensor(g))
    loss, state = ref.cross_entropy(z, labels, smoothing)
    np.testing.assert_allclose(loss.reshape(-1), loss_t.detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(ref.cross_entropy_backward(g.reshape(4, 3), state, smoothing),
                               tz.grad.numpy(), rtol=1e-9, atol=1e-12)
    with pytest.raises(ValueError, match="label 6 is not below the number of classes 6"):
        ref.cross_entropy(z, np.full((4, 3), 6), smoothing)


@pytest.mark.parametrize("device", DEVICES)
def test_criteria_match_the_twin(rng, device):
    K = module("criteria", device)
    z = rng.standard_normal((4, 3, 6)).astype(np.float32)
    labels = rng.integers(-1, 6, (4, 3)).astype(np.int32)
    g = rng.standard_normal((4, 3)).astype(np.float32)
    loss, state = K.cross_entropy(dev(z, device), dev(labels, device), 0.1)
    loss_ref, state_ref = ref.cross_entropy(z, labels, 0.1)
    np.testing.assert_allclose(host(loss), loss_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(host(K.cross_entropy_backward(dev(g, device), state, 0.1)),
                               ref.cross_entropy_backward(g, state_ref, 0.1), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(host(K.argmax(dev(z, device))), ref.argmax(z))
    np.testing.assert_array_equal(host(K.classification_error(dev(z, device), dev(labels, device))),
                                  ref.classification_error(z, labels))
