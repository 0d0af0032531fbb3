"""SpecAugment: interpolation against torch.nn.functional.interpolate, masks, seeding, padding."""

import numpy as np
import pytest

from asrkit.features import freq_mask, spec_augment, time_mask, time_warp
from asrkit.features.augment import resize_time


@pytest.mark.parametrize("mode", ["bicubic", "linear"])
@pytest.mark.parametrize("n,new", [(17, 23), (40, 31), (5, 1), (1, 4), (60, 60)])
def test_resize_matches_torch_interpolate(rng, mode, n, new):
    torch = pytest.importorskip("torch")
    x = rng.normal(size=(n, 6)).astype(np.float32)
    tmode = "bicubic" if mode == "bicubic" else "bilinear"
    ref = torch.nn.functional.interpolate(torch.from_numpy(x)[None, None], size=(new, 6),
                                          mode=tmode, align_corners=False)[0, 0].numpy()
    np.testing.assert_allclose(resize_time(x, new, mode), ref, atol=2e-5)


def esp_time_warp(x, window, rng):
    """ESPnet's espnet2.layers.time_warp with torch, driven by the same numpy draws."""
    import torch

    t = x.shape[0]
    centre = int(rng.integers(window, t - window))
    warped = int(rng.integers(centre - window, centre + window)) + 1
    img = torch.from_numpy(x)[None, None]
    left = torch.nn.functional.interpolate(img[:, :, :centre], (warped, x.shape[1]),
                                           mode="bicubic", align_corners=False)
    right = torch.nn.functional.interpolate(img[:, :, centre:], (t - warped, x.shape[1]),
                                            mode="bicubic", align_corners=False)
    return torch.cat([left, right], 2)[0, 0].numpy()


def test_time_warp_matches_espnet_recipe(rng):
    pytest.importorskip("torch")
    x = rng.normal(size=(50, 8)).astype(np.float32)
    y = time_warp(x, max_warp=10, seed=3)
    ref = esp_time_warp(x, 10, np.random.default_rng(3))
    np.testing.assert_allclose(y, ref, atol=2e-5)
    assert not np.allclose(y, x)


def test_time_warp_of_a_ramp_is_monotone():
    x = np.repeat(np.arange(60, dtype=np.float32)[:, None], 3, 1)
    y = time_warp(x, max_warp=20, mode="linear", seed=1)
    assert y.shape == x.shape and np.all(np.diff(y[:, 0]) >= -1e-5)
    assert y[0, 0] == 0 and 58 <= y[-1, 0] <= 59  # align_corners=False: ends within a frame


def test_short_utterance_not_warped(rng):
    x = rng.normal(size=(20, 4)).astype(np.float32)
    np.testing.assert_array_equal(time_warp(x, max_warp=10, seed=0), x)


def test_freq_mask_bands(rng):
    x = rng.normal(size=(30, 40)).astype(np.float32) + 5
    y = freq_mask(x, num_masks=1, max_width=10, seed=7)
    masked = np.all(y == 0, axis=0)
    k = int(masked.sum())
    assert k <= 10
    if k:
        cols = np.flatnonzero(masked)
        assert cols[-1] - cols[0] + 1 == k  # one contiguous band
    np.testing.assert_array_equal(y[:, ~masked], x[:, ~masked])
    assert y is not x and np.all(x != 0)


def test_time_mask_fraction_bounds_width(rng):
    x = rng.normal(size=(50, 4)).astype(np.float32) + 5
    for seed in range(20):
        y = time_mask(x, num_masks=1, max_width=100, max_fraction=0.2, seed=seed)
        assert np.all(y == 0, axis=1).sum() <= 10


def test_mean_mask_value(rng):
    x = rng.normal(size=(40, 10)).astype(np.float32) + 3
    y = spec_augment(x, time_warp=0, num_time_masks=0, freq_mask_width=10, mask_value="mean",
                     seed=2)
    changed = y != x
    assert changed.any()
    np.testing.assert_allclose(y[changed], x.mean(), rtol=1e-6)


def test_seeded_reproducible(rng):
    x = rng.normal(size=(300, 80)).astype(np.float32)
    a = spec_augment(x, seed=11)
    b = spec_augment(x, seed=11)
    c = spec_augment(x, seed=12)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    g1, g2 = np.random.default_rng(5), np.random.default_rng(5)
    np.testing.assert_array_equal(spec_augment(x, rng=g1), spec_augment(x, rng=g2))
    with pytest.raises(ValueError, match="not both"):
        spec_augment(x, seed=1, rng=g1)


def test_batch_keeps_padding_untouched(rng):
    lengths = np.array([300, 120, 0], np.int32)
    x = rng.normal(size=(300, 3, 20)).astype(np.float32)
    x[120:, 1] = 1e6  # padding: must stay out of warps, masks and means
    y = spec_augment(x, lengths=lengths, time_warp=40, mask_value="mean", seed=4)
    np.testing.assert_array_equal(y[120:, 1], x[120:, 1])
    np.testing.assert_array_equal(y[:, 2], x[:, 2])
    assert np.abs(y[:120, 1]).max() < 100
    # the batch draws per sequence in order, like separate calls on one generator
    g = np.random.default_rng(4)
    one = spec_augment(x[:300, 0], time_warp=40, mask_value="mean", rng=g)
    two = spec_augment(x[:120, 1], time_warp=40, mask_value="mean", rng=g)
    np.testing.assert_array_equal(y[:, 0], one)
    np.testing.assert_array_equal(y[:120, 1], two)


def test_errors():
    with pytest.raises(ValueError, match="padded batch"):
        spec_augment(np.ones((4, 3)), lengths=[4])
    with pytest.raises(ValueError, match="lengths"):
        spec_augment(np.ones((4, 2, 3)), lengths=[5, 1])
    with pytest.raises(ValueError, match="mask_value"):
        freq_mask(np.ones((4, 3)), mask_value="max", seed=0)
