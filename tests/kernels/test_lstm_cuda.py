"""CUDA LSTM kernels (numba's simulator here, tiny shapes) against the numpy twin."""

import numpy as np
import pytest

from asrkit.kernels import blstm_backward, blstm_forward, lstm_backward, lstm_forward
from tests.kernels.test_lstm import GRAD_NAMES, NAMES, make_inputs, make_params

pytestmark = pytest.mark.cuda


def host(a):
    return a.copy_to_host() if hasattr(a, "copy_to_host") else np.asarray(a)


def dev(a):
    from numba import cuda

    return None if a is None else cuda.to_device(np.ascontiguousarray(a))


@pytest.mark.parametrize("proj,reverse", [(None, False), (2, True)])
def test_cuda_lstm_matches_reference(rng, proj, reverse):
    T, B, In, H = 4, 2, 2, 3
    lengths = np.array([4, 2], np.int32)
    p = make_params(rng, In, H, proj)
    x, h0, c0 = make_inputs(rng, T, B, In, H, proj)
    PP = proj or H
    dy = rng.standard_normal((T, B, PP)).astype(np.float32)
    dh = rng.standard_normal((B, PP)).astype(np.float32)
    dc = rng.standard_normal((B, H)).astype(np.float32)
    ref = lstm_forward(x, h0, c0, *(p[n] for n in NAMES[:4]), lengths, device="reference",
                       reverse=reverse, w_hr=p["w_hr"])
    ref_g = lstm_backward(dy, dh, dc, ref[3])
    out = lstm_forward(dev(x), dev(h0), dev(c0), *(dev(p[n]) for n in NAMES[:4]), lengths,
                       reverse=reverse, w_hr=dev(p["w_hr"]))  # device=None follows the arrays
    assert out[3].device == "cuda"
    g = lstm_backward(dev(dy), dev(dh), dev(dc), out[3])
    for name, a, b in zip(("y", "h_n", "c_n"), ref[:3], out[:3]):
        np.testing.assert_allclose(host(b), a, rtol=1e-5, atol=1e-6, err_msg=name)
    assert len(g) == len(ref_g)
    for name, a, b in zip(GRAD_NAMES, ref_g, g):
        np.testing.assert_allclose(host(b), a, rtol=1e-5, atol=1e-6, err_msg=name)


def test_cuda_blstm_matches_reference(rng):
    T, B, In, H = 3, 2, 2, 2
    lengths = np.array([2, 3])
    p = make_params(rng, In, H, dirs=2)
    x, h0, c0 = make_inputs(rng, T, B, In, H, dirs=2)
    dy = rng.standard_normal((T, B, 2 * H)).astype(np.float32)
    ref = blstm_forward(x, h0, c0, *(p[n] for n in NAMES[:4]), lengths, device="reference")
    ref_g = blstm_backward(dy, None, None, ref[3])
    out = blstm_forward(x, h0, c0, *(p[n] for n in NAMES[:4]), lengths, device="cuda")
    g = blstm_backward(dev(dy), None, None, out[3])
    for a, b in zip(ref[:3], out[:3]):
        np.testing.assert_allclose(host(b), a, rtol=1e-5, atol=1e-6)
    for name, a, b in zip(GRAD_NAMES, ref_g, g):
        np.testing.assert_allclose(host(b), a, rtol=1e-5, atol=1e-6, err_msg=name)


def test_cuda_gemm_all_transposes(rng):
    from numba import cuda

    from asrkit.kernels.cuda.gemm import gemm

    for ta in (False, True):
        for tb in (False, True):
            a = rng.standard_normal((5, 3) if ta else (3, 5)).astype(np.float64)
            b = rng.standard_normal((4, 5) if tb else (5, 4)).astype(np.float64)
            c0 = rng.standard_normal((3, 4))
            c = cuda.to_device(c0)
            gemm(cuda.to_device(a), cuda.to_device(b), c, trans_a=ta, trans_b=tb, alpha=2.0,
                 beta=-0.5)
            expected = 2.0 * (a.T if ta else a) @ (b.T if tb else b) - 0.5 * c0
            np.testing.assert_allclose(c.copy_to_host(), expected, rtol=1e-12)
    with pytest.raises(ValueError, match="inner dimensions differ"):
        gemm(cuda.to_device(np.zeros((2, 3))), cuda.to_device(np.zeros((2, 3))))
