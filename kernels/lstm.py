"""Fused LSTM layers: one direction (``lstm_forward/backward``) and bidirectional (``blstm_*``).

Gate order i, f, g, o and the weight shapes of ``torch.nn.LSTM``, so parameters move between the
two unchanged (``weight_ih_l0 -> w_ih``, ``weight_hh_l0 -> w_hh``, ``bias_ih_l0 -> b_ih``,
``bias_hh_l0 -> b_hh``, ``weight_hr_l0 -> w_hr``; ``..._reverse`` for the second direction).

Packed-sequence semantics with ``lengths int[B]``: sequence b is read for frames
``0 .. lengths[b]-1`` (forward) or ``lengths[b]-1 .. 0`` (``reverse=True``: each sequence starts at
its own end, as the reverse half of torch's packed bidirectional LSTM); ``y`` is zero on padded
frames and ``h_n, c_n`` are each sequence's state after its own last frame.

Projection (LSTMP, ``torch.nn.LSTM(proj_size=P)``): with ``w_hr [P, H]`` the hidden state is
``h = w_hr @ (o * tanh(c))``, so ``h0, y, h_n`` have P features and ``w_hh`` is ``[4H, P]``.

Devices: ``"reference"`` (numpy twin), ``"cpu"`` (BLAS + numba), ``"cuda"`` (cuBLAS or numba GEMM +
numba.cuda kernels; takes and returns device arrays, host arrays are copied over). ``device=None``
follows the arrays. The cache returned by a forward is opaque, remembers its device and keeps
references to ``x`` and (on the CPU) to ``y``: overwrite neither in place before the backward. A
CPU cache serves one backward (it computes the gate gradients over the saved activations, see
``asrkit.kernels.cpu.lstm``); a second backward on it raises ValueError.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from asrkit.kernels._device import resolve_device


def _device(device, *arrays) -> str:
    dev = resolve_device(device, *arrays)
    # numba's CUDA simulator arrays have no __cuda_array_interface__; they do have copy_to_host
    if device is None and dev == "cpu" and any(hasattr(a, "copy_to_host") for a in arrays):
        dev = resolve_device("cuda")
    return dev


def _backend(device: str):
    return importlib.import_module(f"asrkit.kernels.{device}.lstm")


def _shape(name, a, expected):
    shape = tuple(a.shape)
    if shape != tuple(expected):
        raise ValueError(f"lstm: {name} has shape {shape}, expected {tuple(expected)}")


def _check(x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, lead=()):
    """Validate shapes; return (T, B, I, H, P)."""
    if len(x.shape) != 3:
        raise ValueError(f"lstm: x must be [T, B, I], got shape {tuple(x.shape)}")
    T, B, In = x.shape
    # tuple(): the CUDA simulator's shape objects take no negative indices
    if len(w_ih.shape) != len(lead) + 2 or tuple(w_ih.shape)[-2] % 4:
        raise ValueError(f"lstm: w_ih must be {'[2, ' if lead else '['}4H, I], "
                         f"got shape {tuple(w_ih.shape)}")
    H = tuple(w_ih.shape)[-2] // 4
    P = H if w_hr is None else tuple(w_hr.shape)[-2]
    _shape("w_ih", w_ih, (*lead, 4 * H, In))
    _shape("w_hh", w_hh, (*lead, 4 * H, P))
    _shape("b_ih", b_ih, (*lead, 4 * H))
    _shape("b_hh", b_hh, (*lead, 4 * H))
    if w_hr is not None:
        _shape("w_hr", w_hr, (*lead, P, H))
    if h0 is not None:
        _shape("h0", h0, (*lead, B, P))
    if c0 is not None:
        _shape("c0", c0, (*lead, B, H))
    return T, B, In, H, P


def _zeros_like_state(device, shape, dtype):
    if device == "cuda":
        from asrkit.kernels.cuda.lstm import device_zeros

        return device_zeros(shape, dtype)
    return np.zeros(shape, dtype)


def lstm_forward(x, h0, c0, w_ih, w_hh, b_ih, b_hh, lengths=None, device=None, *,
                 reverse=False, w_hr=None, threads=None):
    """Run one LSTM direction over a padded batch.

    Takes ``x [T, B, I]``, ``h0 [B, P]``, ``c0 [B, H]`` (None for zeros), ``w_ih [4H, I]``,
    ``w_hh [4H, P]``, ``b_ih, b_hh [4H]``, ``lengths int[B]`` (None: all T), ``reverse`` and an
    optional projection ``w_hr [P, H]`` (P = H without one). Float32 by default; float64 works
    everywhere. On the CPU, ``threads`` (None: the cores) splits the batch into blocks whose
    recurrences run in parallel threads. Returns ``y [T, B, P]`` (zero on padding),
    ``h_n [B, P]``, ``c_n [B, H]`` and an opaque cache for :func:`lstm_backward`.
    """
    dev = _device(device, x, w_ih)
    T, B, _, H, P = _check(x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr)
    dt = np.float64 if np.dtype(x.dtype) == np.float64 else np.float32
    if h0 is None:
        h0 = _zeros_like_state(dev, (B, P), dt)
    if c0 is None:
        c0 = _zeros_like_state(dev, (B, H), dt)
    extra = {"threads": threads} if dev == "cpu" else {}
    return _backend(dev).lstm_forward(x, h0, c0, w_ih, w_hh, b_ih, b_hh, lengths,
                                      reverse=reverse, w_hr=w_hr, **extra)


def lstm_backward(dy, dh_n, dc_n, cache, device=None):
    """Gradients of :func:`lstm_forward` given the gradients of its three outputs.

    Takes ``dy [T, B, P]``, ``dh_n [B, P]``, ``dc_n [B, H]`` (each may be None for zero; ``dy``
    on padded frames is ignored) and the forward's cache. Returns
    ``(dx, dh0, dc0, dw_ih, dw_hh, db_ih, db_hh)`` shaped like the forward's arguments; with a
    projection an eighth element ``dw_hr [P, H]`` follows. ``db_ih`` and ``db_hh`` are equal.
    """
    if device is not None and device != cache.device:
        raise ValueError(f"lstm_backward: the cache is from device {cache.device!r}, "
                         f"not {device!r}")
    return _backend(cache.device).lstm_backward(dy, dh_n, dc_n, cache)


@dataclasses.dataclass
class BLSTMCache:
    """The two directions' caches of :func:`blstm_forward`."""

    forward: object
    backward: object
    hidden: int            # P, the feature count of each direction's output
    device: str


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="asrkit-blstm")
        return _POOL


