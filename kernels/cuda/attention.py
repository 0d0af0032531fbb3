"""Multi-head self-attention on CUDA (numba.cuda): one thread per (sequence, head, query row)
for the forward and the query gradient, one per key row for the key and value gradients.

Same maths, masks and results as :mod:`asrkit.kernels.reference.attention`. Like the CPU kernel
and flash attention, the forward keeps only each row's log-sum-exp and the backward recomputes
the probabilities from it; no ``[B, H, T, T]`` array exists. Each thread owns the rows it writes,
so nothing needs atomics:

* forward, per query row: one pass over the row's key window for the maximum and the sum of
  exponentials (online, rescaling the sum when the maximum grows), a second pass adds
  ``exp(s - lse) v_j`` into the output row;
* backward: ``delta = rowsum(dO * O)`` per query; per query row ``dQ = sum_j dS_ij K_j`` (and,
  with relative positions, the position part ``sum_j dS_ij pos_{T-1-i+j}`` kept apart for the
  bias gradient); per key row ``dV = sum_i P_ij dO_i``, ``dK = sum_i dS_ij (Q_i + u)`` over the
  queries whose window holds the key; per (head, relative position) ``dpos``, summed over the
  batch; per (head, feature) the two bias gradients.

The projections of :func:`mhsa_forward` are GEMMs (:mod:`asrkit.kernels.cuda.gemm`: cuBLAS where
available). These kernels do every score's dot product in a thread of its own, serially over the
head size: correct on any GPU and under the simulator, not a tuned flash kernel (no shared-memory
tiles, no tensor cores). Takes device or host arrays; returns numba device arrays.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from asrkit.kernels._device import DeviceUnavailableError, require_cuda
from asrkit.kernels.reference.attention import key_window

try:
    from numba import cuda
except ImportError as e:  # pragma: no cover - depends on the install
    raise DeviceUnavailableError(
        "device='cuda' needs numba-cuda: pip install 'asrkit[cuda]'") from e

from asrkit.kernels.cuda.gemm import gemm  # noqa: E402
from asrkit.kernels.cuda.lstm import (  # noqa: E402
    THREADS,
    _ones,
    device_zeros,
    grid_size,
    host_lengths,
    is_device_array,
    to_device,
)


def _launch(kernel, n, *args):
    if n > 0:
        kernel[grid_size(n), THREADS](*args)


def _dev(a, dt, name):
    """``a`` on the device with dtype ``dt`` (host arrays are converted and copied)."""
    if is_device_array(a) and np.dtype(a.dtype) != np.dtype(dt):
        raise ValueError(f"attention (cuda): {name} is a {a.dtype} device array where "
                         f"{np.dtype(dt)} is needed; convert it on the device first")
    return to_device(a, dt)


# ---- device functions ----------------------------------------------------------------------

@cuda.jit(device=True, inline=True)
def _score(q, k, posh, bu, bv, b, h, i, j, d, T, scale, rel):
    """The scaled score of query i against key j of sequence b, head h."""
    acc = 0.0
    for c in range(d):
        qc = q[i, b, h * d + c]
        if rel:
            acc += ((qc + bu[h, c]) * k[j, b, h * d + c]
                    + (qc + bv[h, c]) * posh[h, T - 1 - i + j, c])
        else:
            acc += qc * k[j, b, h * d + c]
    return scale * acc


@cuda.jit(device=True, inline=True)
def _row_dot(x, y, i, b, h, d):
    acc = 0.0
    for c in range(d):
        acc += x[i, b, h * d + c] * y[i, b, h * d + c]
    return acc


@cuda.jit(device=True, inline=True)
def _pair_dot(x, y, i, j, b, h, d):
    acc = 0.0
    for c in range(d):
        acc += x[i, b, h * d + c] * y[j, b, h * d + c]
    return acc


@cuda.jit(device=True, inline=True)
def _unpack(k, H, T):
    """(b, h, i) of the flat thread index ``k = (b * H + h) * T + i``."""
    i = k % T
    bh = k // T
    return bh // H, bh % H, i


# ---- kernels --------------------------------------------------------------------------------

@cuda.jit
def _forward(q, k, v, out, lse, lengths, lo, hi, posh, bu, bv, scale, rel, H):
    n = cuda.grid(1)
    T, B, D = q.shape
    if n >= B * H * T:
        return
    b, h, i = _unpack(n, H, T)
    d = D // H
    L = lengths[b]
    for c in range(d):
        out[i, b, h * d + c] = 0
    if i >= L:
        lse[b, h, i] = 0
        return
    j1 = min(hi[i], L)
    m = -math.inf
    total = 0.0
    for j in range(lo[i], j1):
        s = _score(q, k, posh, bu, bv, b, h, i, j, d, T, scale, rel)
        if s > m:
            total = total * math.exp(m - s) + 1.0
            m = s
        else:
            total += math.exp(s - m)
    z = m + math.log(total)
    lse[b, h, i] = z
    for j in range(lo[i], j1):
        p = math.exp(_score(q, k, posh, bu, bv, b, h, i, j, d, T, scale, rel) - z)
        for c in range(d):
            out[i, b, h * d + c] += p * v[j, b, h * d + c]


@cuda.jit
def _deltas(dout, out, lengths, delta, H):
    n = cuda.grid(1)
    T, B, D = out.shape
    if n >= B * H * T:
        return
    b, h, i = _unpack(n, H, T)
    delta[b, h, i] = _row_dot(dout, out, i, b, h, D // H) if i < lengths[b] else 0


@cuda.jit
def _query_grads(q, k, v, dout, lse, delta, lengths, lo, hi, posh, bu, bv, scale, rel, H, dq,
                 dq_pos):
    """dq (the content part with ``rel``) and ``dq_pos [T, B, D]`` (the position part)."""
    n = cuda.grid(1)
    T, B, D = q.shape
    if n >= B * H * T:
        return
    b, h, i = _unpack(n, H, T)
    d = D // H
    L = lengths[b]
    for c in range(d):
        dq[i, b, h * d + c] = 0
        if rel:
            dq_pos[i, b, h * d + c] = 0
    if i >= L:
        return
    for j in range(lo[i], min(hi[i], L)):
        p = math.exp(_score(q, k, posh, bu, bv, b, h, i, j, d, T, scale, rel) - lse[b, h, i])
        ds = scale * p * (_pair_dot(dout, v, i, j, b, h, d) - delta[b, h, i])
        for c in range(d):
            dq[i, b, h * d + c] += ds * k[j, b, h * d + c]
            if rel:
                dq_pos[i, b, h * d + c] += ds * posh[h, T - 1 - i + j, c]


@cuda.jit
def _key_value_grads(q, k, v, dout, lse, delta, lengths, lo, hi, posh, bu, bv, scale, rel, H,
                     dk, dv):
    n = cuda.grid(1)
    T, B, D = q.shape
    if n >= B * H * T:
        return
    b, h, j = _unpack(n, H, T)
    d = D // H
    L = lengths[b]
    for c in range(d):
        dk[j, b, h * d + c] = 0
        dv[j, b, h * d + c] = 0
    if j >= L:
        return
    for i in range(L):
        if j < lo[i] or j >= hi[i]:
            continue
        p = math.exp(_score(q, k, posh, bu, bv, b, h, i, j, d, T, scale, rel) - lse[b, h, i])
        ds = scale * p * (_pair_dot(dout, v, i, j, b, h, d) - delta[b, h, i])
        for c in range(d):
            g = dout[i, b, h * d + c]
            dv[j, b, h * d + c] += p * g
            qc = q[i, b, h * d + c]
            if rel:
                qc += bu[h, c]
            dk[j, b, h * d + c] += ds * qc


@cuda.jit
def _position_grads(q, k, v, dout, lse, delta, lengths, lo, hi, posh, bu, bv, scale, H, dposh):
    """``dposh [H, 2T-1, d]``: one thread per (head, relative position), summed over the batch."""
    n = cuda.grid(1)
    T, B, D = q.shape
    M = 2 * T - 1
    if n >= H * M:
        return
    h, m = n // M, n % M
    d = D // H
    for c in range(d):
        dposh[h, m, c] = 0
    for b in range(B):
        L = lengths[b]
        for i in range(L):
            j = i + m - (T - 1)
            if j < lo[i] or j >= min(hi[i], L):
                continue
            p = math.exp(_score(q, k, posh, bu, bv, b, h, i, j, d, T, scale, True)
                         - lse[b, h, i])
            ds = scale * p * (_pair_dot(dout, v, i, j, b, h, d) - delta[b, h, i])
            for c in range(d):
                dposh[h, m, c] += ds * (q[i, b, h * d + c] + bv[h, c])


@cuda.jit
def _bias_grads(dq, dq_pos, lengths, H, dbu, dbv):
    """Per (head, feature): the bias gradients summed over the valid rows; ``dq += dq_pos``."""
    n = cuda.grid(1)
    T, B, D = dq.shape
    d = D // H
    if n >= D:
        return
    h, c = n // d, n % d
    su = 0.0
    sv = 0.0
    for b in range(B):
        for i in range(lengths[b]):
            su += dq[i, b, n]
            sv += dq_pos[i, b, n]
            dq[i, b, n] += dq_pos[i, b, n]
    dbu[h, c] = su
    dbv[h, c] = sv


@cuda.jit
def _heads_major(pos, posh):
    """``posh[h, m, c] = pos[m, h*d + c]``."""
    n = cuda.grid(1)
    H, M, d = posh.shape
    if n < H * M * d:
        h, r = n // (M * d), n % (M * d)
        posh[h, r // d, r % d] = pos[r // d, h * d + r % d]


@cuda.jit
def _rows_major(posh, pos):
    n = cuda.grid(1)
    H, M, d = posh.shape
    if n < H * M * d:
        h, r = n // (M * d), n % (M * d)
        pos[r // d, h * d + r % d] = posh[h, r // d, r % d]


@cuda.jit
def _masked_copy(src, lengths, dst):
    """``dst = src`` on valid frames, 0 on padded ones (``[T, B, D]``)."""
    n = cuda.grid(1)
    T, B, D = dst.shape
    if n < T * B * D:
        t, r = n // (B * D), n % (B * D)
        b = r // D
        dst[t, b, r % D] = src[t, b, r % D] if t < lengths[b] else 0


@cuda.jit
def _add_bias_masked(a, bias, lengths, masked):
    """``a [T, B, N] += bias``; with ``masked``, padded frames become 0."""
    n = cuda.grid(1)
    T, B, N = a.shape
    if n < T * B * N:
        t, r = n // (B * N), n % (B * N)
        b, c = r // N, r % N
        if masked and t >= lengths[b]:
            a[t, b, c] = 0
        else:
            a[t, b, c] += bias[c]


# ---- entry points ---------------------------------------------------------------------------

@dataclasses.dataclass
class CudaAttentionCache:
    """What :func:`attention_backward` needs (device arrays; the inputs and the output are
    referenced, not copied)."""

    q: object
    k: object
    v: object
    out: object
    lse: object              # [B, H, T]
    lengths: np.ndarray      # host int64 [B]
    lengths_d: object
    lo: object               # device int64 [T]
    hi: object
    scale: float
    posh: object | None      # [H, 2T-1, d]
    pos_bias_u: object | None
    pos_bias_v: object | None
    device: str = "cuda"


def _placeholder(dt):
    return device_zeros((1, 1, 1), dt), device_zeros((1, 1), dt)


def attention_forward(q, k, v, lengths=None, num_heads=1, causal=False, chunk_size=None,
                      left_chunks=None, pos=None, pos_bias_u=None, pos_bias_v=None, scale=None):
    """The attention core on the GPU; arguments and results as the reference twin (device or
    host arrays in, device arrays out)."""
    require_cuda()
    dt = np.float64 if np.dtype(q.dtype) == np.float64 else np.float32
    q, k, v = (_dev(a, dt, n) for a, n in ((q, "q"), (k, "k"), (v, "v")))
    T, B, D = q.shape
    H = int(num_heads)
    d = D // H
    lengths = host_lengths(lengths, T, B)
    lengths_d = cuda.to_device(lengths)
    lo, hi = (cuda.to_device(a) for a in key_window(T, causal, chunk_size, left_chunks))
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    rel = pos is not None
    if rel:
        pos = _dev(pos, dt, "pos")
        posh = cuda.device_array((H, 2 * T - 1, d), dt)
        _launch(_heads_major, posh.size, pos, posh)
        bu, bv = _dev(pos_bias_u, dt, "pos_bias_u"), _dev(pos_bias_v, dt, "pos_bias_v")
    else:
        posh, bu = _placeholder(dt)
        bv = bu
    out = cuda.device_array((T, B, D), dt)
    lse = cuda.device_array((B, H, T), np.float64)
    _launch(_forward, B * H * T, q, k, v, out, lse, lengths_d, lo, hi, posh, bu, bv, scale, rel,
            H)
    cache = CudaAttentionCache(q, k, v, out, lse, lengths, lengths_d, lo, hi, scale,
                               posh if rel else None, bu if rel else None, bv if rel else None)
    return out, cache


def attention_backward(dout, cache: CudaAttentionCache, dq=None, dk=None, dv=None):
    """Gradients of the GPU attention core; results as the reference twin (device arrays).
    ``dq, dk, dv`` may be given as ``[T, B, D]`` device arrays (views) to write into."""
    c = cache
    T, B, D = c.q.shape
    H = c.lse.shape[1]
    d = D // H
    dt = np.dtype(c.q.dtype)
    dout = _dev(dout, dt, "dout")
    dq, dk, dv = (cuda.device_array((T, B, D), dt) if a is None else a for a in (dq, dk, dv))
    rel = c.posh is not None
    if rel:
        posh, bu, bv = c.posh, c.pos_bias_u, c.pos_bias_v
        dq_pos = cuda.device_array((T, B, D), dt)
    else:
        posh, bu = _placeholder(dt)
        bv = bu
        dq_pos = device_zeros((1, 1, 1), dt)
    n = B * H * T
    delta = cuda.device_array((B, H, T), np.float64)
    _launch(_deltas, n, dout, c.out, c.lengths_d, delta, H)
    args = (c.q, c.k, c.v, dout, c.lse, delta, c.lengths_d, c.lo, c.hi, posh, bu, bv, c.scale,
            rel, H)
    _launch(_query_grads, n, *args, dq, dq_pos)
    _launch(_key_value_grads, n, *args, dk, dv)
    if not rel:
        return dq, dk, dv
    dposh = cuda.device_array((H, 2 * T - 1, d), dt)
    _launch(_position_grads, H * (2 * T - 1), *args[:-2], H, dposh)
    dbu = cuda.device_array((H, d), dt)
    dbv = cuda.device_array((H, d), dt)
    _launch(_bias_grads, D, dq, dq_pos, c.lengths_d, H, dbu, dbv)
    dpos = cuda.device_array((2 * T - 1, D), dt)
    _launch(_rows_major, dposh.size, dposh, dpos)
    return dq, dk, dv, dpos, dbu, dbv


@dataclasses.dataclass
class CudaMHSACache:
    """What :func:`mhsa_backward` needs (device arrays)."""

    x: object                # [T, B, D] with padded frames zeroed
    core: CudaAttentionCache
    w_in: object
    w_out: object
    pos_emb: object | None
    device: str = "cuda"


def _column_sums(a2d, dt):
    """``ones [1, rows] @ a2d`` as a ``[cols]`` device array."""
    rows, cols = a2d.shape
    out = cuda.device_array((1, cols), dt)
    if rows == 0:
        return device_zeros((cols,), dt)
    gemm(_ones(rows, dt), a2d, out)
    return out.reshape(cols)


def mhsa_forward(x, w_in, b_in, w_out, b_out, num_heads, lengths=None, causal=False,
                 chunk_size=None, left_chunks=None, pos_emb=None, w_pos=None, pos_bias_u=None,
                 pos_bias_v=None, scale=None):
    """The self-attention layer on the GPU; arguments and results as the reference twin."""
    require_cuda()
    dt = np.float64 if np.dtype(x.dtype) == np.float64 else np.float32
    x = _dev(x, dt, "x")
    T, B, D = x.shape
    lengths = host_lengths(lengths, T, B)
    lengths_d = cuda.to_device(lengths)
    xz = cuda.device_array((T, B, D), dt)   # padded frames zeroed: no padded value reaches dW
    _launch(_masked_copy, xz.size, x, lengths_d, xz)
    w_in, w_out = _dev(w_in, dt, "w_in"), _dev(w_out, dt, "w_out")
    qkv = cuda.device_array((T, B, 3 * D), dt)
    if T * B:
        gemm(xz.reshape(T * B, D), w_in, qkv.reshape(T * B, 3 * D), trans_b=True)
    if b_in is not None:
        _launch(_add_bias_masked, qkv.size, qkv, _dev(b_in, dt, "b_in"), lengths_d, False)
    pos = None
    if pos_emb is not None:
        pos_emb = _dev(pos_emb, dt, "pos_emb")
        pos = gemm(pos_emb, _dev(w_pos, dt, "w_pos"), trans_b=True)
    o, core = attention_forward(qkv[:, :, :D], qkv[:, :, D:2 * D], qkv[:, :, 2 * D:], lengths,
                                num_heads, causal, chunk_size, left_chunks, pos, pos_bias_u,
                                pos_bias_v, scale)
    y = cuda.device_array((T, B, D), dt)
    if T * B:
        gemm(o.reshape(T * B, D), w_out, y.reshape(T * B, D), trans_b=True)
    bias = _dev(b_out, dt, "b_out") if b_out is not None else device_zeros((D,), dt)
    _launch(_add_bias_masked, y.size, y, bias, lengths_d, True)
    return y, CudaMHSACache(xz, core, w_in, w_out, pos_emb)


def mhsa_backward(dy, cache: CudaMHSACache):
    """Gradients of the GPU self-attention layer; results as the reference twin."""
    c = cache
    T, B, D = c.x.shape
    dt = np.dtype(c.x.dtype)
    dyz = cuda.device_array((T, B, D), dt)
    _launch(_masked_copy, dyz.size, _dev(dy, dt, "dy"), c.core.lengths_d, dyz)
    dy2 = dyz.reshape(T * B, D)
    o2 = c.core.out.reshape(T * B, D)
    dw_out = gemm(dy2, o2, trans_a=True)
    db_out = _column_sums(dy2, dt)
    do = cuda.device_array((T * B, D), dt)
    gemm(dy2, c.w_out, do)
    dqkv = cuda.device_array((T, B, 3 * D), dt)
    grads = attention_backward(do.reshape(T, B, D), c.core, dqkv[:, :, :D], dqkv[:, :, D:2 * D],
                               dqkv[:, :, 2 * D:])
    dqkv2 = dqkv.reshape(T * B, 3 * D)
    dx = cuda.device_array((T * B, D), dt)
    gemm(dqkv2, c.w_in, dx)
    dw_in = gemm(dqkv2, c.x.reshape(T * B, D), trans_a=True)
    out = (dx.reshape(T, B, D), dw_in, _column_sums(dqkv2, dt), dw_out, db_out)
    if c.pos_emb is None:
        return out
    dpos, dbu, dbv = grads[3:]
    return (*out, gemm(dpos, c.pos_emb, trans_a=True), dbu, dbv)
