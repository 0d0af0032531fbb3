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
the GEMMs). Everything ``[T, B, ...]`` stays in the caller's batch order (only the per-step state
rows are sorted), so nothing is gathered or scattered. Float32 tanh/sigmoid use a vectorisable
rational approximation (error < 4e-7). Kernels are ``nogil``.

Threads (``threads``, default the cores), two ways (``_split_mode``):

* ``units`` (no projection, the default): each thread owns a range of hidden units of every
  sequence: its gate columns of ``w_hh`` (``[H, 4H/n]``, which stays in its core's L2 cache,
  where the whole ``[320, 1280]`` float32 weight, 1.6 MB, does not), its part of the cell
  update, and after the step a barrier (``_sync.barrier``: atomics, spin then yield) before
  anyone reads the new ``h``. The threads are a persistent gang (``_sync.Gang``) started once
  per call, each running the whole recurrence in one njit call. Every BLAS call in them is
  single-threaded (``openblas_set_num_threads_local``): the input projection and ``dx`` are
  split by rows, ``dW_ih``, ``dW_hh``, ``db`` by gate rows, so OpenBLAS's own worker threads,
  which spin for a while after each call and stole the recurrence's second core, never start.
* ``batch`` (with a projection, ``ASRKIT_LSTM_SPLIT=batch``, or a load average above the
  cores): the batch is dealt into one block per thread and the blocks' recurrences run with no
  per-step synchronisation; the big GEMMs use numpy (and BLAS's own threads). Where threads are
  not all running at once, a barrier per step makes every step wait for the slowest.

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

import numpy as np
from numba import njit, types
from numba.extending import overload

from asrkit.kernels.cpu._gemm import (
    NO_TRANS,
    TRANS,
    gemm_at,
    gemm_function,
    gemm_plan,
    matmul_rows,
    matmul_rows_into,
    single_threaded_blas,
    worker_pool,
)
from asrkit.kernels.cpu._sync import Gang, abort, barrier, cpu_count, new_barrier, yield_function
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
    split: str = "batch"    # how threads share the work: "units" or "batch" (see lstm_forward)
    threads: int | None = None  # the thread count asked of the forward, for the backward


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
def _lstm_cell(gr, rr, bias, cr, csr, hr, yr, j0, hk):
    """One sequence's step for the hidden units ``j0 .. j0+hk-1`` on row views: ``gr [4H]``
    holds the input projection and becomes the gate activations of ``gr + rr + bias`` (gate q
    of unit j at ``q*H + j``); ``rr``, ``bias [4*hk]`` hold the recurrent part and the bias of
    these units only (gate q of unit ``j0 + jj`` at ``q*hk + jj``; all units: ``j0 = 0,
    hk = H``); the cell ``cr [H]`` (and its copy ``csr``) is updated in place and ``o * tanh(c)``
    written to ``hr`` and ``yr`` (unit j at index j).

    A separate function over 1-D rows so that LLVM sees few arrays and vectorises the loop
    (indexing the 3-D arrays directly in one big kernel ran ~3x slower).
    """
    H = cr.shape[0]
    for jj in range(hk):
        j = j0 + jj
        i = fast_sigmoid(gr[j] + rr[jj] + bias[jj])
        f = fast_sigmoid(gr[H + j] + rr[hk + jj] + bias[hk + jj])
        g = fast_tanh(gr[2 * H + j] + rr[2 * hk + jj] + bias[2 * hk + jj])
        o = fast_sigmoid(gr[3 * H + j] + rr[3 * hk + jj] + bias[3 * hk + jj])
        gr[j] = i
        gr[H + j] = f
        gr[2 * H + j] = g
        gr[3 * H + j] = o
        cn = f * cr[j] + i * g
        cr[j] = cn
        csr[j] = cn
        hn = o * fast_tanh(cn)
        hr[j] = hn
        yr[j] = hn


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def _lstm_cell_backward(gr, cr, cpr, dmr, dcr, dgr, j0, hk):
    """One sequence's step backward for the units ``j0 .. j0+hk-1`` on row views: from the
    gates ``gr [4H]``, the cell ``cr``, the previous cell ``cpr`` and ``dm = d(o * tanh(c))``
    overwrites ``gr`` with the pre-activation gradients (also written to ``dgr [4H]``) and turns
    ``dcr`` (dL/dc) into dL/dc_prev. tanh(c) is recomputed (bit-identical to the forward's)."""
    H = dcr.shape[0]
    for jj in range(hk):
        j = j0 + jj
        dm = dmr[j]
        i = gr[j]
        f = gr[H + j]
        g = gr[2 * H + j]
        o = gr[3 * H + j]
        tc = fast_tanh(cr[j])
        dct = dcr[j] + dm * o * (1.0 - tc * tc)
        di = dct * g * i * (1.0 - i)
        df = dct * cpr[j] * f * (1.0 - f)
        dg = dct * i * (1.0 - g * g)
        do = dm * tc * o * (1.0 - o)
        gr[j] = di
        gr[H + j] = df
        gr[2 * H + j] = dg
        gr[3 * H + j] = do
        dgr[j] = di
        dgr[H + j] = df
        dgr[2 * H + j] = dg
        dgr[3 * H + j] = do
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
    H = c.shape[1]
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
                _lstm_cell(gates[t, b], rec[r], bias, c[r], cs[t, b], m_step[r], ms[t, b], 0,
                           H)
            else:
                _lstm_cell(gates[t, b], rec[r], bias, c[r], cs[t, b], h[r], y[t, b], 0, H)
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
            _lstm_cell_backward(gates[t, b], cs[t, b], cpr, dm[r] if proj else dh[r], dc[r],
                                dg_step[r], 0, dc.shape[1])
        n_next = n
    if n_next > 0:
        matmul_rows(gemm, plan_rec[0], plan_rec[1], dg_step, w_hh, rec, r0, n_next)
        for r in range(r0, r0 + n_next):
            _copy_row(rec[r], dh[r])


@njit(cache=True, nogil=True, error_model="numpy")
def _forward_units(gemm, plan, reverse, lengths, order, j0, hk, w_rec, bias, hbuf, c, gates, cs,
                   y, rec, sync, nthreads, yield_fn, zero_padding):
    """One thread's share of the recurrence of all rows (sorted longest first): the hidden units
    ``j0 .. j0+hk-1``, every step, meeting the other ``nthreads - 1`` threads at a barrier after
    each step.

    Per step: ``rec = h @ w_rec`` over all of the previous ``h`` (``hbuf[cur]``, written by every
    thread), the cell update of this thread's units into ``hbuf[1 - cur]``, ``c``, ``cs``, ``y``
    and ``gates`` (its columns), then the barrier (all of the new ``h`` written, all of the old
    read); a first barrier waits for the input projection in ``gates``. ``w_rec [H, 4*hk]`` and
    ``bias [4*hk]`` hold this thread's gate columns (gate q of unit ``j0 + jj`` at
    ``q*hk + jj``); ``hbuf [2, B, H]`` starts with h0 in ``hbuf[0]``; ``rec [B, 4*hk]`` is
    scratch. The thread with ``zero_padding`` zeroes ``y`` on padded frames.
    """
    B = lengths.size
    if zero_padding:
        _zero_padding(y, lengths, order, 0, B)
    if not barrier(sync, nthreads, yield_fn):  # every thread's rows of the input projection
        return
    steps = lengths[0] if B > 0 else 0
    n = B
    cur = 0
    for s in range(steps):
        while n > 0 and lengths[n - 1] <= s:
            n -= 1
        matmul_rows(gemm, plan[0], plan[1], hbuf[cur], w_rec, rec, 0, n)
        nxt = 1 - cur
        hn = hbuf[nxt]
        for r in range(n):
            b = order[r]
            t = _frame(s, lengths[r], reverse)
            _lstm_cell(gates[t, b], rec[r], bias, c[r], cs[t, b], hn[r], y[t, b], j0, hk)
        if not barrier(sync, nthreads, yield_fn):
            return
        cur = nxt


@njit(cache=True, nogil=True, error_model="numpy")
def _backward_units(gemm, plan, reverse, lengths, order, j0, hk, w_hh, gates, cs, c0, dy, dh, dc,
                    dgbuf, sync, nthreads, yield_fn, zero_padding):
    """One thread's share of the reverse recurrence: the units ``j0 .. j0+hk-1`` of every row,
    meeting the other threads at a barrier after each step.

    Per step: ``dh[:, units] = dg_next @ w_hh`` (``w_hh [4H, hk]``: this thread's columns of the
    layer's ``w_hh``; ``dg_next = dgbuf[cur] [B, 4H]``, the gate gradients of the next step, all
    columns, written by every thread), ``dm = dh + dy`` and the cell backward of these units,
    which writes the gate gradients over ``gates`` and into ``dgbuf[1 - cur]``; then the
    barrier. ``dh [B, H]`` and ``dc [B, H]`` come in as dL/dh_n, dL/dc_n and leave as dL/dh0,
    dL/dc0 (this thread's columns). After the last step a final barrier: every gate gradient
    is written. Returns the index of ``dgbuf`` holding each row's first-step gate gradients
    (zero for empty rows), or -1 if another thread aborted.
    """
    B = lengths.size
    if zero_padding:
        _zero_padding(gates, lengths, order, 0, B)
    steps = lengths[0] if B > 0 else 0
    n = 0          # rows running at step s
    n_next = 0     # rows running at step s + 1
    cur = 0
    for s in range(steps - 1, -1, -1):
        while n < B and lengths[n] > s:
            n += 1
        if n_next > 0:
            # dL/dh of the rows still running at s + 1 comes through their next step's gates
            matmul_rows_into(gemm, plan[0], plan[1], dgbuf[cur], w_hh, dh, 0, n_next, j0)
        nxt = 1 - cur
        dgn = dgbuf[nxt]
        for r in range(n):
            b = order[r]
            L = lengths[r]
            t = _frame(s, L, reverse)
            dyr = dy[t, b]
            dhr = dh[r]
            for jj in range(hk):
                dhr[j0 + jj] += dyr[j0 + jj]
            cpr = cs[t + 1 if reverse else t - 1, b] if s > 0 else c0[r]
            _lstm_cell_backward(gates[t, b], cs[t, b], cpr, dhr, dc[r], dgn[r], j0, hk)
        if not barrier(sync, nthreads, yield_fn):
            return -1
        cur = nxt
        n_next = n
    if n_next > 0:
        matmul_rows_into(gemm, plan[0], plan[1], dgbuf[cur], w_hh, dh, 0, n_next, j0)
    if not barrier(sync, nthreads, yield_fn):
        return -1
    return cur


def _contig(a, dt):
    return np.ascontiguousarray(a, dtype=dt)


MIN_ROWS_PER_THREAD = 4  # below this, splitting the batch over threads costs more than it saves


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
    futures = [worker_pool().submit(fn, r0, r1) for r0, r1 in bounds[1:]]
    if bounds:
        fn(*bounds[0])
    for f in futures:
        f.result()


def _plans(gemm, rows, K, N, dt, proj_shape=None):
    rec = gemm_plan(gemm, rows, K, N, dt)
    return rec, (gemm_plan(gemm, rows, *proj_shape, dt) if proj_shape else (0, 0))


MIN_UNITS_PER_THREAD = 32  # hidden units per thread of the split recurrence
_GANG = Gang(cpu_count(), "asrkit-lstm-gang")


def _split_mode(proj: bool, threads: int) -> str:
    """How threads share a layer: ``"units"`` (each owns some hidden units of every sequence and
    they meet at a barrier after every step) or ``"batch"`` (each owns some sequences and runs
    their whole recurrence alone).

    ``ASRKIT_LSTM_SPLIT=units|batch`` decides when set. Otherwise a projection always splits
    the batch (its second per-step GEMM would need a second barrier per step), and so does a
    machine whose load average exceeds its cores: there the threads are not all running at
    once, and a thread waiting at a barrier for a descheduled partner loses the step (measured
    at load 15 on 2 cores: units 2-3x slower than batch at 2 threads, equal at 1 thread).
    """
    mode = os.environ.get("ASRKIT_LSTM_SPLIT", "").strip().lower()
    if mode in ("units", "batch"):
        return "batch" if proj else mode
    if proj:
        return "batch"
    if threads > 1:
        try:
            if os.getloadavg()[0] > cpu_count() + 0.5:
                return "batch"
        except OSError:
            pass
    return "units"


def _unit_threads(threads, H) -> int:
    n = cpu_count() if threads is None else int(threads)
    return max(1, min(n, H // MIN_UNITS_PER_THREAD))


def _unit_ranges(H: int, n: int) -> list[tuple[int, int]]:
    """``(j0, hk)`` for n threads: contiguous unit ranges, multiples of 16 (one AVX-512 vector of
    float32) except the last."""
    per = -(-H // n)
    per = min(H, -(-per // 16) * 16)
    out, j0 = [], 0
    for _ in range(n):
        hk = max(0, min(per, H - j0))
        out.append((j0, hk))
        j0 += hk
    return out


def _gate_columns(H: int, j0: int, hk: int) -> np.ndarray:
    """The columns of a ``[*, 4H]`` gate array that hold units ``j0 .. j0+hk-1``, gate by gate."""
    return np.concatenate([np.arange(q * H + j0, q * H + j0 + hk) for q in range(4)])


def _flat(a):
    """``(flat, ld)``: a 1-D view from ``a[0, 0, 0]`` over the memory of a ``[T, B, N]`` array
    whose rows ``(t, b)`` are evenly spaced (unit stride along N), and the row spacing in
    elements; ``(None, 0)`` if they are not."""
    T, B, N = a.shape
    isz = a.itemsize
    if a.size == 0:
        return np.zeros(1, a.dtype), max(N, 1)
    if N > 1 and a.strides[2] != isz:
        return None, 0
    if B > 1:
        ld = a.strides[1]
        if T > 1 and a.strides[0] != B * ld:
            return None, 0
    else:
        ld = a.strides[0] if T > 1 else N * isz
    if ld % isz or ld < N * isz:
        return None, 0
    ld //= isz
    return np.lib.stride_tricks.as_strided(a, shape=((T * B - 1) * ld + N,),
                                           strides=(isz,)), ld


def _in_gang(nthreads, sync, fn):
    """Run ``fn(k, n)`` on the gang's threads, each with single-threaded BLAS calls
    (``_gemm.single_threaded_blas``); a thread that fails releases the others from the
    barrier ``sync``."""
    def work(k, n):
        try:
            fn(k, n)
        except BaseException:
            abort(sync)
            raise

    with single_threaded_blas():
        _GANG.run(nthreads, work)


def _forward_by_units(x, w_ih, w_hh, bias, lengths, order, h, c, y, reverse, threads):
    """The forward of a layer without projection, split by hidden units over the gang's threads
    (see the module docstring). Rows in ``order`` (sorted longest first); ``h``, ``c`` [B, H]
    hold h0, c0 and ``c`` ends as c_n. Returns ``(gates, cs)``."""
    T, B, In = x.shape
    H = c.shape[1]
    dt = x.dtype
    gates = np.empty((T, B, 4 * H), dt)
    cs = np.empty((T, B, H), dt)
    hbuf = np.empty((2, B, H), dt)
    hbuf[0] = h
    xf, gf, wf = x.reshape(-1), gates.reshape(-1), w_ih.reshape(-1)
    gemm = gemm_function(dt)
    sync = new_barrier()
    yield_fn = yield_function()

    def work(k, n):
        j0, hk = _unit_ranges(H, n)[k]
        cols = _gate_columns(H, j0, hk)
        w_rec = np.ascontiguousarray(w_hh[cols].T)          # [H, 4*hk]
        bias_k = np.ascontiguousarray(bias[cols])
        rec = np.empty((B, 4 * hk), dt)
        plan = gemm_plan(gemm, B, H, 4 * hk, dt)
        r0, r1 = (T * B * k) // n, (T * B * (k + 1)) // n
        # the input projection of a range of rows (frames x sequences), all gate columns;
        # _forward_units starts at a barrier, after which every row is there
        gemm_at(gemm, NO_TRANS, TRANS, r1 - r0, 4 * H, In, xf, r0 * In, In, wf, 0, In, 0.0,
                gf, r0 * 4 * H, 4 * H)
        _forward_units(gemm, plan, reverse, lengths, order, j0, hk, w_rec, bias_k, hbuf, c,
                       gates, cs, y, rec, sync, n, yield_fn, k == 0)

    _in_gang(_unit_threads(threads, H), sync, work)
    return gates, cs


def lstm_forward(x, h0, c0, w_ih, w_hh, b_ih, b_hh, lengths=None, reverse=False, w_hr=None,
                 threads=None, out=None):
    """One LSTM direction on the CPU; arguments and results as the reference twin.

    Takes ``x [T, B, I]``, ``h0 [B, P]``, ``c0 [B, H]``, ``w_ih [4H, I]``, ``w_hh [4H, P]``,
    ``b_ih, b_hh [4H]``, ``lengths int[B]`` or None, ``w_hr [P, H]`` or None. Returns
    ``y [T, B, P]``, ``h_n [B, P]``, ``c_n [B, H]`` (dtype of x) and a :class:`CpuLSTMCache`.
    ``threads`` (None: the cores) is the number of threads: without a projection they split
    the hidden units of every step (one barrier per step), with one they split the batch into
    blocks whose recurrences run independently. ``out``: an array ``[T, B, P]`` of x's dtype
    with unit stride along P (e.g. one half of a BLSTM's output) to write ``y`` into; it is
    returned as ``y``. The cache references ``x`` and ``y``: overwrite neither before the
    backward.
    """
    x = np.asarray(x)
    dt = x.dtype if x.dtype in (np.float32, np.float64) else np.dtype(np.float32)
    x = _contig(x, dt)
    T, B, In = x.shape
    H = w_hh.shape[0] // 4
    proj = w_hr is not None
    P = w_hr.shape[0] if proj else H
    lengths = check_lengths(lengths, T, B)
    split = _split_mode(proj, _unit_threads(threads, H))
    groups = 1 if split == "units" else _thread_count(threads, B)
    order, bounds = _batch_order(lengths, groups)
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

    if split == "units":
        gates, cs = _forward_by_units(x, w_ih, w_hh, bias, lengths, order, h, c, y,
                                      bool(reverse), threads)
        # h_n: each row's output at its last step (h0 for an empty sequence)
        for r in np.flatnonzero(lengths > 0):
            h[r] = y[0 if reverse else lengths[r] - 1, order[r]]
        cache = CpuLSTMCache(x, gates, cs, y, None, h0c, c0c, lengths, order, bounds,
                             bool(reverse), w_ih, w_hh, None, split=split, threads=threads)
        inv = np.argsort(order)
        return y, h[inv], c[inv], cache

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
                         bounds, bool(reverse), w_ih, w_hh, w_hr, split=split, threads=threads)
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


def _backward_by_units(dy, dh, dc, cache: CpuLSTMCache):
    """The backward of a layer without projection, split by hidden units over the gang's
    threads: the reverse recurrence, then each thread's share of the weight gradients (its gate
    rows of dW_ih, dW_hh and db) and of dx (a range of its rows). Returns ``(dx, dw_ih, dw_hh,
    db)``; ``dh``, ``dc`` [B, H] (row order) end as dL/dh0, dL/dc0."""
    x, gates, lengths, order = cache.x, cache.gates, cache.lengths, cache.order
    T, B, In = x.shape
    H = cache.c.shape[2]
    dt = x.dtype
    TB = T * B
    dgbuf = np.zeros((2, B, 4 * H), dt)
    dx = np.empty((T, B, In), dt)
    dw_ih = np.empty((4 * H, In), dt)
    dw_hh = np.empty((4 * H, H), dt)
    db = np.empty(4 * H, dt)
    y = cache.y
    yf, ldy = _flat(y)
    if yf is None:
        y = np.ascontiguousarray(y)
        yf, ldy = y.reshape(-1), H
    xf, gf, wf = x.reshape(-1), gates.reshape(-1), cache.w_ih.reshape(-1)
    h0f = cache.h0.reshape(-1)
    g2 = gates.reshape(TB, 4 * H)
    dxf, dwif, dwhf = dx.reshape(-1), dw_ih.reshape(-1), dw_hh.reshape(-1)
    gemm = gemm_function(dt)
    sync = new_barrier()
    yield_fn = yield_function()
    reverse = cache.reverse

    def work(k, n):
        j0, hk = _unit_ranges(H, n)[k]
        w_hh_k = np.ascontiguousarray(cache.w_hh[:, j0:j0 + hk])   # [4H, hk]
        plan = gemm_plan(gemm, B, 4 * H, hk, dt)
        first = _backward_units(gemm, plan, reverse, lengths, order, j0, hk, w_hh_k, gates,
                                cache.c, cache.c0, dy, dh, dc, dgbuf, sync, n, yield_fn,
                                k == 0)
        if first < 0:
            return
        ff = dgbuf[first].reshape(-1)
        # h_prev of frame t is the output of the neighbouring frame (zero on padding), or h0
        # for the first step, whose gate gradients are in dgbuf[first] (row order, as h0).
        g_off, y_off = (0, B * ldy) if reverse else (B * 4 * H, 0)
        for q in range(4):  # this thread's gate rows of the weight gradients
            col = q * H + j0
            gemm_at(gemm, TRANS, NO_TRANS, hk, In, TB, gf, col, 4 * H, xf, 0, In, 0.0, dwif,
                    col * In, In)
            gemm_at(gemm, TRANS, NO_TRANS, hk, H, TB - B, gf, g_off + col, 4 * H, yf, y_off,
                    ldy, 0.0, dwhf, col * H, H)
            gemm_at(gemm, TRANS, NO_TRANS, hk, H, B, ff, col, 4 * H, h0f, 0, H, 1.0, dwhf,
                    col * H, H)
            np.sum(g2[:, col:col + hk], axis=0, out=db[col:col + hk])
        r0, r1 = (TB * k) // n, (TB * (k + 1)) // n   # and its rows of dx
        gemm_at(gemm, NO_TRANS, NO_TRANS, r1 - r0, In, 4 * H, gf, r0 * 4 * H, 4 * H, wf, 0, In,
                0.0, dxf, r0 * In, In)

    _in_gang(_unit_threads(cache.threads, H), sync, work)
    return dx, dw_ih, dw_hh, db


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
    inv = np.argsort(order)
    if cache.split == "units":
        cache.consumed = True
        dx, dw_ih, dw_hh, db = _backward_by_units(dy, dh, dc, cache)
        return dx, dh[inv], dc[inv], dw_ih, dw_hh, db, db.copy()

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
