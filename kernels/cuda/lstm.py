"""Fused LSTM on CUDA: GEMMs through :mod:`asrkit.kernels.cuda.gemm` (cuBLAS where available) and
one numba.cuda kernel per time step for the gates and the cell.

Same maths, layout and semantics as :mod:`asrkit.kernels.cpu.lstm` (read its docstring): the input
projection of all frames is one GEMM, each step is a GEMM ``h @ w_hh^T`` plus one fused kernel
with one thread per (sequence, hidden unit), the backward runs the steps in reverse and forms the
weight gradients with GEMMs over all frames (the bias gradient too, as ``ones^T @ dgates``).

Takes numba device arrays (or any ``__cuda_array_interface__`` array; host arrays are copied to
the device) and returns numba device arrays. ``lengths`` may live on either side.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from asrkit.kernels._device import DeviceUnavailableError, cuda_simulated, require_cuda
from asrkit.kernels.reference.lstm import check_lengths

try:
    from numba import cuda
except ImportError as e:  # pragma: no cover - depends on the install
    raise DeviceUnavailableError(
        "device='cuda' needs numba-cuda: pip install 'asrkit[cuda]'") from e

from asrkit.kernels.cuda.gemm import gemm  # noqa: E402

# threads per block of the elementwise kernels; tiny under the simulator, where each simulated
# thread is a Python thread
THREADS = 8 if cuda_simulated() else 128


def grid_size(n: int) -> int:
    """Blocks of THREADS threads that cover n elements (at least one)."""
    return max(1, math.ceil(n / THREADS))


def is_device_array(a) -> bool:
    """True for numba device arrays (also the simulator's) and ``__cuda_array_interface__``."""
    return hasattr(a, "copy_to_host") or hasattr(a, "__cuda_array_interface__")


def to_device(a, dtype=None):
    """A numba device array for ``a`` (no copy when it already is one of ``dtype``)."""
    if is_device_array(a):
        if not hasattr(a, "copy_to_host"):
            a = cuda.as_cuda_array(a)
        if dtype is not None and np.dtype(a.dtype) != np.dtype(dtype):
            raise ValueError(f"lstm (cuda): array of dtype {a.dtype} where {np.dtype(dtype)} "
                             "is needed; convert it on the device first")
        return a
    return cuda.to_device(np.ascontiguousarray(a, dtype=dtype))


def device_zeros(shape, dtype):
    """A zero-filled device array (filled by a kernel, not copied from the host)."""
    require_cuda()
    a = cuda.device_array(shape, dtype)
    n = int(np.prod(shape, dtype=np.int64))
    if n:
        _zero_flat[grid_size(n), THREADS](a.reshape(n))
    return a


@cuda.jit
def _fill_flat(a, value):
    k = cuda.grid(1)
    if k < a.shape[0]:
        a[k] = value


def _ones(n, dtype):
    a = cuda.device_array((1, n), dtype)
    _fill_flat[grid_size(n), THREADS](a.reshape(n), np.dtype(dtype).type(1))
    return a


@cuda.jit
def _zero_flat(a):
    k = cuda.grid(1)
    if k < a.shape[0]:
        a[k] = 0


def _copy(a):
    out = cuda.device_array(a.shape, a.dtype)
    out.copy_to_device(a)
    return out


def host_lengths(lengths, T, B):
    """Validated host int64 [B] lengths from host or device ``lengths`` (None: all T)."""
    if lengths is not None and is_device_array(lengths):
        lengths = to_device(lengths).copy_to_host()
    return check_lengths(lengths, T, B)


def _contiguous(a):
    """``a [., ., .]`` itself when C-contiguous, else a contiguous device copy."""
    if a.is_c_contiguous():
        return a
    out = cuda.device_array(a.shape, a.dtype)
    if out.size:
        _strided_copy3[grid_size(out.size), THREADS](a, out)
    return out


@cuda.jit
def _strided_copy3(src, dst):
    k = cuda.grid(1)
    A, B, C = dst.shape
    if k < A * B * C:
        i, r = k // (B * C), k % (B * C)
        dst[i, r // C, r % C] = src[i, r // C, r % C]


@cuda.jit(device=True, inline=True)
def _frame(s, length, reverse):
    return length - 1 - s if reverse else s


@cuda.jit(device=True, inline=True)
def _sigmoid(a):
    return 1.0 / (1.0 + math.exp(-a))


@cuda.jit
def _forward_step(s, reverse, lengths, xg, rec, b_ih, b_hh, h, c, gates, cs, tcs, hs, y,
                  m_step, ms, proj):
    k = cuda.grid(1)
    B, H = c.shape
    if k >= B * H:
        return
    b, j = k // H, k % H
    L = lengths[b]
    if s >= L:
        if proj:
            m_step[b, j] = 0
        return
    t = _frame(s, L, reverse)
    i = _sigmoid(xg[t, b, j] + rec[b, j] + b_ih[j] + b_hh[j])
    f = _sigmoid(xg[t, b, H + j] + rec[b, H + j] + b_ih[H + j] + b_hh[H + j])
    g = math.tanh(xg[t, b, 2 * H + j] + rec[b, 2 * H + j] + b_ih[2 * H + j] + b_hh[2 * H + j])
    o = _sigmoid(xg[t, b, 3 * H + j] + rec[b, 3 * H + j] + b_ih[3 * H + j] + b_hh[3 * H + j])
    cn = f * c[b, j] + i * g
    tc = math.tanh(cn)
    m = o * tc
    gates[t, b, j] = i
    gates[t, b, H + j] = f
    gates[t, b, 2 * H + j] = g
    gates[t, b, 3 * H + j] = o
    c[b, j] = cn
    cs[t, b, j] = cn
    tcs[t, b, j] = tc
    if proj:
        m_step[b, j] = m
        ms[t, b, j] = m
    else:
        h[b, j] = m
        y[t, b, j] = m
        hs[t, b, j] = m


@cuda.jit
def _projection_step(s, reverse, lengths, h_new, h, hs, y):
    k = cuda.grid(1)
    B, P = h.shape
    if k >= B * P:
        return
    b, j = k // P, k % P
    if s < lengths[b]:
        t = _frame(s, lengths[b], reverse)
        v = h_new[b, j]
        h[b, j] = v
        y[t, b, j] = v
        hs[t, b, j] = v


@cuda.jit
def _merge_carry(s, lengths, rec, dh):
    k = cuda.grid(1)
    B, P = dh.shape
    if k < B * P and s + 1 < lengths[k // P]:
        dh[k // P, k % P] = rec[k // P, k % P]


@cuda.jit
def _total_dh(s, reverse, lengths, rec, have_rec, dy, dh, dh_step, dhs):
    k = cuda.grid(1)
    B, P = dh.shape
    if k >= B * P:
        return
    b, j = k // P, k % P
    L = lengths[b]
    if have_rec and s + 1 < L:
        dh[b, j] = rec[b, j]
    if s >= L:
        dh_step[b, j] = 0
        return
    t = _frame(s, L, reverse)
    v = dh[b, j] + dy[t, b, j]
    dh_step[b, j] = v
    dhs[t, b, j] = v


@cuda.jit
def _backward_step(s, reverse, lengths, rec, have_rec, dm_src, dy, dh, dc, gates, cs, tcs, c0,
                   dg_step, dgates, proj):
    k = cuda.grid(1)
    B, H = dc.shape
    if k >= B * H:
        return
    b, j = k // H, k % H
    L = lengths[b]
    if have_rec and not proj and s + 1 < L:
        dh[b, j] = rec[b, j]
    if s >= L:
        return
    t = _frame(s, L, reverse)
    dm = dm_src[b, j] if proj else dh[b, j] + dy[t, b, j]
    i = gates[t, b, j]
    f = gates[t, b, H + j]
    g = gates[t, b, 2 * H + j]
    o = gates[t, b, 3 * H + j]
    tc = tcs[t, b, j]
    if s > 0:
        cp = cs[t + 1 if reverse else t - 1, b, j]
    else:
        cp = c0[b, j]
    dct = dc[b, j] + dm * o * (1.0 - tc * tc)
    dai = dct * g * i * (1.0 - i)
    daf = dct * cp * f * (1.0 - f)
    dag = dct * i * (1.0 - g * g)
    dao = dm * tc * o * (1.0 - o)
    dc[b, j] = dct * f
    dgates[t, b, j] = dai
    dgates[t, b, H + j] = daf
    dgates[t, b, 2 * H + j] = dag
    dgates[t, b, 3 * H + j] = dao
    dg_step[b, j] = dai
    dg_step[b, H + j] = daf
    dg_step[b, 2 * H + j] = dag
    dg_step[b, 3 * H + j] = dao


@cuda.jit
def _add3(a, b, out):
    k = cuda.grid(1)
    A, B, C = out.shape
    if k < A * B * C:
        i, r = k // (B * C), k % (B * C)
        out[i, r // C, r % C] = a[i, r // C, r % C] + b[i, r // C, r % C]


@dataclasses.dataclass
class CudaLSTMCache:
    """What :func:`lstm_backward` needs, on the device; arrays indexed by frame ``t``."""

    x: object            # [T, B, I] (referenced)
    gates: object        # [T, B, 4H]
    c: object            # [T, B, H]
    tc: object           # [T, B, H]
    hs: object           # [T, B, P] private copy of the outputs
    m: object            # [T, B, H] or None
    h0: object
    c0: object
    lengths: np.ndarray  # host int64 [B]
    lengths_d: object    # the same on the device
    reverse: bool
    w_ih: object
    w_hh: object
    w_hr: object
    device: str = "cuda"


def lstm_forward(x, h0, c0, w_ih, w_hh, b_ih, b_hh, lengths=None, reverse=False, w_hr=None):
    """One LSTM direction on the GPU; arguments and results as the reference twin.

    Takes device (or host) arrays ``x [T, B, I]``, ``h0 [B, P]``, ``c0 [B, H]``,
    ``w_ih [4H, I]``, ``w_hh [4H, P]``, ``b_ih, b_hh [4H]``, ``w_hr [P, H]`` or None and
    ``lengths int[B]``. Returns device arrays ``y [T, B, P]``, ``h_n [B, P]``, ``c_n [B, H]`` and
    a :class:`CudaLSTMCache`.
    """
    require_cuda()
    dt = np.float64 if np.dtype(x.dtype) == np.float64 else np.float32
    x = _contiguous(to_device(x, dt))
    T, B, In = x.shape
    H = w_hh.shape[0] // 4
    proj = w_hr is not None
    P = w_hr.shape[0] if proj else H
    lengths = host_lengths(lengths, T, B)
    lengths_d = cuda.to_device(lengths)
    w_ih, w_hh, b_ih, b_hh = (to_device(a, dt) for a in (w_ih, w_hh, b_ih, b_hh))
    w_hr = to_device(w_hr, dt) if proj else None
    h0, c0 = to_device(h0, dt), to_device(c0, dt)
    h, c = _copy(h0), _copy(c0)

    xg = cuda.device_array((T * B, 4 * H), dt)
    if T * B:
        gemm(x.reshape(T * B, In), w_ih, xg, trans_b=True)
    xg = xg.reshape(T, B, 4 * H)
    y = device_zeros((T, B, P), dt)
    hs = device_zeros((T, B, P), dt)
    gates = cuda.device_array((T, B, 4 * H), dt)
    cs = cuda.device_array((T, B, H), dt)
    tcs = cuda.device_array((T, B, H), dt)
    rec = cuda.device_array((B, 4 * H), dt)
    ms = device_zeros((T, B, H) if proj else (1, 1, 1), dt)
    m_step = cuda.device_array((B, H) if proj else (1, 1), dt)
    h_new = cuda.device_array((B, P), dt)
    steps = int(lengths.max(initial=0))
    for s in range(steps):
        gemm(h, w_hh, rec, trans_b=True)
        _forward_step[grid_size(B * H), THREADS](s, reverse, lengths_d, xg, rec, b_ih, b_hh, h, c,
                                             gates, cs, tcs, hs, y, m_step, ms, proj)
        if proj:
            gemm(m_step, w_hr, h_new, trans_b=True)
            _projection_step[grid_size(B * P), THREADS](s, reverse, lengths_d, h_new, h, hs, y)
    cache = CudaLSTMCache(x, gates, cs, tcs, hs, ms if proj else None, h0, c0, lengths,
                          lengths_d, bool(reverse), w_ih, w_hh, w_hr)
    return y, h, c, cache


def lstm_backward(dy, dh_n, dc_n, cache: CudaLSTMCache):
    """Gradients of one LSTM direction on the GPU; arguments and results as the reference twin.

    Takes ``dy [T, B, P]``, ``dh_n [B, P]``, ``dc_n [B, H]`` (device or host arrays, or None for
    zero). Returns device arrays ``(dx, dh0, dc0, dw_ih, dw_hh, db_ih, db_hh)``, plus ``dw_hr``
    with a projection.
    """
    x, gates, lengths, lengths_d = cache.x, cache.gates, cache.lengths, cache.lengths_d
    T, B, In = x.shape
    H = gates.shape[2] // 4
    P = cache.hs.shape[2]
    dt = np.dtype(x.dtype)
    proj = cache.w_hr is not None
    dy = device_zeros((T, B, P), dt) if dy is None else to_device(dy, dt)
    dh = device_zeros((B, P), dt) if dh_n is None else _copy(to_device(dh_n, dt))
    dc = device_zeros((B, H), dt) if dc_n is None else _copy(to_device(dc_n, dt))
    dgates = device_zeros((T, B, 4 * H), dt)
    dg_step = device_zeros((B, 4 * H), dt)
    rec = cuda.device_array((B, P), dt)
    dhs = device_zeros((T, B, P) if proj else (1, 1, 1), dt)
    dh_step = cuda.device_array((B, P), dt)
    dm = cuda.device_array((B, H) if proj else (1, 1), dt)
    steps = int(lengths.max(initial=0))
    for s in range(steps - 1, -1, -1):
        have_rec = s < steps - 1
        if have_rec:
            gemm(dg_step, cache.w_hh, rec)
        if proj:
            _total_dh[grid_size(B * P), THREADS](s, cache.reverse, lengths_d, rec, have_rec,
                                             dy, dh, dh_step, dhs)
            gemm(dh_step, cache.w_hr, dm)
        _backward_step[grid_size(B * H), THREADS](s, cache.reverse, lengths_d, rec, have_rec, dm,
                                              dy, dh, dc, gates, cache.c, cache.tc, cache.c0,
                                              dg_step, dgates, proj)
    if steps:
        gemm(dg_step, cache.w_hh, rec)
        _merge_carry[grid_size(B * P), THREADS](-1, lengths_d, rec, dh)

    n = T * B
    dg2 = dgates.reshape(n, 4 * H)
    dx = cuda.device_array((n, In), dt)
    dw_ih = cuda.device_array((4 * H, In), dt)
    dw_hh = cuda.device_array((4 * H, P), dt)
    db = cuda.device_array((1, 4 * H), dt)
    if n:
        gemm(dg2, cache.w_ih, dx)
        gemm(dg2, x.reshape(n, In), dw_ih, trans_a=True)
        # h_prev of frame t is the neighbouring frame's output (zero on padding), or h0 for the
        # first step, whose gate gradients are still in dg_step
        hs2 = cache.hs.reshape(n, P)
        if n > B:
            if cache.reverse:
                gemm(dg2[:n - B], hs2[B:], dw_hh, trans_a=True)
            else:
                gemm(dg2[B:], hs2[:n - B], dw_hh, trans_a=True)
            gemm(dg_step, cache.h0, dw_hh, trans_a=True, beta=1.0)
        else:
            gemm(dg_step, cache.h0, dw_hh, trans_a=True)
        gemm(_ones(n, dt), dg2, db)
    else:
        dw_ih, dw_hh, db = (device_zeros(a.shape, dt) for a in (dw_ih, dw_hh, db))
    db = db.reshape(4 * H)
    out = (dx.reshape(T, B, In), dh, dc, dw_ih, dw_hh, db, _copy(db))
    if proj:
        dw_hr = cuda.device_array((P, H), dt)
        if n:
            gemm(dhs.reshape(n, P), cache.m.reshape(n, H), dw_hr, trans_a=True)
        else:
            dw_hr = device_zeros((P, H), dt)
        out = (*out, dw_hr)
    return out


def _stack(a, b):
    out = cuda.device_array((2, *a.shape), a.dtype)
    out[0].copy_to_device(a)
    out[1].copy_to_device(b)
    return out


def join_directions(yf, yb, hf, hb, cf, cb):
    """BLSTM outputs on the device: ``y [T, B, 2P]``, ``h_n [2, B, P]``, ``c_n [2, B, H]``."""
    T, B, P = yf.shape
    y = cuda.device_array((T, B, 2 * P), yf.dtype)
    n = T * B * P
    if n:
        _strided_copy3[grid_size(n), THREADS](yf, y[:, :, :P])
        _strided_copy3[grid_size(n), THREADS](yb, y[:, :, P:])
    return y, _stack(hf, hb), _stack(cf, cb)


def join_gradients(gf, gb):
    """BLSTM gradients on the device: ``dx`` summed over the directions, the others stacked."""
    dx = cuda.device_array(gf[0].shape, gf[0].dtype)
    if dx.size:
        _add3[grid_size(dx.size), THREADS](gf[0], gb[0], dx)
    return (dx, *(_stack(a, b) for a, b in zip(gf[1:], gb[1:])))