def _concurrent_default(device: str) -> bool:
    """Whether the two directions run in two threads by default: no.

    Each direction already spreads its recurrence over the cores (it splits the batch, see
    ``asrkit.kernels.cpu.lstm``) and its big GEMMs over BLAS's threads, so two direction threads
    on top oversubscribe the cores. Measured with ``asrkit bench lstm`` on 2 heavily shared
    cores the result flipped between runs (in turn 1.28 s vs threads 2.60 s; then 1.15 s vs
    0.53 s), so the simpler schedule is the default. ``ASRKIT_BLSTM_THREADS=1`` turns the
    threads on (each direction then keeps to one core).
    """
    env = os.environ.get("ASRKIT_BLSTM_THREADS")
    if env is not None:
        return env not in ("0", "", "false", "no")
    return False


def _run_both(device, concurrent, fn_fwd, fn_bwd):
    if concurrent is None:
        concurrent = _concurrent_default(device)
    if concurrent and device == "cpu":
        fut = _pool().submit(fn_bwd)
        a = fn_fwd()
        return a, fut.result()
    return fn_fwd(), fn_bwd()


def _pick(a, d):
    return None if a is None else a[d]


def blstm_forward(x, h0, c0, w_ih, w_hh, b_ih, b_hh, lengths=None, device=None, *, w_hr=None,
                  concurrent=None, threads=None):
    """Run a bidirectional LSTM layer: both directions over ``x``, outputs concatenated.

    Parameters are stacked on a leading axis of 2 (0: forward, 1: reverse), which is torch's
    ``h_0 [num_directions, B, H]`` layout and ``stack([weight_ih_l0, weight_ih_l0_reverse])``
    for the weights: ``x [T, B, I]``, ``h0 [2, B, P]``, ``c0 [2, B, H]`` (None for zeros),
    ``w_ih [2, 4H, I]``, ``w_hh [2, 4H, P]``, ``b_ih, b_hh [2, 4H]``, ``w_hr [2, P, H]`` or None,
    ``lengths int[B]``. ``concurrent=True`` runs the directions in two threads on the CPU (None:
    ``ASRKIT_BLSTM_THREADS``, else in turn, which measured faster); ``threads`` is passed on to
    :func:`lstm_forward` when they run in turn. Returns ``y [T, B, 2P]``
    (forward features first), ``h_n [2, B, P]``, ``c_n [2, B, H]`` and an opaque cache for
    :func:`blstm_backward`.
    """
    dev = _device(device, x, w_ih)
    T, B, _, H, P = _check(x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, lead=(2,))
    backend = _backend(dev)
    dt = np.float64 if np.dtype(x.dtype) == np.float64 else np.float32
    if h0 is None:
        h0 = _zeros_like_state(dev, (2, B, P), dt)
    if c0 is None:
        c0 = _zeros_like_state(dev, (2, B, H), dt)

    y = None
    if dev == "cpu":  # each direction writes its half of y: no concatenation
        y = np.empty((T, B, 2 * P), dt)

    def direction(d):
        # each direction in its own thread keeps to one core; in turn, each uses them all
        extra = ({"threads": 1 if concurrent else threads, "out": y[:, :, d * P:(d + 1) * P]}
                 if dev == "cpu" else {})
        return lambda: backend.lstm_forward(x, h0[d], c0[d], w_ih[d], w_hh[d], b_ih[d], b_hh[d],
                                            lengths, reverse=bool(d), w_hr=_pick(w_hr, d),
                                            **extra)

    if concurrent is None:
        concurrent = _concurrent_default(dev)
    (yf, hf, cf, kf), (yb, hb, cb, kb) = _run_both(dev, concurrent, direction(0), direction(1))
    if y is None:
        y, h_n, c_n = backend.join_directions(yf, yb, hf, hb, cf, cb)
    else:
        h_n, c_n = np.stack([hf, hb]), np.stack([cf, cb])
    return y, h_n, c_n, BLSTMCache(kf, kb, P, dev)


