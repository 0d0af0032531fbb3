"""Fused LSTM on the CPU: BLAS GEMMs + one njit loop per recurrence.

Same maths and semantics as :mod:`asrkit.kernels.reference.lstm`. The work is laid out as:

* forward: one GEMM for the input projection of every frame (``x [T*B, I] @ w_ih.T``), then one
  njit call runs the whole recurrence: per step the GEMM ``h @ w_hh.T`` (numpy's OpenBLAS called
  from njit code, see :mod:`asrkit.kernels.cpu._gemm`) and the fused element-wise work (bias,
  gate nonlinearities, cell update, output; with a projection a second GEMM ``m @ w_hr.T``);
* backward: one njit call runs the reverse recurrence (per step the GEMM ``dgates @ w_hh`` and the
  fused cell gradient); the weight gradients are GEMMs over all frames at the end
  (``dW_ih = dgates^T x``, ``dW_hh = dgates^T h_prev`` with ``h_prev`` a shifted view of ``y``).

Speed. One njit call per recurrence instead of a Python loop with ~5 numpy/numba calls per step
removes the interpreter and dispatch overhead of ~600 steps. The per-step GEMMs are small
(``[B, K] @ [K, N]`` with B ~ 16) and are split so that OpenBLAS takes its unpacked small-matrix
kernels (``_gemm.gemm_plan``). The batch is sorted longest first (finished sequences drop out of
the GEMMs) and dealt into one block per thread; sequences are independent, so the blocks'
recurrences run in parallel with no per-step synchronisation, and the big GEMMs use BLAS's own
threads. Everything ``[T, B, ...]`` stays in the caller's batch order (only the per-step state
rows are sorted), so nothing is gathered or scattered. Float32 tanh/sigmoid use a vectorisable
rational approximation (error < 4e-7). Kernels are ``nogil``.

Memory (the cache, per direction, T*B = 4800, H = 320, float32): the gate activations
``[T, B, 4H]`` (24.6 MB) and the cell ``[T, B, H]`` (6.1 MB) only. ``tanh(c)`` is recomputed by
the backward (one rational tanh per cell), the outputs are read from the layer's own ``y`` (the
cache references it: do not overwrite ``y`` before the backward), and the backward writes the
gate gradients over the activations (step t's activations are dead once its gradient exists), so
it allocates no ``[T, B, 4H]`` array; a BLSTM's two halves of ``y`` and ``dy`` are read in
place (no concatenation, no contiguous copies). A cache therefore serves exactly one backward;
``cache.consumed`` says whether it has, and a second backward raises. This took the cache from
43 MB to 31 MB per direction and the backward's own allocations from 32 MB (dgates, a copy of
dy) to 1.5 MB (``dx``). ``asrkit bench train --threads 1`` (2 x BLSTM 320 + CTC, B=16 T=300):
peak step memory 302.8 -> 206.8 MB against torch's 397.9 MB (ratio 0.754 -> 0.52), step time
781 -> 582 ms (torch 5287 ms), load average 3-4.

Measured with ``OPENBLAS_NUM_THREADS=1 asrkit bench lstm --threads 1 --repeat 9`` (T=300 B=16
80->320, medians of alternating runs against torch 2.13 on one thread, 2-core Zen 5 VM shared
with other jobs, load average 4-5): uni 83.1 ms vs torch 107.0 (1.29x), BLSTM directions in turn
200.4 vs 258.4 (1.29x), BLSTM two threads 93.0 vs 226.7 (2.44x), lengths T/2..T 84.3 vs 789.2
(9.4x). Before (a Python loop over steps, ``np.matmul`` per step, tanh(c) and a copy of y kept,
a separate dgates array), at load average 0.9: 111.9 / 230.4 / 145.9 / 104.9 ms against torch
114.7 / 249.0 / 230.7 / 805.8 (1.02x / 1.08x / 1.58x / 7.7x). Where the time goes now (uni, one
thread, quiet): input projection 6 ms, recurrent GEMMs 2 x 22 ms, cell kernels 5 + 3 ms,
dW_hh 20 ms, dW_ih 6 ms, dx 5.5 ms; the cell kernels are bound by streaming the gates.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit, types
from numba.extending import overload

from asrkit.kernels.cpu._gemm import gemm_function, gemm_plan, matmul_rows
from asrkit.kernels.reference.lstm import check_lengths, join_directions

__all__ = ["lstm_forward", "lstm_backward", "join_directions", "join_gradients"]


@dataclasses.dataclass
class CpuLSTMCache:
    """What :func:`lstm_backward` needs; ``[T, B, ...]`` arrays in the caller's batch order.

    One backward consumes it: it overwrites ``gates`` with the gate gradients.
    """

    x: np.ndarray          # [T, B, I] the input (referenced, not copied)
    gates: np.ndarray      # [T, B, 4H] i, f, g, o activations (valid frames only)
    c: np.ndarray          # [T, B, H] cell after the frame (valid frames only)
    y: np.ndarray          # [T, B, P] the layer's output (referenced; zero on padding)
    m: np.ndarray | None   # [T, B, H] o * tanh(c), only with a projection
    h0: np.ndarray         # [B, P] in row order (see ``order``)
    c0: np.ndarray         # [B, H] in row order
    lengths: np.ndarray    # int64 [B] in row order: sorted longest first within each block
    order: np.ndarray      # int64 [B]: state row r holds the caller's sequence order[r]
    bounds: list           # (r0, r1) row blocks, one per thread
    reverse: bool
    w_ih: np.ndarray
    w_hh: np.ndarray
    w_hr: np.ndarray | None
    device: str = "cpu"
    consumed: bool = False  # True once a backward has used (and overwritten) the cache


@njit(cache=True, nogil=True, inline="always")
def _frame(s, length, reverse):
    return length - 1 - s if reverse else s


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _tanh_f32(x):
    """tanh of a float32 as a rational function, vectorisable (|error| < 4e-7).

    The minimax approximation Eigen uses for float tanh (numerator of degree 13, denominator of
    degree 6 in x, input clamped where tanh rounds to +-1). libm's tanhf/expf are scalar calls
    that keep LLVM from vectorising the step loop; this makes the gate kernel ~5x faster.
    """
    c = np.float32(7.99881172180175781)
    x = c if x > c else (-c if x < -c else x)
    x2 = x * x
    p = x2 * np.float32(-2.76076847742355e-16) + np.float32(2.00018790482477e-13)
    p = x2 * p + np.float32(-8.60467152213735e-11)
    p = x2 * p + np.float32(5.12229709037114e-08)
    p = x2 * p + np.float32(1.48572235717979e-05)
    p = x2 * p + np.float32(6.37261928875436e-04)
    p = x2 * p + np.float32(4.89352455891786e-03)
    q = x2 * np.float32(1.19825839466702e-06) + np.float32(1.18534705686654e-04)
    q = x2 * q + np.float32(2.26843463243900e-03)
    q = x2 * q + np.float32(4.89352518554385e-03)
    return x * p / q


def fast_tanh(x):
    """tanh; float32 through :func:`_tanh_f32`, other types through np.tanh (njit only)."""
    return np.tanh(x)


def fast_sigmoid(x):
    """Logistic sigmoid; float32 as ``0.5 + 0.5 * tanh(x / 2)`` (njit only)."""
    return 1.0 / (1.0 + np.exp(-x))


@overload(fast_tanh)
def _fast_tanh_impl(x):
    if x == types.float32:
        return lambda x: _tanh_f32(x)
    return lambda x: np.tanh(x)


@overload(fast_sigmoid)
def _fast_sigmoid_impl(x):
    if x == types.float32:
        return lambda x: np.float32(0.5) + np.float32(0.5) * _tanh_f32(np.float32(0.5) * x)
    return lambda x: 1.0 / (1.0 + np.exp(-x))


# FMA contraction (the only fast-math flag used) lets the rational tanh's Horner steps fuse:
# forward cell work 8.4 -> 6.6 ms, backward 4.9 -> 2.6 ms per 300 steps of B=16 H=320 (float32,
# interleaved runs in one process); results move by < 1e-6.
@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def _lstm_cell(gr, rr, bias, cr, csr, out):
    """One sequence's step on row views: ``gr [4H]`` holds the input projection and becomes
    the gate activations of ``gr + rr + bias``; the cell ``cr`` (and its copy ``csr``) is
    updated in place and ``out = o * tanh(c)``.

    A separate function over 1-D rows so that LLVM sees few arrays and vectorises the loop
    (indexing the 3-D arrays directly in one big kernel ran ~3x slower).
    """
    H = cr.shape[0]
    for j in range(H):
        i = fast_sigmoid(gr[j] + rr[j] + bias[j])
        f = fast_sigmoid(gr[H + j] + rr[H + j] + bias[H + j])
        g = fast_tanh(gr[2 * H + j] + rr[2 * H + j] + bias[2 * H + j])
        o = fast_sigmoid(gr[3 * H + j] + rr[3 * H + j] + bias[3 * H + j])
        gr[j] = i
        gr[H + j] = f
        gr[2 * H + j] = g
        gr[3 * H + j] = o
        cn = f * cr[j] + i * g
        cr[j] = cn
        csr[j] = cn
        out[j] = o * fast_tanh(cn)


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def _lstm_cell_backward(gr, cr, cpr, dmr, dcr):
    """One sequence's step backward on row views: from the gates ``gr [4H]``, the cell ``cr``,
    the previous cell ``cpr`` and ``dm = d(o * tanh(c))`` overwrites ``gr`` with the
    pre-activation gradients and turns ``dcr`` (dL/dc) into dL/dc_prev. tanh(c) is recomputed
    (bit-identical to the forward's)."""
    H = dcr.shape[0]
    for j in range(H):
        dm = dmr[j]
        i = gr[j]
        f = gr[H + j]
        g = gr[2 * H + j]
        o = gr[3 * H + j]
        tc = fast_tanh(cr[j])
        dct = dcr[j] + dm * o * (1.0 - tc * tc)
        gr[j] = dct * g * i * (1.0 - i)
        gr[H + j] = dct * cpr[j] * f * (1.0 - f)
        gr[2 * H + j] = dct * i * (1.0 - g * g)
        gr[3 * H + j] = dm * tc * o * (1.0 - o)
        dcr[j] = dct * f


@njit(cache=True, nogil=True)
def _copy_row(src, dst):
    for j in range(src.shape[0]):
        dst[j] = src[j]


@njit(cache=True, nogil=True)
def _zero_padding(a, lengths, order, r0, r1):
    """``a[t, order[r]] = 0`` for the frames ``t >= lengths[r]`` of rows ``r0 .. r1-1``."""
    for r in range(r0, r1):
        b = order[r]
        for t in range(lengths[r], a.shape[0]):
            a[t, b, :] = 0


@njit(cache=True, nogil=True, error_model="numpy")
def _forward_recurrence(gemm, plan_rec, plan_proj, reverse, lengths, order, r0, r1, w_rec,
                        w_proj, bias, h, c, gates, cs, y, ms, rec, m_step, h_new, proj):
    """The recurrence of rows ``r0 .. r1-1`` (sorted longest first), all steps.

    ``gates [T, B, 4H]`` hold the input projections and become the activations; ``cs [T, B, H]``
    gets the cells, ``y [T, B, P]`` the outputs (zero on padding), ``ms`` the projection inputs
    ``o * tanh(c)`` (with ``proj``); ``[T, B, ...]`` arrays are indexed by the caller's batch
    index ``order[r]``. The state ``h [B, P]``, ``c [B, H]`` (row order) ends at ``h_n, c_n``.
    ``w_rec = w_hh.T [P, 4H]``, ``w_proj = w_hr.T [H, P]``; ``rec [B, 4H]``, ``m_step [B, H]``,
    ``h_new [B, P]`` are scratch.
    """
    _zero_padding(y, lengths, order, r0, r1)
    n = r1 - r0
    steps = lengths[r0] if n > 0 else 0
    for s in range(steps):
        while n > 0 and lengths[r0 + n - 1] <= s:
            n -= 1
        matmul_rows(gemm, plan_rec[0], plan_rec[1], h, w_rec, rec, r0, n)
        for r in range(r0, r0 + n):
            b = order[r]
            t = _frame(s, lengths[r], reverse)
            if proj:
                _lstm_cell(gates[t, b], rec[r], bias, c[r], cs[t, b], m_step[r])
                _copy_row(m_step[r], ms[t, b])
            else:
                _lstm_cell(gates[t, b], rec[r], bias, c[r], cs[t, b], h[r])
                _copy_row(h[r], y[t, b])
        if proj:
            matmul_rows(gemm, plan_proj[0], plan_proj[1], m_step, w_proj, h_new, r0, n)
            for r in range(r0, r0 + n):
                t = _frame(s, lengths[r], reverse)
                _copy_row(h_new[r], h[r])
                _copy_row(h_new[r], y[t, order[r]])


@njit(cache=True, nogil=True, error_model="numpy")
def _backward_recurrence(gemm, plan_rec, plan_proj, reverse, lengths, order, r0, r1, w_hh, w_hr,
                         gates, cs, c0, dy, dh, dc, dg_step, rec, dhs, dh_step, dm, proj):
    """The reverse recurrence of rows ``r0 .. r1-1``: overwrites ``gates [T, B, 4H]`` with the
    pre-activation gradients (zero on padding).

    ``dh [B, P]``, ``dc [B, H]`` (row order) come in as dL/dh_n, dL/dc_n and leave as dL/dh0,
    dL/dc0; ``dy [T, B, P]`` may be a strided view. With ``proj``, ``dhs [T, B, P]`` gets the
    total gradient of each output (for dW_hr). ``dg_step [B, 4H]`` ends holding each row's
    first-step gate gradients (zero for empty sequences); ``rec``, ``dh_step``, ``dm`` scratch.
    """
    _zero_padding(gates, lengths, order, r0, r1)
    steps = lengths[r0] if r1 > r0 else 0
    n = 0          # rows running at step s
    n_next = 0     # rows running at step s + 1
    for s in range(steps - 1, -1, -1):
        while r0 + n < r1 and lengths[r0 + n] > s:
            n += 1
        if n_next > 0:
            # dL/dh of the rows still running at s + 1 comes through their next step's gates
            matmul_rows(gemm, plan_rec[0], plan_rec[1], dg_step, w_hh, rec, r0, n_next)
            for r in range(r0, r0 + n_next):
                _copy_row(rec[r], dh[r])
        for r in range(r0, r0 + n):
            b = order[r]
            L = lengths[r]
            t = _frame(s, L, reverse)
            dyr = dy[t, b]
            if proj:
                row = dh_step[r]
                for j in range(row.shape[0]):
                    row[j] = dh[r, j] + dyr[j]
                _copy_row(row, dhs[t, b])
            else:
                # dh[r] is dead after this step (the next merge overwrites it): use it as dm
                row = dh[r]
                for j in range(row.shape[0]):
                    row[j] += dyr[j]
        if proj:
            matmul_rows(gemm, plan_proj[0], plan_proj[1], dh_step, w_hr, dm, r0, n)
        for r in range(r0, r0 + n):
            b = order[r]
            L = lengths[r]
            t = _frame(s, L, reverse)
            cpr = cs[t + 1 if reverse else t - 1, b] if s > 0 else c0[r]
            _lstm_cell_backward(gates[t, b], cs[t, b], cpr, dm[r] if proj else dh[r], dc[r])
            _copy_row(gates[t, b], dg_step[r])
        n_next = n
    if n_next > 0:
        matmul_rows(gemm, plan_rec[0], plan_rec[1], dg_step, w_hh, rec, r0, n_next)
        for r in range(r0, r0 + n_next):
            _copy_row(rec[r], dh[r])


def _contig(a, dt):
    return np.ascontiguousarray(a, dtype=dt)


MIN_ROWS_PER_THREAD = 4  # below this, splitting the batch over threads costs more than it saves
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=max(1, (os.cpu_count() or 1) - 1),
                                       thread_name_prefix="asrkit-lstm")
        return _POOL


