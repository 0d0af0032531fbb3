"""Fused LSTM on the CPU: BLAS GEMMs (numpy matmul, which releases the GIL) + njit step kernels.

Same maths and semantics as :mod:`asrkit.kernels.reference.lstm`. The work is laid out as:

* forward: one GEMM for the input projection of every frame (``x [T*B, I] @ w_ih.T``), then per
  step one GEMM ``h @ w_hh.T`` and one fused njit kernel (bias, gate nonlinearities, cell update,
  output; with a projection, a second GEMM ``m @ w_hr.T`` and a tiny copy kernel);
* backward: per step one GEMM ``dgates @ w_hh`` and one fused kernel, in reverse; the weight
  gradients are GEMMs over all frames at the end (``dW_ih = dgates^T x``, ``dW_hh = dgates^T
  h_prev`` with ``h_prev`` a shifted view of the saved outputs).

Speed: the per-step GEMMs are small (``[B, K] @ [K, N]`` with B ~ 16) and run through
:class:`RecurrentGemm`, which avoids the BLAS re-packing the weight on every step. The batch is
sorted longest first (finished sequences drop out of the GEMMs) and dealt into one block per
thread; sequences are independent, so the blocks' recurrences run in parallel with no per-step
synchronisation, and the big GEMMs use BLAS's own threads. The gate activations, the cell and
tanh(cell) are saved by the forward, not recomputed; float32 tanh/sigmoid use a vectorisable
rational approximation (error < 4e-7). Kernels are ``nogil``.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit, types
from numba.extending import overload

from asrkit.kernels.reference.lstm import check_lengths, join_directions, join_gradients

__all__ = ["lstm_forward", "lstm_backward", "join_directions", "join_gradients"]


@dataclasses.dataclass
class CpuLSTMCache:
    """What :func:`lstm_backward` needs; arrays indexed by frame ``t``."""

    x: np.ndarray          # [T, B, I] the input (referenced, not copied)
    gates: np.ndarray      # [T, B, 4H] i, f, g, o activations
    c: np.ndarray          # [T, B, H] cell after the frame
    tc: np.ndarray         # [T, B, H] tanh of it
    hs: np.ndarray         # [T, B, P] outputs (a private copy; zero on padding)
    m: np.ndarray | None   # [T, B, H] o * tanh(c), only with a projection
    h0: np.ndarray         # [B, P]
    c0: np.ndarray         # [B, H]
    lengths: np.ndarray    # int64 [B], sorted longest first
    order: np.ndarray | None  # internal row r is the caller's sequence order[r]
    bounds: list           # (b0, b1) row blocks, one per thread, each sorted longest first
    reverse: bool
    w_ih: np.ndarray
    w_hh: np.ndarray
    w_hr: np.ndarray | None
    device: str = "cpu"


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


@njit(cache=True, nogil=True, error_model="numpy")
def _lstm_cell(gr, rr, bias, cr, csr, tcr, out):
    """One sequence's step on row views: ``gr [4H]`` holds the input projection and becomes
    the gate activations of ``gr + rr + bias``; the cell ``cr`` (and its copy ``csr``) is
    updated in place, ``tcr = tanh(c)``, ``out = o * tanh(c)``.

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
        tc = fast_tanh(cn)
        cr[j] = cn
        csr[j] = cn
        tcr[j] = tc
        out[j] = o * tc


@njit(cache=True, nogil=True, error_model="numpy")
def _forward_step(s, reverse, lengths, rec, bias, h, c, gates, cs, tcs, hs, y, m_step, ms, proj,
                  b0, b1):
    """Step ``s`` for every active sequence: ``gates[t]`` (holding the input projection) become
    the activations of ``gates[t] + rec + bias``; the cell is updated.

    Without a projection writes the new state to ``h``, ``y[t]`` and ``hs[t]``; with one writes
    ``m = o * tanh(c)`` to ``m_step`` (zero rows for inactive sequences) and ``ms[t]``.
    Only rows ``b0 .. b1-1`` (one thread's share of the batch).
    """
    for b in range(b0, b1):
        if s >= lengths[b]:
            if proj:
                m_step[b, :] = 0.0
            continue
        t = _frame(s, lengths[b], reverse)
        out = m_step[b] if proj else h[b]
        _lstm_cell(gates[t, b], rec[b], bias, c[b], cs[t, b], tcs[t, b], out)
        if proj:
            ms[t, b, :] = out
        else:
            y[t, b, :] = out
            hs[t, b, :] = out