def blstm_backward(dy, dh_n, dc_n, cache: BLSTMCache, device=None, *, concurrent=None):
    """Gradients of :func:`blstm_forward`.

    Takes ``dy [T, B, 2P]``, ``dh_n [2, B, P]``, ``dc_n [2, B, H]`` (None for zero) and the cache.
    Returns ``(dx [T, B, I], dh0 [2, B, P], dc0 [2, B, H], dw_ih [2, 4H, I], dw_hh [2, 4H, P],
    db_ih [2, 4H], db_hh [2, 4H])``, plus ``dw_hr [2, P, H]`` with a projection; ``dx`` sums both
    directions.
    """
    if device is not None and device != cache.device:
        raise ValueError(f"blstm_backward: the cache is from device {cache.device!r}, "
                         f"not {device!r}")
    backend = _backend(cache.device)
    P = cache.hidden
    dyf = None if dy is None else dy[:, :, :P]
    dyb = None if dy is None else dy[:, :, P:]

    def direction(d, dyd, k):
        return lambda: backend.lstm_backward(dyd, _pick(dh_n, d), _pick(dc_n, d), k)

    gf, gb = _run_both(cache.device, concurrent, direction(0, dyf, cache.forward),
                       direction(1, dyb, cache.backward))
    return backend.join_gradients(gf, gb)
