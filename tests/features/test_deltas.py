"""add_deltas against independent derivations of Kaldi's DeltaFeatures."""

import numpy as np
import pytest

from asrkit.features import add_deltas
from asrkit.features.deltas import add_deltas_batch, delta_filters


def compute_deltas(x, n):
    """torchaudio.functional.compute_deltas' formula along time (axis 0), replicate padding."""
    denom = n * (n + 1) * (2 * n + 1) / 3
    p = np.concatenate([np.repeat(x[:1], n, 0), x, np.repeat(x[-1:], n, 0)])
    t = len(x)
    return sum(j * p[n + j:n + j + t] for j in range(-n, n + 1)) / denom


def valid_delta(p, n):
    """One regression pass without padding: output is 2n frames shorter."""
    t = len(p) - 2 * n
    return sum(j * p[n + j:n + j + t] for j in range(-n, n + 1)) / sum(j * j for j in
                                                                      range(-n, n + 1))


def kaldi_deltas(x, order, n):
    """Kaldi clamps every order's frame index on the original features: pad order*n, then
    apply the regression order times without further padding."""
    x = np.asarray(x, np.float64)
    reach = order * n
    p = x[np.clip(np.arange(-reach, len(x) + reach), 0, len(x) - 1)]
    out, cur = [x], p
    for i in range(1, order + 1):
        cur = valid_delta(cur, n)
        trim = (order - i) * n
        out.append(cur[trim:len(cur) - trim])
    return np.concatenate(out, axis=1)


def test_filters_are_kaldis():
    f = delta_filters(2, 2)
    np.testing.assert_allclose(f[1], [-0.2, -0.1, 0, 0.1, 0.2], rtol=1e-6)
    expected = np.convolve([-2, -1, 0, 1, 2], [-2, -1, 0, 1, 2]) / 100
    np.testing.assert_allclose(f[2], expected, rtol=1e-6, atol=1e-8)


def test_first_order_equals_compute_deltas_formula(rng):
    x = rng.normal(size=(23, 4)).astype(np.float32)
    y = add_deltas(x, order=1, window=3)
    np.testing.assert_allclose(y[:, 4:], compute_deltas(x.astype(np.float64), 3), atol=1e-6)
    np.testing.assert_array_equal(y[:, :4], x)


@pytest.mark.parametrize("order,window", [(2, 2), (3, 1), (0, 2), (2, 4)])
@pytest.mark.parametrize("frames", [1, 3, 30])
def test_matches_kaldi_derivation(rng, order, window, frames):
    x = rng.normal(size=(frames, 5)) * 10
    y = add_deltas(x, order=order, window=window)
    assert y.dtype == np.float32 and y.shape == (frames, 5 * (order + 1))
    np.testing.assert_allclose(y, kaldi_deltas(x, order, window), atol=1e-4)


def test_second_order_differs_from_iterated_padding_only_at_edges(rng):
    x = rng.normal(size=(30, 2))
    y = add_deltas(x)
    twice = compute_deltas(compute_deltas(x, 2), 2)
    np.testing.assert_allclose(y[4:-4, 4:], twice[4:-4], atol=1e-5)
    assert not np.allclose(y[:2, 4:], twice[:2])


def test_int16_input_and_errors():
    x = np.arange(12, dtype=np.int16).reshape(6, 2)
    y = add_deltas(x, order=1)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y[2:4, 2:], 2.0, atol=1e-6)  # slope 2 per frame away from edges
    with pytest.raises(ValueError, match="frames, dims"):
        add_deltas(np.ones(5))
    with pytest.raises(ValueError, match="window"):
        add_deltas(np.ones((5, 2)), window=0)


def test_batch_replicates_own_last_frame(rng):
    x = rng.normal(size=(8, 2, 3)).astype(np.float32)
    x[5:, 1] = 1e6
    y = add_deltas_batch(x, np.array([8, 5]))
    np.testing.assert_allclose(y[:5, 1], add_deltas(x[:5, 1]), atol=1e-6)
    np.testing.assert_allclose(y[:, 0], add_deltas(x[:, 0]), atol=1e-6)
    assert np.all(y[5:, 1] == 0)
