"""Layer and batch norm kernels: the numpy twin against torch, CUDA (simulator) against it."""

import numpy as np
import pytest
import torch

from asrkit.kernels.reference import normalization as ref
from tests.kernels._devices import DEVICES, dev, host, module

LENGTHS = np.array([4, 2, 3], np.int32)


def test_reference_layer_norm_matches_torch(rng):
    x, s, b = rng.standard_normal((4, 3, 5)), rng.standard_normal(5), rng.standard_normal(5)
    ts, tb, tx = (torch.tensor(a, requires_grad=True) for a in (s, b, x))
    y_t = torch.nn.functional.layer_norm(tx, (5,), ts, tb)
    g = rng.standard_normal(x.shape)
    y_t.backward(torch.tensor(g))
    y, state = ref.layer_norm(x, s, b)
    gx, gs, gb = ref.layer_norm_backward(g, state, s)
    np.testing.assert_allclose(y, y_t.detach().numpy(), rtol=1e-10, atol=1e-12)
    for mine, theirs in ((gx, tx), (gs.sum((0, 1)), ts), (gb.sum((0, 1)), tb)):
        np.testing.assert_allclose(mine, theirs.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_reference_batch_norm_matches_torch_on_the_valid_frames(rng):
    x = rng.standard_normal((4, 3, 5))
    valid = np.concatenate([x[:n, b] for b, n in enumerate(LENGTHS)])
    mean, var, n = ref.batch_stats(x, LENGTHS)
    assert n == LENGTHS.sum()
    np.testing.assert_allclose(mean, valid.mean(0), rtol=1e-12)
    np.testing.assert_allclose(var, valid.var(0), rtol=1e-12)
    s, b = rng.standard_normal(5), rng.standard_normal(5)
    rstd = 1 / np.sqrt(var + 1e-5)
    y, xhat = ref.batch_norm(x, s, b, mean, rstd, LENGTHS)
    tv = torch.tensor(valid, requires_grad=True)
    y_t = torch.nn.functional.batch_norm(tv, None, None, torch.tensor(s), torch.tensor(b),
                                         training=True)
    np.testing.assert_allclose(np.concatenate([y[:n, b] for b, n in enumerate(LENGTHS)]),
                               y_t.detach().numpy(), rtol=1e-9, atol=1e-12)
    g = rng.standard_normal(x.shape) * ref.valid_mask(x, LENGTHS)  # 0 on padding, as in a graph
    y_t.backward(torch.tensor(np.concatenate([g[:n, b] for b, n in enumerate(LENGTHS)])))
    gx, _, _ = ref.batch_norm_backward(g, xhat, s, rstd, LENGTHS, n)
    np.testing.assert_allclose(np.concatenate([gx[:n, b] for b, n in enumerate(LENGTHS)]),
                               tv.grad.numpy(), rtol=1e-9, atol=1e-12)
    assert not gx[2:, 1].any()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("lengths", [LENGTHS, None])
def test_normalization_matches_the_twin(rng, device, lengths):
    K = module("normalization", device)
    x = (rng.standard_normal((4, 3, 2, 5)) + 2).astype(np.float32)
    s, b = rng.standard_normal(5).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    g = rng.standard_normal(x.shape).astype(np.float32)
    if lengths is not None:
        g *= ref.valid_mask(g, lengths)  # 0 on padding, as in a graph
    y, state = K.layer_norm(dev(x, device), dev(s, device), dev(b, device))
    y_ref, state_ref = ref.layer_norm(x, s, b)
    np.testing.assert_allclose(host(y), y_ref, rtol=1e-5, atol=1e-5)
    for a, r in zip(K.layer_norm_backward(dev(g, device), state, dev(s, device)),
                    ref.layer_norm_backward(g, state_ref, s)):
        np.testing.assert_allclose(host(a), r, rtol=1e-4, atol=1e-5)
    mean, var, n = K.batch_stats(dev(x, device), lengths)
    mean_r, var_r, n_r = ref.batch_stats(x, lengths)
    assert n == n_r
    np.testing.assert_allclose(mean, mean_r, rtol=1e-5)
    np.testing.assert_allclose(var, var_r, rtol=1e-5)
    rstd = 1 / np.sqrt(var_r + 1e-5)
    y, xhat = K.batch_norm(dev(x, device), dev(s, device), dev(b, device), mean_r, rstd, lengths)
    y_ref, xhat_ref = ref.batch_norm(x, s, b, mean_r, rstd, lengths)
    np.testing.assert_allclose(host(y), y_ref, rtol=1e-5, atol=1e-5)
    for train in (n_r, None):
        for a, r in zip(K.batch_norm_backward(dev(g, device), dev(xhat_ref, device),
                                              dev(s, device), rstd, lengths, train),
                        ref.batch_norm_backward(g, xhat_ref, s, rstd, lengths, train)):
            np.testing.assert_allclose(host(a), r, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,lengths", [((4, 3, 2, 5), LENGTHS), ((4, 3, 5), None),
                                           ((300, 4, 256), np.array([300, 120, 299, 1]))])
def test_cpu_normalization_matches_the_twin(rng, dtype, shape, lengths):
    """The numba kernels (split over two threads' blocks on the big shape) against the twin;
    the scale and bias gradients come back summed to [D]."""
    from asrkit.kernels.cpu import _gemm
    from asrkit.kernels.cpu import normalization as cpu

    if shape[0] == 300:
        assert len(_gemm.row_blocks(300 * 4, 3 * 256, threads=2)) == 2
    x = (rng.standard_normal(shape) * 3 + 2).astype(dtype)
    D = shape[-1]
    s, b = rng.standard_normal(D).astype(dtype), rng.standard_normal(D).astype(dtype)
    g = rng.standard_normal(shape).astype(dtype)
    if lengths is not None:
        g *= ref.valid_mask(g, lengths)
    tol = dict(rtol=2e-5, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-12)

    def check(mine, theirs):
        for a, r in zip(mine, theirs):
            r = r.reshape(-1, D).sum(0) if a.shape == (D,) and r.shape != (D,) else r
            assert a.dtype == dtype
            np.testing.assert_allclose(a, r, **tol)

    y, state = cpu.layer_norm(x, s, b)
    y_ref, state_ref = ref.layer_norm(x, s, b)
    check([y, *state], [y_ref, *state_ref])
    check(cpu.layer_norm_backward(g, state, s), ref.layer_norm_backward(g, state_ref, s))
    mean, var, n = cpu.batch_stats(x, lengths)
    mean_r, var_r, n_r = ref.batch_stats(x, lengths)
    assert n == n_r
    check([mean, var], [mean_r, var_r])
    rstd = (1 / np.sqrt(var_r + 1e-5)).astype(dtype)
    check(cpu.batch_norm(x, s, b, mean_r, rstd, lengths),
          ref.batch_norm(x, s, b, mean_r, rstd, lengths))
    xhat = ref.batch_norm(x, s, b, mean_r, rstd, lengths)[1]
    for train in (n_r, None):
        check(cpu.batch_norm_backward(g, xhat, s, rstd, lengths, train),
              ref.batch_norm_backward(g, xhat, s, rstd, lengths, train))


def test_cpu_batch_stats_refuse_an_empty_batch():
    from asrkit.kernels.cpu import normalization as cpu

    with pytest.raises(ValueError, match="empty batch"):
        cpu.batch_stats(np.ones((3, 2, 4), np.float32), np.array([0, 0]))
