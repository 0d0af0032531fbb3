"""The element-wise table: the numpy twin against torch, and the generated CPU ufuncs and CUDA
kernels (simulator, tiny shapes) against the twin, for every row."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from asrkit.kernels import elementwise as ew

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]

TORCH_UNARY = {
    "neg": lambda x, p, q: -x, "exp": lambda x, p, q: torch.exp(x),
    "log": lambda x, p, q: torch.log(x),
    "sqrt": lambda x, p, q: torch.sqrt(x), "abs": lambda x, p, q: torch.abs(x),
    "tanh": lambda x, p, q: torch.tanh(x), "sigmoid": lambda x, p, q: torch.sigmoid(x),
    "swish": lambda x, p, q: F.silu(x),
    "relu": lambda x, p, q: F.relu(x), "leaky_relu": lambda x, p, q: F.leaky_relu(x, p),
    "elu": lambda x, p, q: F.elu(x, p), "softplus": lambda x, p, q: F.softplus(x),
    "gelu": lambda x, p, q: F.gelu(x), "clip": lambda x, p, q: torch.clamp(x, p, q),
}
TORCH_BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
                "pow": torch.pow, "maximum": torch.maximum, "minimum": torch.minimum}
POSITIVE = {"log", "sqrt"}
PARAMS = {"leaky_relu": {"alpha": 0.2}, "elu": {"alpha": 0.7},
          "clip": {"min_value": -0.5, "max_value": 0.8}}


def _x(rng, name, shape=(4, 3, 5)):
    x = rng.standard_normal(shape) * 2
    x = np.where(np.abs(x) < 0.05, 0.3, x)  # away from the kinks at 0
    return np.abs(x) + 0.2 if name in POSITIVE else x


def _pq(name):
    return ew.params(name, PARAMS.get(name, {}))


def _torch_unary(name, x, g):
    t = torch.tensor(x, requires_grad=True)
    p, q = _pq(name)
    y = TORCH_UNARY[name](t, p, q)
    y.backward(torch.tensor(g))
    return y.detach().numpy(), t.grad.numpy()


def test_every_op_of_the_table_has_a_torch_check():
    assert set(TORCH_UNARY) == set(ew.UNARY) and set(TORCH_BINARY) == set(ew.BINARY)


@pytest.mark.parametrize("name", sorted(ew.UNARY))
def test_reference_unary_matches_torch(rng, name):
    x = _x(rng, name)
    g = rng.standard_normal(x.shape)
    y_t, gx_t = _torch_unary(name, x, g)
    p, q = _pq(name)
    y = ew.unary(name, x, p, q, device="reference")
    np.testing.assert_allclose(y, y_t, rtol=1e-12, atol=1e-12)
    gx = ew.unary_grad(name, g, x, y, p, q, device="reference")
    np.testing.assert_allclose(gx, gx_t, rtol=1e-10, atol=1e-12)


def _ab(rng, name):
    a = rng.standard_normal((4, 3, 5)) * 2
    b = rng.standard_normal((5,)) * 2  # a bias: broadcasts as a suffix
    if name in ("pow", "div"):
        a, b = np.abs(a) + 0.2, np.abs(b) + 0.2
    return a, b


@pytest.mark.parametrize("name", sorted(ew.BINARY))
def test_reference_binary_matches_torch(rng, name):
    a, b = _ab(rng, name)
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    y_t = TORCH_BINARY[name](ta, tb)
    g = rng.standard_normal(y_t.shape)
    y_t.backward(torch.tensor(g))
    y = ew.binary(name, a, b, device="reference")
    np.testing.assert_allclose(y, y_t.detach().numpy(), rtol=1e-12)
    ga, gb = ew.binary_grad(name, g, a, b, y, device="reference")
    np.testing.assert_allclose(ga, ta.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gb.sum(axis=(0, 1)), tb.grad.numpy(), rtol=1e-10, atol=1e-12)


def _dev(a, device):
    if device != "cuda" or a is None:
        return a
    from numba import cuda

    return cuda.to_device(np.ascontiguousarray(a))


def _host(a):
    return a.copy_to_host() if hasattr(a, "copy_to_host") else np.asarray(a)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(ew.UNARY))
def test_unary_devices_match_reference(rng, device, dtype, name):
    x = _x(rng, name, (3, 2, 4)).astype(dtype)
    g = rng.standard_normal(x.shape).astype(dtype)
    p, q = _pq(name)
    y_ref = ew.unary(name, x, p, q, device="reference")
    gx_ref = ew.unary_grad(name, g, x, y_ref, p, q, device="reference")
    y = ew.unary(name, _dev(x, device), p, q, device=device)
    gx = ew.unary_grad(name, _dev(g, device), _dev(x, device), y, p, q, device=device)
    tol = 2e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(_host(y), y_ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(_host(gx), gx_ref, rtol=tol, atol=tol)
    assert _host(y).dtype == dtype and _host(gx).dtype == dtype


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(ew.BINARY))
def test_binary_devices_match_reference(rng, device, name):
    a, b = _ab(rng, name)
    a, b = a[:, :2], b  # [4, 2, 5] and a [5] bias
    y_ref = ew.binary(name, a, b, device="reference")
    g = rng.standard_normal(y_ref.shape)
    ga_ref, gb_ref = ew.binary_grad(name, g, a, b, y_ref, device="reference")
    y = ew.binary(name, _dev(a, device), _dev(b, device), device=device)
    ga, gb = ew.binary_grad(name, _dev(g, device), _dev(a, device), _dev(b, device), y,
                            device=device)
    np.testing.assert_allclose(_host(y), y_ref, rtol=1e-13)
    np.testing.assert_allclose(_host(ga), ga_ref, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(_host(gb), gb_ref, rtol=1e-13, atol=1e-14)


@pytest.mark.cuda
def test_cuda_binary_materialises_general_broadcasts(rng):
    a = rng.standard_normal((3, 1, 4)).astype(np.float32)
    b = rng.standard_normal((2, 1)).astype(np.float32)
    y = ew.binary("mul", _dev(a, "cuda"), _dev(b, "cuda"), device="cuda")
    np.testing.assert_allclose(_host(y), a * b, rtol=1e-6)
    g = rng.standard_normal((3, 2, 4)).astype(np.float32)
    ga, gb = ew.binary_grad("sub", _dev(g, "cuda"), None, None, None, device="cuda")
    np.testing.assert_array_equal(_host(ga), g)
    np.testing.assert_array_equal(_host(gb), -g)


def test_cpu_gradient_may_write_into_g(rng):
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4,)) + 3
    g = rng.standard_normal((3, 4))
    want = (g / b, -g * (a / b) / b)
    ga, gb = ew.binary_grad("div", g, None, b, a / b, out=g, device="cpu")
    assert ga is g
    np.testing.assert_allclose(ga, want[0], rtol=1e-14)
    np.testing.assert_allclose(gb, want[1], rtol=1e-14)


def test_reference_glu_matches_torch(rng):
    x = rng.standard_normal((4, 3, 6))
    g = rng.standard_normal((4, 3, 3))
    for axis in (-1, 0):
        t = torch.tensor(x, requires_grad=True)
        y_t = F.glu(t, dim=axis)
        gy = g if axis == -1 else rng.standard_normal(y_t.shape)
        y_t.backward(torch.tensor(gy))
        np.testing.assert_allclose(ew.glu(x, axis, device="reference"), y_t.detach().numpy(),
                                   rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(ew.glu_backward(gy, x, axis, device="reference"),
                                   t.grad.numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,axis", [((3, 2, 8), -1), ((4, 6, 5), 1), ((2, 3, 2, 4), 0)])
def test_glu_devices_match_reference(rng, device, dtype, shape, axis):
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    y_ref = ew.glu(x, axis, device="reference")
    g = rng.standard_normal(y_ref.shape).astype(dtype)
    gx_ref = ew.glu_backward(g, x, axis, device="reference")
    y = ew.glu(_dev(x, device), axis, device=device)
    gx = ew.glu_backward(_dev(g, device), _dev(x, device), axis, device=device)
    tol = 2e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(_host(y), y_ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(_host(gx), gx_ref, rtol=tol, atol=tol)
    assert _host(y).dtype == dtype and _host(gx).dtype == dtype


@pytest.mark.parametrize("name", sorted(__import__("asrkit.kernels.cpu.elementwise",
                                                   fromlist=["FAST"]).FAST))
def test_cpu_vectorised_rows_split_over_threads_match_reference(rng, name):
    """Arrays of several threads' blocks (``row_blocks``) take the njit loops; a strided view
    takes the ufunc; both agree with the twin, written into ``out`` or not."""
    from asrkit.kernels.cpu import _gemm

    x = (rng.standard_normal((300, 2, 512)) * 4).astype(np.float32)
    assert len(_gemm.row_blocks(x.size, threads=2)) == 2
    g = rng.standard_normal(x.shape).astype(np.float32)
    y_ref = ew.unary(name, x, device="reference")
    gx_ref = ew.unary_grad(name, g, x, y_ref, device="reference")
    for xv, gv, yv, rv, gr in ((x, g, y_ref, y_ref, gx_ref),
                               (x[:, :, ::2], g[:, :, ::2], y_ref[:, :, ::2], y_ref[:, :, ::2],
                                gx_ref[:, :, ::2])):
        out = np.empty(xv.shape, np.float32)
        y = ew.unary(name, xv, out=out, device="cpu")
        assert y is out
        np.testing.assert_allclose(y, rv, rtol=2e-6, atol=2e-6)
        gx = ew.unary_grad(name, gv, xv, yv, device="cpu")
        np.testing.assert_allclose(gx, gr, rtol=2e-6, atol=2e-6)
