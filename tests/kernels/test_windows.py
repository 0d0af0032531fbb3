"""Window kernels (convolution, pooling, frame stacking): the numpy twin against torch and its
own adjoint, CUDA (simulator) against the twin."""

import numpy as np
import pytest
import torch

from asrkit.kernels.reference import windows as ref
from tests.kernels._devices import DEVICES, dev, host, module

LENGTHS = np.array([7, 3, 0, 5], np.int32)


def test_reference_windows_are_torch_conv1d_taps(rng):
    x = rng.standard_normal((9, 2, 3))
    K, stride, dilation = 3, 2, 2
    left, T_out = ref.window_geometry(9, K, stride, dilation, "same")
    cols = ref.gather_windows(x, K, stride, dilation, left, T_out)
    W = rng.standard_normal((K, 3, 4))
    y = np.einsum("tbkc,kco->tbo", cols, W)
    want = torch.nn.functional.conv1d(torch.tensor(x).permute(1, 2, 0),
                                      torch.tensor(W).permute(2, 1, 0), stride=stride,
                                      padding=left, dilation=dilation).permute(2, 0, 1)
    np.testing.assert_allclose(y, want.numpy()[:T_out], rtol=1e-12)
    g = rng.standard_normal(cols.shape)  # the scatter is the gather's adjoint
    np.testing.assert_allclose((cols * g).sum(),
                               (x * ref.scatter_windows(g, 9, K, stride, dilation, left)).sum(),
                               rtol=1e-12)


def test_reference_pooling_skips_padding(rng):
    x = rng.standard_normal((7, 4, 2))
    y, _ = ref.pool1d(x, LENGTHS, "avg", 2, 2, 0, 3)
    np.testing.assert_allclose(y[1, 1], x[2, 1])  # sequence 1: window [2, 3) holds one frame
    np.testing.assert_allclose(y[0, 0], x[:2, 0].mean(0))
    assert not y[:, 2].any()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_windows_and_pooling_match_the_twin(rng, device, kind):
    K = module("windows", device)
    x = rng.standard_normal((7, 4, 2, 3)).astype(np.float32)
    left, T_out = ref.window_geometry(7, 3, 2, 1, "same")
    cols = host(K.gather_windows(dev(x, device), 3, 2, 1, left, T_out))
    np.testing.assert_array_equal(cols, ref.gather_windows(x, 3, 2, 1, left, T_out))
    g = rng.standard_normal(cols.shape).astype(np.float32)
    np.testing.assert_allclose(host(K.scatter_windows(dev(g, device), 7, 3, 2, 1, left)),
                               ref.scatter_windows(g, 7, 3, 2, 1, left), rtol=1e-6, atol=1e-6)
    y, state = K.pool1d(dev(x, device), LENGTHS, kind, 3, 2, left, T_out)
    y_ref, state_ref = ref.pool1d(x, LENGTHS, kind, 3, 2, left, T_out)
    np.testing.assert_allclose(host(y), y_ref, rtol=1e-6)
    gy = rng.standard_normal(y_ref.shape).astype(np.float32)
    np.testing.assert_allclose(
        host(K.pool1d_backward(dev(gy, device), state, LENGTHS, 7, kind, 3, 2, left)),
        ref.pool1d_backward(gy, state_ref, LENGTHS, 7, kind, 3, 2, left), rtol=1e-6, atol=1e-7)
