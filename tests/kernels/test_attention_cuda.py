"""CUDA attention kernels (numba's simulator here, tiny shapes) against the numpy twin."""

import numpy as np
import pytest

from asrkit.kernels import attention_backward, attention_forward, mhsa_backward, mhsa_forward
from tests.kernels.test_attention import MASKS, layer_weights, rand, rel_params

pytestmark = pytest.mark.cuda


def host(a):
    return a.copy_to_host() if hasattr(a, "copy_to_host") else np.asarray(a)


def dev(a):
    from numba import cuda

    return cuda.to_device(np.ascontiguousarray(a))


@pytest.mark.parametrize("mask,rel", [("padding", False), ("causal", False),
                                      ("chunk+left", True), ("padding", True)])
def test_cuda_core_matches_twin(rng, mask, rel):
    T, B, D, H = 5, 2, 4, 2
    lengths = np.array([5, 3], np.int32)
    q, k, v, dout = (rand(rng, T, B, D) for _ in range(4))
    extra = {**MASKS[mask], **(rel_params(rng, T, D, H) if rel else {})}
    ref, rc = attention_forward(q, k, v, lengths, H, device="reference", **extra)
    ref_g = attention_backward(dout, rc)
    dev_extra = {n: dev(a) if isinstance(a, np.ndarray) else a for n, a in extra.items()}
    out, cache = attention_forward(dev(q), dev(k), dev(v), lengths, H, **dev_extra)
    assert cache.device == "cuda"   # device=None followed the arrays
    np.testing.assert_allclose(host(out), ref, rtol=1e-5, atol=1e-6)
    g = attention_backward(dev(dout), cache)
    assert len(g) == len(ref_g)
    for i, (a, b) in enumerate(zip(g, ref_g)):
        np.testing.assert_allclose(host(a), b, rtol=1e-5, atol=2e-6, err_msg=str(i))


@pytest.mark.parametrize("rel", [False, True])
def test_cuda_layer_matches_twin(rng, rel):
    T, B, D, H = 4, 2, 4, 2
    lengths = np.array([2, 4])
    w = layer_weights(rng, D, H)
    x, dy = rand(rng, T, B, D), rand(rng, T, B, D)
    x[3, 0] = np.nan   # padding never reaches a result
    extra = {"causal": True}
    if rel:
        extra.update(pos_emb=rand(rng, 2 * T - 1, D), w_pos=rand(rng, D, D) / 2,
                     pos_bias_u=rand(rng, H, D // H), pos_bias_v=rand(rng, H, D // H))
    args = (x, w["w_in"], w["b_in"], w["w_out"], w["b_out"], H, lengths)
    y0, c0 = mhsa_forward(*args, device="reference", **extra)
    y1, c1 = mhsa_forward(*args, device="cuda", **extra)
    np.testing.assert_allclose(host(y1), y0, rtol=1e-5, atol=1e-6)
    g0, g1 = mhsa_backward(dy, c0), mhsa_backward(dy, c1)
    assert len(g0) == len(g1)
    for i, (a, b) in enumerate(zip(g1, g0)):
        np.testing.assert_allclose(host(a), b, rtol=1e-5, atol=2e-6, err_msg=str(i))


def test_cuda_float64_core_matches_twin(rng):
    T, B, D, H = 4, 2, 2, 1
    q, k, v, dout = (rand(rng, T, B, D, dtype=np.float64) for _ in range(4))
    ref, rc = attention_forward(q, k, v, [4, 1], H, device="reference", chunk_size=2)
    out, cache = attention_forward(q, k, v, [4, 1], H, device="cuda", chunk_size=2)
    assert host(out).dtype == np.float64
    np.testing.assert_allclose(host(out), ref, rtol=1e-12)
    for a, b in zip(attention_backward(dout, cache), attention_backward(dout, rc)):
        np.testing.assert_allclose(host(a), b, rtol=1e-11, atol=1e-13)