@njit(cache=True, nogil=True)
def _projection_step(s, reverse, lengths, h_new, h, hs, y, b0, b1):
    """Copy the projected state ``h_new [B, P]`` of the active sequences to ``h``, ``y[t]``."""
    P = h.shape[1]
    for b in range(b0, b1):
        if s < lengths[b]:
            t = _frame(s, lengths[b], reverse)
            for j in range(P):
                v = h_new[b, j]
                h[b, j] = v
                y[t, b, j] = v
                hs[t, b, j] = v


@njit(cache=True, nogil=True)
def _merge_carry(s, lengths, rec, dh, b0, b1):
    """``dh[b] = rec[b]`` for sequences that were active at step ``s + 1``."""
    P = dh.shape[1]
    for b in range(b0, b1):
        if s + 1 < lengths[b]:
            for j in range(P):
                dh[b, j] = rec[b, j]


@njit(cache=True, nogil=True)
def _total_dh(s, reverse, lengths, rec, have_rec, dy, dh, dh_step, dhs, b0, b1):
    """Merge the recurrent gradient and add ``dy[t]``: ``dh_step [B, P]`` (0 where inactive)."""
    P = dh.shape[1]
    if have_rec:
        _merge_carry(s, lengths, rec, dh, b0, b1)
    for b in range(b0, b1):
        if s >= lengths[b]:
            dh_step[b, :] = 0.0
            continue
        t = _frame(s, lengths[b], reverse)
        for j in range(P):
            v = dh[b, j] + dy[t, b, j]
            dh_step[b, j] = v
            dhs[t, b, j] = v


@njit(cache=True, nogil=True, error_model="numpy")
def _lstm_cell_backward(gr, tcr, cpr, dmr, dcr, dgr):
    """One sequence's step backward on row views: from the gates ``gr [4H]``, ``tanh(c)``, the
    previous cell ``cpr`` and ``dm = d(o * tanh(c))`` writes the pre-activation gradients
    ``dgr [4H]`` and turns ``dcr`` (dL/dc) into dL/dc_prev."""
    H = dcr.shape[0]
    for j in range(H):
        dm = dmr[j]
        i = gr[j]
        f = gr[H + j]
        g = gr[2 * H + j]
        o = gr[3 * H + j]
        tc = tcr[j]
        dct = dcr[j] + dm * o * (1.0 - tc * tc)
        dgr[j] = dct * g * i * (1.0 - i)
        dgr[H + j] = dct * cpr[j] * f * (1.0 - f)
        dgr[2 * H + j] = dct * i * (1.0 - g * g)
        dgr[3 * H + j] = dm * tc * o * (1.0 - o)
        dcr[j] = dct * f


@njit(cache=True, nogil=True, error_model="numpy")
def _backward_step(s, reverse, lengths, rec, have_rec, dm_src, dy, dh, dc, gates, cs, tcs, c0,
                   dg_step, dgates, proj, b0, b1):
    """Gate gradients of step ``s``: ``dgates[t]`` and ``dg_step [B, 4H]``; updates ``dc``.

    Without a projection ``dm`` is the merged carry ``dh`` plus ``dy[t]`` (computed here); with
    one it is ``dm_src [B, H]`` (= dh_total @ w_hr, computed by the caller).
    """
    if have_rec and not proj:
        _merge_carry(s, lengths, rec, dh, b0, b1)
    for b in range(b0, b1):
        L = lengths[b]
        if s >= L:
            continue
        t = _frame(s, L, reverse)
        if proj:
            dmr = dm_src[b]
        else:
            # dh[b] is dead after this step (the next merge overwrites it): use it as dm
            dmr = dh[b]
            dmr += dy[t, b]
        cpr = cs[t + 1 if reverse else t - 1, b] if s > 0 else c0[b]
        _lstm_cell_backward(gates[t, b], tcs[t, b], cpr, dmr, dc[b], dgates[t, b])
        dg_step[b, :] = dgates[t, b]


