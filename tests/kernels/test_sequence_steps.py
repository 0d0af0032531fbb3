"""The sequence kernels behind delays, single frames, per-sequence maxima, padding and scan
steps: the numpy twin against hand-built expectations, CUDA (simulator) against the twin."""

import numpy as np
import pytest

from asrkit.kernels.reference import sequence as ref
from tests.kernels._devices import DEVICES, dev, host, module

LENGTHS = np.array([5, 0, 2, 4], np.int32)
T, B = 5, 4


def test_reference_delays_read_the_right_frames(rng):
    x = rng.standard_normal((T, B, 2))
    init = rng.standard_normal(2)
    past = ref.delay(x, init, LENGTHS, 2, False)
    np.testing.assert_array_equal(past[2:], x[:3])
    np.testing.assert_array_equal(past[:2], np.broadcast_to(init, (2, B, 2)))
    fut = ref.delay(x, init, LENGTHS, 1, True)
    np.testing.assert_array_equal(fut[0, 2], x[1, 2])  # sequence 2: frame 1 is its last
    np.testing.assert_array_equal(fut[1, 2], init)
    for future in (False, True):  # the backward is the adjoint (x and init together)
        y = ref.delay(x, init[None], LENGTHS, 2, future)
        g = rng.standard_normal(y.shape)
        gx, ginit = ref.delay_backward(g, LENGTHS, 2, future)
        np.testing.assert_allclose((y * g).sum(), (x * gx).sum() + (init * ginit).sum(),
                                   rtol=1e-12)


def test_reference_frames_and_maxima(rng):
    x = rng.standard_normal((T, B, 3))
    last = ref.take_frame(x, LENGTHS - 1)
    np.testing.assert_array_equal(last[3], x[3, 3])
    assert not last[1].any()
    np.testing.assert_array_equal(ref.put_frame(last, LENGTHS - 1, T)[3, 3], last[3])
    m = ref.masked_max(x, LENGTHS)
    np.testing.assert_array_equal(m[2], x[:2, 2].max(0))
    assert not m[1].any()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("future", [False, True])
def test_delay_matches_the_twin(rng, device, future):
    K = module("sequence", device)
    x = rng.standard_normal((T, B, 2, 3)).astype(np.float32)
    init = rng.standard_normal(3).astype(np.float32)
    np.testing.assert_array_equal(host(K.delay(dev(x, device), dev(init, device), LENGTHS, 2,
                                               future)),
                                  ref.delay(x, init, LENGTHS, 2, future))
    g = rng.standard_normal(x.shape).astype(np.float32)
    for a, r in zip(K.delay_backward(dev(g, device), LENGTHS, 2, future),
                    ref.delay_backward(g, LENGTHS, 2, future)):
        np.testing.assert_allclose(host(a), r, rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_frames_maxima_padding_and_scan_steps_match_the_twin(rng, device):
    K = module("sequence", device)
    x = rng.integers(0, 3, (T, B, 3)).astype(np.float32)  # ties for the maxima
    for index in (LENGTHS - 1, np.zeros(B, np.int32)):
        f = host(K.take_frame(dev(x, device), index))
        np.testing.assert_array_equal(f, ref.take_frame(x, index))
        np.testing.assert_array_equal(host(K.put_frame(dev(f, device), index, T)),
                                      ref.put_frame(f, index, T))
    m = host(K.masked_max(dev(x, device), LENGTHS))
    np.testing.assert_array_equal(m, ref.masked_max(x, LENGTHS))
    g = rng.standard_normal(m.shape).astype(np.float32)
    np.testing.assert_allclose(host(K.masked_max_backward(dev(g, device), dev(x, device),
                                                          dev(m, device), LENGTHS)),
                               ref.masked_max_backward(g, x, m, LENGTHS), rtol=1e-6)
    np.testing.assert_array_equal(host(K.fill_padding(dev(x, device), LENGTHS, -1.0)),
                                  ref.fill_padding(x, LENGTHS, -1.0))
    h_new, h, gh = (rng.standard_normal((B, 3)).astype(np.float32) for _ in range(3))
    for t in (0, 3):
        for a, r in zip(K.select_frame(dev(h_new, device), dev(h, device), LENGTHS, t),
                        ref.select_frame(h_new, h, LENGTHS, t)):
            np.testing.assert_array_equal(host(a), r)
        np.testing.assert_array_equal(
            host(K.seed_grad(dev(h_new, device), dev(gh, device), LENGTHS, t)),
            ref.seed_grad(h_new, gh, LENGTHS, t))
        np.testing.assert_array_equal(
            host(K.carry_grad(dev(h_new, device), dev(gh, device), LENGTHS, t)),
            ref.carry_grad(h_new, gh, LENGTHS, t))
