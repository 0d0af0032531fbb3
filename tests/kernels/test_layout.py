"""Layout, reduction and row kernels: the numpy twin against torch, CUDA (simulator) against the
twin."""

import numpy as np
import pytest
import torch

from asrkit.kernels.reference import layout as ref
from tests.kernels._devices import DEVICES, dev, host, module


def test_reference_extreme_grad_splits_ties_as_torch(rng):
    x = rng.integers(0, 3, (4, 3, 5)).astype(np.float64)  # many ties
    g = rng.standard_normal((4, 1, 5))
    t = torch.tensor(x, requires_grad=True)
    t.amax(dim=1, keepdim=True).backward(torch.tensor(g))
    y = x.max(axis=1, keepdims=True)
    np.testing.assert_allclose(ref.extreme_grad(x, y, g, (1,)), t.grad.numpy(), rtol=1e-12)


def test_reference_rows_match_torch_embedding(rng):
    table = rng.standard_normal((6, 3))
    ids = rng.integers(0, 6, (4, 2))
    t = torch.tensor(table, requires_grad=True)
    out = torch.nn.functional.embedding(torch.tensor(ids), t)
    g = rng.standard_normal(out.shape)
    out.backward(torch.tensor(g))
    np.testing.assert_array_equal(ref.take_rows(table, ids), out.detach().numpy())
    np.testing.assert_allclose(ref.add_rows(g, ids, 6), t.grad.numpy(), rtol=1e-12)
    with pytest.raises(ValueError, match="id 6 is outside the vocabulary"):
        ref.take_rows(table, np.array([1, 6]))


@pytest.mark.parametrize("device", DEVICES)
def test_layout_kernels_match_the_twin(rng, device):
    K = module("layout", device)
    x = rng.standard_normal((4, 3, 2, 5))
    view = x[..., 1:4:2].transpose(0, 1, 3, 2)
    strides = tuple(s // 8 for s in view.strides)
    offset = (view.__array_interface__["data"][0] - x.__array_interface__["data"][0]) // 8
    got = host(K.gather(dev(x, device), view.shape, strides, offset))
    np.testing.assert_array_equal(got, view)
    g = rng.standard_normal(view.shape)
    out = dev(np.zeros(x.size), device)
    np.testing.assert_allclose(host(K.scatter(dev(g, device), out, strides, offset)),
                               ref.scatter(g, np.zeros(x.size), strides, offset), rtol=1e-14)
    for axes in [(0,), (1, 3), (0, 1, 2, 3)]:
        for kind in (ref.SUM, ref.MAX, ref.MIN):
            np.testing.assert_allclose(host(K.reduce_axes(dev(x, device), axes, kind)),
                                       ref.reduce_axes(x, axes, kind), rtol=1e-12)
    np.testing.assert_allclose(host(K.sum_to_shape(dev(x, device), (3, 1, 5))),
                               ref.sum_to_shape(x, (3, 1, 5)), rtol=1e-12)
    np.testing.assert_array_equal(host(K.permute(dev(x, device), (2, 0, 3, 1))),
                                  ref.permute(x, (2, 0, 3, 1)))


@pytest.mark.parametrize("device", DEVICES)
def test_extreme_grad_and_rows_match_the_twin(rng, device):
    K = module("layout", device)
    x = rng.integers(0, 3, (4, 3, 5)).astype(np.float32)
    y, g = x.min(axis=(0, 2), keepdims=True), rng.standard_normal((1, 3, 1)).astype(np.float32)
    np.testing.assert_allclose(host(K.extreme_grad(dev(x, device), dev(y, device),
                                                   dev(g, device), (0, 2))),
                               ref.extreme_grad(x, y, g, (0, 2)), rtol=1e-6)
    table = rng.standard_normal((6, 3)).astype(np.float32)
    ids = rng.integers(0, 6, (4, 2)).astype(np.int32)
    np.testing.assert_array_equal(host(K.take_rows(dev(table, device), ids)),
                                  ref.take_rows(table, ids))
    gr = rng.standard_normal((4, 2, 3)).astype(np.float32)
    np.testing.assert_allclose(host(K.add_rows(dev(gr, device), ids, 6)),
                               ref.add_rows(gr, ids, 6), rtol=1e-6)
    with pytest.raises(ValueError, match="id -1 is outside the vocabulary"):
        K.take_rows(dev(table, device), np.array([0, -1], np.int32))