def _contig(a, dt):
    return np.ascontiguousarray(a, dtype=dt)


# OpenBLAS (numpy's BLAS) runs GEMMs with m*n*k <= 100^3 through unpacked "small matrix"
# kernels; bigger ones pack the weight matrix again on every call, which for the per-step
# [B, K] @ [K, N] products of an LSTM (B ~ 16) costs more than the multiply itself.
SMALL_GEMM_MNK = 1_000_000
_STRATEGY: dict = {}  # (rows, K, N, dtype) -> True when column blocks were measured faster
_STRATEGY_LOCK = threading.Lock()


class RecurrentGemm:
    """``out[:n] = a[:n] @ w`` repeated every step with one weight ``w [K, N]``.

    The weight is split once into contiguous column blocks small enough for the BLAS's
    unpacked small-matrix path, and each step runs one GEMM per block; whether that beats one
    whole GEMM depends on the BLAS and the CPU, so the first use of a shape times both (a few
    milliseconds, once per process) and keeps the faster, like cuDNN's benchmark mode.
    """

    def __init__(self, w: np.ndarray, rows: int):
        self.w = np.ascontiguousarray(w)
        K, N = self.w.shape
        width = max(16, SMALL_GEMM_MNK // max(rows * K, 1) // 16 * 16)
        self.blocks = [(j, np.ascontiguousarray(self.w[:, j:j + width]))
                       for j in range(0, N, width)] if width < N else []
        key = (rows, K, N, self.w.dtype.str)
        with _STRATEGY_LOCK:
            choice = _STRATEGY.get(key)
        if choice is None:
            choice = bool(self.blocks) and self._blocks_faster(rows)
            with _STRATEGY_LOCK:
                _STRATEGY[key] = choice
        self.use_blocks = choice

    def _blocks_faster(self, rows: int) -> bool:
        a = np.zeros((rows, self.w.shape[0]), self.w.dtype)
        out = np.empty((rows, self.w.shape[1]), self.w.dtype)
        best = {}
        for use_blocks in (False, True, False, True, False, True):
            self.use_blocks = use_blocks
            t0 = time.perf_counter()
            for _ in range(8):
                self(a, out, rows)
            dt = time.perf_counter() - t0
            best[use_blocks] = min(dt, best.get(use_blocks, dt))
        return best[True] < best[False]

    def __call__(self, a, out, n):
        """``out[:n] = a[:n] @ w``."""
        if self.use_blocks:
            for j, wb in self.blocks:
                np.matmul(a[:n], wb, out=out[:n, j:j + wb.shape[1]])
        else:
            np.matmul(a[:n], self.w, out=out[:n])


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
    """The batch order used inside: longest first, dealt round-robin into ``groups`` blocks.

    Sorted, the running sequences of a block are a prefix of it, so each step's GEMM skips the
    finished ones (as torch's PackedSequence does); dealt round-robin, the blocks (one per
    thread) get about equal work. Returns ``(order, bounds)`` with ``order`` None when it is the
    identity and ``bounds`` the ``(b0, b1)`` row range of each block.
    """
    B = lengths.size
    if (lengths == lengths[:1]).all():
        order = np.arange(B)
        sizes = [len(range(g, B, groups)) for g in range(groups)]
    else:
        ranked = np.argsort(-lengths, kind="stable")
        dealt = [ranked[g::groups] for g in range(groups)]
        order = np.concatenate(dealt)
        sizes = [d.size for d in dealt]
    edges = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    bounds = [(int(edges[g]), int(edges[g + 1])) for g in range(groups) if sizes[g]]
    return (None if (order == np.arange(B)).all() else order), bounds


def _run_blocks(bounds, fn):
    """Run ``fn(b0, b1)`` for every row block: the first in this thread, the others in the pool."""
    futures = [_pool().submit(fn, b0, b1) for b0, b1 in bounds[1:]]
    if bounds:
        fn(*bounds[0])
    for f in futures:
        f.result()


def _running(lengths, b0, b1, s) -> int:
    """How many rows of the (sorted) block ``b0 .. b1-1`` are still running at step ``s``."""
    return int(np.count_nonzero(lengths[b0:b1] > s))


def lstm_forward(x, h0, c0, w_ih, w_hh, b_ih, b_hh, lengths=None, reverse=False, w_hr=None,
                 threads=None):
    """One LSTM direction on the CPU; arguments and results as the reference twin.

    Takes ``x [T, B, I]``, ``h0 [B, P]``, ``c0 [B, H]``, ``w_ih [4H, I]``, ``w_hh [4H, P]``,
    ``b_ih, b_hh [4H]``, ``lengths int[B]`` or None, ``w_hr [P, H]`` or None. Returns
    ``y [T, B, P]``, ``h_n [B, P]``, ``c_n [B, H]`` (dtype of x) and a :class:`CpuLSTMCache`.
    ``threads`` (None: the cores) splits the batch into blocks whose recurrences run in
    parallel: the sequences of a batch are independent, so this needs no per-step sync.
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
    if order is not None:
        x, lengths = x[:, order], lengths[order]
        h0, c0 = np.asarray(h0)[order], np.asarray(c0)[order]
    w_ih, w_hh = _contig(w_ih, dt), _contig(w_hh, dt)
    w_hr = _contig(w_hr, dt) if proj else None
    bias = _contig(b_ih, dt) + _contig(b_hh, dt)
    h = np.array(h0, dtype=dt, copy=True, order="C")
    c = np.array(c0, dtype=dt, copy=True, order="C")
    h0c, c0c = h.copy(), c.copy()

    # the input projection of every frame; each step turns its rows into gate activations
    gates = np.matmul(x.reshape(T * B, In), w_ih.T).reshape(T, B, 4 * H)
    y = np.zeros((T, B, P), dt)
    hs = np.zeros((T, B, P), dt)
    cs = np.empty((T, B, H), dt)
    tcs = np.empty((T, B, H), dt)
    rec = np.empty((B, 4 * H), dt)
    ms = np.zeros((T, B, H), dt) if proj else np.zeros((1, 1, 1), dt)
    m_step = np.empty((B, H), dt) if proj else np.zeros((1, 1), dt)
    h_new = np.empty((B, P), dt)
    rows = max((b1 - b0 for b0, b1 in bounds), default=1)
    rec_gemm = RecurrentGemm(w_hh.T, rows)
    proj_gemm = RecurrentGemm(w_hr.T, rows) if proj else None

    def recurrence(b0, b1):
        for s in range(int(lengths[b0])):
            n = _running(lengths, b0, b1, s)
            rec_gemm(h[b0:b1], rec[b0:b1], n)
            _forward_step(s, reverse, lengths, rec, bias, h, c, gates, cs, tcs, hs, y, m_step,
                          ms, proj, b0, b1)
            if proj:
                proj_gemm(m_step[b0:b1], h_new[b0:b1], n)
                _projection_step(s, reverse, lengths, h_new, h, hs, y, b0, b1)

    _run_blocks(bounds, recurrence)
    cache = CpuLSTMCache(x, gates, cs, tcs, hs, ms if proj else None, h0c, c0c, lengths,
                         order, bounds, bool(reverse), w_ih, w_hh, w_hr)
    if order is not None:
        inv = np.argsort(order)
        y, h, c = y[:, inv], h[inv], c[inv]
    return y, h, c, cache


def lstm_backward(dy, dh_n, dc_n, cache: CpuLSTMCache):
    """Gradients of one LSTM direction; arguments and results as the reference twin.

    Takes ``dy [T, B, P]``, ``dh_n [B, P]``, ``dc_n [B, H]`` (None for zero). Returns
    ``(dx, dh0, dc0, dw_ih, dw_hh, db_ih, db_hh)``, plus ``dw_hr`` with a projection.
    """
    x, gates, lengths, reverse = cache.x, cache.gates, cache.lengths, cache.reverse
    T, B, In = x.shape
    H = gates.shape[2] // 4
    P = cache.hs.shape[2]
    dt = x.dtype
    proj = cache.w_hr is not None
    order = cache.order
    if order is not None:  # into the forward's longest-first order
        dy = None if dy is None else np.asarray(dy)[:, order]
        dh_n = None if dh_n is None else np.asarray(dh_n)[order]
        dc_n = None if dc_n is None else np.asarray(dc_n)[order]
    dy = np.zeros((T, B, P), dt) if dy is None else _contig(dy, dt)
    dh = np.zeros((B, P), dt) if dh_n is None else np.array(dh_n, dt, copy=True, order="C")
    dc = np.zeros((B, H), dt) if dc_n is None else np.array(dc_n, dt, copy=True, order="C")
    dgates = np.zeros((T, B, 4 * H), dt)
    dg_step = np.zeros((B, 4 * H), dt)
    rec = np.empty((B, P), dt)
    dhs = np.zeros((T, B, P), dt) if proj else np.zeros((1, 1, 1), dt)
    dh_step = np.zeros((B, P), dt)
    dm = np.empty((B, H), dt) if proj else np.zeros((1, 1), dt)
    rows = max((b1 - b0 for b0, b1 in cache.bounds), default=1)
    rec_gemm = RecurrentGemm(cache.w_hh, rows)
    proj_gemm = RecurrentGemm(cache.w_hr, rows) if proj else None

    def recurrence(b0, b1):
        steps = int(lengths[b0])
        for s in range(steps - 1, -1, -1):
            have_rec = s < steps - 1
            if have_rec:
                # rows still running at step s + 1 (the rest of dg_step is 0)
                rec_gemm(dg_step[b0:b1], rec[b0:b1], _running(lengths, b0, b1, s + 1))
            if proj:
                _total_dh(s, reverse, lengths, rec, have_rec, dy, dh, dh_step, dhs, b0, b1)
                proj_gemm(dh_step[b0:b1], dm[b0:b1], _running(lengths, b0, b1, s))
            _backward_step(s, reverse, lengths, rec, have_rec, dm, dy, dh, dc, gates, cache.c,
                           cache.tc, cache.c0, dg_step, dgates, proj, b0, b1)
        if steps:
            rec_gemm(dg_step[b0:b1], rec[b0:b1], _running(lengths, b0, b1, 0))
            _merge_carry(-1, lengths, rec, dh, b0, b1)

    _run_blocks(cache.bounds, recurrence)

    dg2 = dgates.reshape(T * B, 4 * H)
    dx = np.matmul(dg2, cache.w_ih).reshape(T, B, In)
    dw_ih = np.matmul(dg2.T, x.reshape(T * B, In))
    # h_prev of frame t is the output of the neighbouring frame (zero on padding), or h0 for
    # the first step, whose gate gradients are still in dg_step.
    n = max(T - 1, 0) * B
    if reverse:
        dw_hh = np.matmul(dg2[:n].T, cache.hs[1:].reshape(n, P))
    else:
        dw_hh = np.matmul(dg2[B:].T, cache.hs[:-1].reshape(n, P))
    dw_hh += np.matmul(dg_step.T, cache.h0)
    db = dg2.sum(axis=0)
    if order is not None:
        inv = np.argsort(order)
        dx, dh, dc = dx[:, inv], dh[inv], dc[inv]
    out = (dx, dh, dc, dw_ih, dw_hh, db, db.copy())
    if proj:
        out = (*out, np.matmul(dhs.reshape(T * B, P).T, cache.m.reshape(T * B, H)))
    return out