def _thread_count(threads, B) -> int:
    n = (os.cpu_count() or 1) if threads is None else int(threads)
    return max(1, min(n, B // MIN_ROWS_PER_THREAD))


def _batch_order(lengths, groups):
    """The row order of the state: longest first, dealt round-robin into ``groups`` blocks.

    Sorted, the running sequences of a block are a prefix of it, so each step's GEMM skips the
    finished ones (as torch's PackedSequence does); dealt round-robin, the blocks (one per
    thread) get about equal work. Returns ``(order, bounds)``: row r holds the caller's
    sequence ``order[r]`` (int64), ``bounds`` the ``(r0, r1)`` row range of each block.
    """
    B = lengths.size
    if (lengths == lengths[:1]).all():
        order = np.arange(B, dtype=np.int64)
        sizes = [len(range(g, B, groups)) for g in range(groups)]
    else:
        ranked = np.argsort(-lengths, kind="stable")
        dealt = [ranked[g::groups] for g in range(groups)]
        order = np.concatenate(dealt).astype(np.int64)
        sizes = [d.size for d in dealt]
    edges = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    bounds = [(int(edges[g]), int(edges[g + 1])) for g in range(groups) if sizes[g]]
    return order, bounds


def _run_blocks(bounds, fn):
    """Run ``fn(r0, r1)`` for every row block: the first in this thread, the others in the pool."""
    futures = [_pool().submit(fn, r0, r1) for r0, r1 in bounds[1:]]
    if bounds:
        fn(*bounds[0])
    for f in futures:
        f.result()


def _plans(gemm, rows, K, N, dt, proj_shape=None):
    rec = gemm_plan(gemm, rows, K, N, dt)
    return rec, (gemm_plan(gemm, rows, *proj_shape, dt) if proj_shape else (0, 0))


def lstm_forward(x, h0, c0, w_ih, w_hh, b_ih, b_hh, lengths=None, reverse=False, w_hr=None,
                 threads=None, out=None):
    """One LSTM direction on the CPU; arguments and results as the reference twin.

    Takes ``x [T, B, I]``, ``h0 [B, P]``, ``c0 [B, H]``, ``w_ih [4H, I]``, ``w_hh [4H, P]``,
    ``b_ih, b_hh [4H]``, ``lengths int[B]`` or None, ``w_hr [P, H]`` or None. Returns
    ``y [T, B, P]``, ``h_n [B, P]``, ``c_n [B, H]`` (dtype of x) and a :class:`CpuLSTMCache`.
    ``threads`` (None: the cores) splits the batch into blocks whose recurrences run in
    parallel: the sequences of a batch are independent, so this needs no per-step sync.
    ``out``: an array ``[T, B, P]`` of x's dtype with unit stride along P (e.g. one half of a
    BLSTM's output) to write ``y`` into; it is returned as ``y``. The cache references ``x``
    and ``y``: overwrite neither before the backward.
    """
    x = np.asarray(x)
    dt = x.dtype if x.dtype in (np.float32, np.float64) else np.dtype(np.float32)
    x = _contig(x, dt)
    T, B, In = x.shape
    H = w_hh.shape[0] // 4
    proj = w_hr is not None
    P = w_hr.shape[0] if proj else H
    lengths = check_lengths(lengths, T, B)
    order, bounds = _batch_order(lengths, _thread_count(threads, B))
    lengths = np.ascontiguousarray(lengths[order])
    w_ih, w_hh = _contig(w_ih, dt), _contig(w_hh, dt)
    w_hr = _contig(w_hr, dt) if proj else None
    bias = _contig(b_ih, dt) + _contig(b_hh, dt)
    h = np.array(np.asarray(h0)[order], dtype=dt, order="C")
    c = np.array(np.asarray(c0)[order], dtype=dt, order="C")
    h0c, c0c = h.copy(), c.copy()
    if out is None:
        y = np.empty((T, B, P), dt)
    else:
        y = out
        if y.shape != (T, B, P) or y.dtype != dt or (P > 1 and y.strides[2] != dt.itemsize):
            raise ValueError(f"lstm_forward: out must be a [{T}, {B}, {P}] {dt} array with unit "
                             f"stride along its last axis; got {y.shape} {y.dtype}")

    # the input projection of every frame; each step turns its rows into gate activations
    gates = np.matmul(x.reshape(T * B, In), w_ih.T).reshape(T, B, 4 * H)
    cs = np.empty((T, B, H), dt)
    rec = np.empty((B, 4 * H), dt)
    ms = np.zeros((T, B, H) if proj else (1, 1, 1), dt)
    m_step = np.empty((B, H) if proj else (1, 1), dt)
    h_new = np.empty((B, P) if proj else (1, 1), dt)
    w_rec = np.ascontiguousarray(w_hh.T)
    w_proj = np.ascontiguousarray(w_hr.T) if proj else np.zeros((1, 1), dt)
    gemm = gemm_function(dt)
    rows = max((r1 - r0 for r0, r1 in bounds), default=1)
    plan_rec, plan_proj = _plans(gemm, rows, P, 4 * H, dt, (H, P) if proj else None)

    def recurrence(r0, r1):
        _forward_recurrence(gemm, plan_rec, plan_proj, bool(reverse), lengths, order, r0, r1,
                            w_rec, w_proj, bias, h, c, gates, cs, y, ms, rec, m_step, h_new,
                            proj)

    _run_blocks(bounds, recurrence)
    cache = CpuLSTMCache(x, gates, cs, y, ms if proj else None, h0c, c0c, lengths, order,
                         bounds, bool(reverse), w_ih, w_hh, w_hr)
    inv = np.argsort(order)
    return y, h[inv], c[inv], cache


def _dy_view(dy, dt, shape):
    """``dy`` as an array the kernel reads in place (unit stride along the features)."""
    dy = np.asarray(dy)
    if dy.shape != shape:
        raise ValueError(f"lstm_backward: dy has shape {dy.shape}, expected {shape}")
    if dy.dtype != dt or (shape[2] > 1 and dy.strides[2] != dt.itemsize):
        dy = _contig(dy, dt)
    return dy


def lstm_backward(dy, dh_n, dc_n, cache: CpuLSTMCache):
    """Gradients of one LSTM direction; arguments and results as the reference twin.

    Takes ``dy [T, B, P]`` (may be a strided view, e.g. half of a BLSTM's gradient),
    ``dh_n [B, P]``, ``dc_n [B, H]`` (None for zero). Returns ``(dx, dh0, dc0, dw_ih, dw_hh,
    db_ih, db_hh)``, plus ``dw_hr`` with a projection. Consumes the cache (it writes the gate
    gradients over the saved activations); a second call on it raises ValueError.
    """
    if cache.consumed:
        raise ValueError("lstm_backward: this cache was already used by a backward, which "
                         "overwrote its gate activations; run lstm_forward again")
    x, gates, lengths, reverse, order = cache.x, cache.gates, cache.lengths, cache.reverse, \
        cache.order
    T, B, In = x.shape
    H = gates.shape[2] // 4
    P = cache.y.shape[2]
    dt = x.dtype
    proj = cache.w_hr is not None
    dy = np.zeros((T, B, P), dt) if dy is None else _dy_view(dy, dt, (T, B, P))
    dh = np.zeros((B, P), dt) if dh_n is None else np.array(np.asarray(dh_n)[order], dt, order="C")
    dc = np.zeros((B, H), dt) if dc_n is None else np.array(np.asarray(dc_n)[order], dt, order="C")
    dg_step = np.zeros((B, 4 * H), dt)
    rec = np.empty((B, P), dt)
    dhs = np.zeros((T, B, P) if proj else (1, 1, 1), dt)
    dh_step = np.empty((B, P) if proj else (1, 1), dt)
    dm = np.empty((B, H) if proj else (1, 1), dt)
    w_hr = cache.w_hr if proj else np.zeros((1, 1), dt)
    gemm = gemm_function(dt)
    rows = max((r1 - r0 for r0, r1 in cache.bounds), default=1)
    plan_rec, plan_proj = _plans(gemm, rows, 4 * H, P, dt, (P, H) if proj else None)
    cache.consumed = True

    def recurrence(r0, r1):
        _backward_recurrence(gemm, plan_rec, plan_proj, reverse, lengths, order, r0, r1,
                             cache.w_hh, w_hr, gates, cache.c, cache.c0, dy, dh, dc, dg_step,
                             rec, dhs, dh_step, dm, proj)

    _run_blocks(cache.bounds, recurrence)

    dg2 = gates.reshape(T * B, 4 * H)  # now the gate gradients, zero on padding
    dx = np.matmul(dg2, cache.w_ih).reshape(T, B, In)
    dw_ih = np.matmul(dg2.T, x.reshape(T * B, In))
    # h_prev of frame t is the output of the neighbouring frame (zero on padding), or h0 for
    # the first step, whose gate gradients are still in dg_step (row order, like cache.h0).
    n = max(T - 1, 0) * B
    hs = cache.y
    if reverse:
        dw_hh = np.matmul(dg2[:n].T, hs[1:].reshape(n, P))
    else:
        dw_hh = np.matmul(dg2[B:].T, hs[:-1].reshape(n, P))
    dw_hh += np.matmul(dg_step.T, cache.h0)
    db = dg2.sum(axis=0)
    inv = np.argsort(order)
    out = (dx, dh[inv], dc[inv], dw_ih, dw_hh, db, db.copy())
    if proj:
        out = (*out, np.matmul(dhs.reshape(T * B, P).T, cache.m.reshape(T * B, H)))
    return out


def join_gradients(gf, gb):
    """BLSTM gradients: ``dx`` summed over the directions (in place into the forward's, which
    this module allocated), every other gradient stacked."""
    dx = gf[0]
    dx += gb[0]
    return (dx, *(np.stack([a, b]) for a, b in zip(gf[1:], gb[1:])))
