"""The cuda layout and reduction kernels (asrkit.kernels.cuda.layout) against numpy."""

import numpy as np
import pytest

pytestmark = pytest.mark.cuda


@pytest.fixture
def L():
    from asrkit.graph.backends import get_backend

    get_backend("cuda")  # a clear DeviceUnavailableError when there is no CUDA at all
    from asrkit.kernels.cuda import layout as cuda_layout

    return cuda_layout


def _dev(a):
    from numba import cuda

    return cuda.to_device(np.ascontiguousarray(a))


@pytest.mark.parametrize("view", [lambda a: a[..., 1:4:2].transpose(0, 1, 3, 2),
                                  lambda a: a[2, :, 0], lambda a: a[::-1, 1:]])
def test_view_layout_gather_and_scatter_match_numpy(L, rng, view):
    x = rng.standard_normal((4, 3, 2, 5)).astype(np.float32)
    shape, strides, offset = L.view_layout(view, x.shape)
    np.testing.assert_array_equal(L.gather(_dev(x), shape, strides, offset).copy_to_host(),
                                  view(x))
    g = rng.standard_normal(shape).astype(np.float32)
    out = L.zeros(x.shape, np.float32)
    L.scatter(_dev(g), L.flat(out), strides, offset)
    want = np.zeros_like(x)
    view(want)[...] = g
    np.testing.assert_array_equal(out.copy_to_host(), want)
    assert L.view_layout(lambda a: a[[0, 2]], x.shape) is None  # a copy, not a view


def test_broadcast_permute_and_reductions_match_numpy(L, rng):
    x = rng.standard_normal((4, 3, 2, 5))
    d = _dev(x)
    np.testing.assert_array_equal(L.broadcast_to(_dev(x[:, :1]), x.shape).copy_to_host(),
                                  np.broadcast_to(x[:, :1], x.shape))
    np.testing.assert_array_equal(L.permute(d, (2, 0, 3, 1)).copy_to_host(),
                                  x.transpose(2, 0, 3, 1))
    for axes in [(0,), (0, 1), (3,), (1, 3), (2,), (0, 1, 2, 3)]:
        for kind, fn in [(L.SUM, np.sum), (L.MAX, np.max), (L.MIN, np.min)]:
            np.testing.assert_allclose(L.reduce_axes(d, axes, kind).copy_to_host(),
                                       fn(x, axis=axes), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(L.sum_to_shape(d, (3, 1, 5)).copy_to_host(),
                               x.sum(axis=(0, 2)).reshape(3, 1, 5), rtol=1e-12)
    np.testing.assert_allclose(L.sum_to_shape(d, ()).copy_to_host(), x.sum(), rtol=1e-12)
