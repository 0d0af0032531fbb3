"""The affine map ``times``: the numpy twin against torch, the CPU's per-sequence GEMMs against
the twin."""

import numpy as np
import pytest
import torch

from asrkit.kernels.cpu import linalg as cpu
from asrkit.kernels.reference import linalg as ref
from asrkit.kernels.reference.normalization import valid_mask


def test_reference_times_matches_torch_and_zeroes_padding(rng):
    x, W = rng.standard_normal((5, 3, 4)), rng.standard_normal((4, 6))
    lengths = np.array([5, 2, 0])
    x *= valid_mask(x, lengths)
    g = rng.standard_normal((5, 3, 6)) * valid_mask(np.empty((5, 3, 1)), lengths)
    tx, tW = torch.tensor(x, requires_grad=True), torch.tensor(W, requires_grad=True)
    y_t = tx @ tW
    y_t.backward(torch.tensor(g))
    y = ref.times(x, W, lengths)
    np.testing.assert_allclose(y, y_t.detach().numpy(), rtol=1e-12, atol=1e-14)
    assert not y[2:, 1].any() and not y[:, 2].any()
    gx, gW = ref.times_backward(g, x, W, lengths)
    np.testing.assert_allclose(gx, tx.grad.numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(gW, tW.grad.numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("lengths", [[7, 3, 0, 5], [7, 7, 7, 6], [3], None])
@pytest.mark.parametrize("want", [(True, True), (False, True), (True, False)])
def test_cpu_times_matches_the_twin(rng, dtype, lengths, want):
    """One GEMM per sequence over its valid frames, the sequences in two threads' groups (one
    sequence: in this thread; the twin for batches with little padding or no lengths);
    padding rows zero; into ``out`` or not."""
    T, B, K, N = 7, 4 if lengths is None else len(lengths), 5, 3
    L = None if lengths is None else np.array(lengths, np.int32)
    x = rng.standard_normal((T, B, K)).astype(dtype)
    g = rng.standard_normal((T, B, N)).astype(dtype)
    W = rng.standard_normal((K, N)).astype(dtype)
    if L is not None:
        x *= valid_mask(x, L)
        g *= valid_mask(g, L)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    y_ref = ref.times(x, W, L)
    np.testing.assert_allclose(cpu.times(x, W, L), y_ref, **tol)
    out = np.full((T, B, N), np.nan, dtype)
    assert cpu.times(x, W, L, out) is out
    np.testing.assert_allclose(out, y_ref, **tol)
    for a, r in zip(cpu.times_backward(g, x, W, L, want), ref.times_backward(g, x, W, L, want)):
        if r is None:
            assert a is None
        else:
            assert a.dtype == dtype
            np.testing.assert_allclose(a, r, **tol)


def test_cpu_times_takes_the_twin_for_what_it_does_not_cover(rng):
    x = rng.standard_normal((4, 3, 2, 5))  # a middle axis
    W = rng.standard_normal((5, 2)).astype(np.float32)  # another dtype than x
    L = np.array([4, 1, 2])
    np.testing.assert_allclose(cpu.times(x, W, L), ref.times(x, W, L), rtol=1e-6)
    v = rng.standard_normal(5)  # a vector W
    g = rng.standard_normal((4, 3, 2))
    for a, r in zip(cpu.times_backward(g, x, v, L), ref.times_backward(g, x, v, L)):
        np.testing.assert_allclose(a, r, rtol=1e-12)
