"""The Conformer's depthwise convolution: the numpy twin against torch, the CPU kernels and
the CUDA kernels (simulator, tiny shapes) against the twin."""

import numpy as np
import pytest
import torch

from asrkit.kernels.reference import conv as ref
from tests.kernels._devices import dev, host, module


@pytest.mark.parametrize("K,left", [(5, 2), (3, 2), (7, 0)])
def test_reference_depthwise_conv1d_matches_torch(rng, K, left):
    T, B, C = 6, 2, 3
    x, w = rng.standard_normal((T, B, C)), rng.standard_normal((K, C))
    g = rng.standard_normal((T, B, C))
    tx = torch.tensor(x.transpose(1, 2, 0), requires_grad=True)      # [B, C, T]
    tw = torch.tensor(w.T[:, None, :], requires_grad=True)            # [C, 1, K]
    y_t = torch.nn.functional.conv1d(torch.nn.functional.pad(tx, (left, K - 1 - left)), tw,
                                     groups=C)
    y_t.backward(torch.tensor(g.transpose(1, 2, 0)))
    np.testing.assert_allclose(ref.depthwise_conv1d(x, w, left),
                               y_t.detach().numpy().transpose(2, 0, 1), rtol=1e-12)
    gx, gw = ref.depthwise_conv1d_backward(g, x, w, left)
    np.testing.assert_allclose(gx, tx.grad.numpy().transpose(2, 0, 1), rtol=1e-12)
    np.testing.assert_allclose(gw, tw.grad.numpy()[:, 0, :].T, rtol=1e-12)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,K,left", [((7, 3, 5), 3, 1), ((5, 2, 4), 7, 6),
                                          ((4, 2, 3), 9, 4), ((160, 4, 64), 31, 15)])
def test_depthwise_conv1d_devices_match_the_twin(rng, device, dtype, shape, K, left):
    """Centred and causal taps, kernels longer than the sequence, and (the last shape, on the
    CPU) frames split into two threads' blocks."""
    if device == "cuda" and shape[0] > 10:
        pytest.skip("the simulator runs tiny shapes only")
    K_ = module("conv", device)
    x = rng.standard_normal(shape).astype(dtype)
    w = rng.standard_normal((K, shape[2])).astype(dtype)
    g = rng.standard_normal(shape).astype(dtype)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    y = K_.depthwise_conv1d(dev(x, device), dev(w, device), left)
    np.testing.assert_allclose(host(y), ref.depthwise_conv1d(x, w, left), **tol)
    gx, gw = K_.depthwise_conv1d_backward(dev(g, device), dev(x, device), dev(w, device), left)
    # the weight gradient sums T*B products: held to the float64 twin, relative to its scale
    gx_r, gw_r = ref.depthwise_conv1d_backward(*(a.astype(np.float64) for a in (g, x, w)), left)
    np.testing.assert_allclose(host(gx), gx_r, **tol)
    np.testing.assert_allclose(host(gw), gw_r, rtol=tol["rtol"],
                               atol=tol["atol"] * max(1.0, np.abs(gw_r).max()))
    assert host(y).dtype == dtype and host(gw).dtype == dtype
