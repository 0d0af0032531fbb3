"""Multi-head self-attention on the CPU: CBLAS GEMMs called from numba, blocked over queries,
parallel over (sequence, head) pairs.

Same maths, masks and results as :mod:`asrkit.kernels.reference.attention` (read its docstring).
The layout:

* the unit of work is one (sequence b, head h) pair and a block of up to ``QUERY_BLOCK``
  queries ``i0 .. i1-1``. The keys the block may see are one range ``j0 .. j1-1`` (the masks are
  windows ``lo[i] <= j < min(hi[i], L)`` whose ends grow with i), so padding and the keys
  outside a causal or chunked window are never multiplied, not even as masked zeros. The pair's
  q, v (``[T, d]``) and k (transposed, ``[d, T]``) are first copied into contiguous slabs: the
  GEMMs pack their operands, and packing rows a power of two apart (``[T, B, D]`` rows are
  ``B*D*4`` bytes apart) or transposing inside the GEMM cost more than the copies. The block's
  scores ``S [nb, nk]`` become probabilities in place (row loops LLVM vectorises, a polynomial
  exp); ``out = P v`` is a GEMM straight into the output.
* the forward keeps only each row's log-sum-exp ``lse [B, H, T]``; the backward recomputes the
  block's probabilities from it (``P = exp(S - lse)``, one GEMM), then ``dV += P^T dO``,
  ``dP = dO V^T``, ``dS = P (dP - rowsum(dO * O))``, ``dQ = dS K``, ``dK += dS^T Q``: flash
  attention's backward, blocked over queries only, since a whole key range of scores for 128
  queries (256 KB at T=500) stays in the L2 cache. Nothing ``[B, H, T, T]`` is ever stored.
  Storing the probabilities instead would save the recomputing GEMM and exp: measured alone
  (CPU time, one thread, T=500 B=8 D=256 H=4, all frames valid) 14.6 ms of the 106 ms of a
  forward + backward, for 32 MB more memory (twice the whole step's peak now).
* relative positions: the block's ``(q + v_bias) pos^T`` is one GEMM over only the
  ``nb + nk - 1`` relative positions the block meets, then shifted into the scores (ESPnet's
  ``rel_shift`` as an index); at 128 queries against 500 keys that is 1.25x the work of the
  content term (ESPnet's full ``[T, 2T-1]`` product costs 2x). Its backward scatters ``dS``
  back and runs the two adjoint GEMMs; the position gradient is summed over the batch from
  per-thread accumulators.
* the (b, h) pairs are dealt to ``threads`` groups (longest sequences first, each to the least
  loaded group); each group runs in one ``nogil`` njit call with its own scratch, in a thread of
  a pool, with that thread's OpenBLAS calls single-threaded (its own threads would fight ours).
  Block sizes of 64 to 256 queries measured alike (within 5%); 512 was slower.

:func:`mhsa_forward` wraps the core in the layer's projections: per sequence, one GEMM over its
valid frames only (``x[:L, b]`` read in place) into batch-major ``[B, T, 3D]`` q, k, v that the
core reads in place, and likewise for the output projection and the backward's GEMMs. The
sequences are dealt to the same threads (BLAS at one thread each, per-thread weight-gradient
accumulators): a phase costs one synchronisation, not one per GEMM, and padded frames are
neither computed nor read (they may hold anything, NaN included).
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic, overload

from asrkit.kernels.cpu._gemm import (
    NO_TRANS,
    ROW_MAJOR,
    TRANS,
    gemm_function,
    in_worker_threads,
)
from asrkit.kernels.cpu.ctc import _exp
from asrkit.kernels.reference.attention import key_window
from asrkit.kernels.reference.lstm import check_lengths

QUERY_BLOCK = 128  # queries per block: their scores against every key stay in the L2 cache
_VEC = {"cache": True, "nogil": True, "error_model": "numpy"}
# the row loops are reductions (max, sum, dot): LLVM vectorises them only when it may reorder
# the additions; no flag that assumes finite values is used
_ROWS = {**_VEC, "fastmath": {"reassoc", "nsz", "contract", "arcp"}}


@intrinsic
def _int_bits_as_float32(typingctx, bits):
    """Reinterpret an int32 as the float32 with the same bits (a vectorisable bitcast)."""
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.int32), codegen


@njit(inline="always", **_VEC)
def _exp_f32(x):
    """e^x for a float32 x <= 88 (clamped below at -87: 1.6e-38, never 0 or NaN), vectorisable,
    relative error below 1e-7: Cephes' expf (x = k ln2 + r, a degree-7 polynomial in r, 2^k put
    into the exponent bits). libm's expf is a scalar call that stops LLVM vectorising the
    softmax loop; with it the softmax took 10x the time of the score GEMM."""
    x = min(max(x, np.float32(-87.0)), np.float32(88.0))
    k = np.floor(x * np.float32(1.4426950408889634) + np.float32(0.5))
    r = x - k * np.float32(0.693359375) + k * np.float32(2.12194440e-4)
    p = np.float32(1.9875691500e-4)
    p = p * r + np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    y = p * (r * r) + r + np.float32(1.0)
    return y * _int_bits_as_float32((np.int32(k) + np.int32(127)) << 23)


def fast_exp(x):
    """e^x, vectorisable: float32 through :func:`_exp_f32`, float64 through the CTC kernel's
    ``_exp`` (njit only)."""
    return np.exp(x)


@overload(fast_exp)
def _fast_exp_impl(x):
    if x == types.float32:
        return lambda x: _exp_f32(x)
    return lambda x: _exp(x)


@njit(**_ROWS)
def _softmax_in_place(x):
    """``x`` becomes its softmax; returns its log-sum-exp."""
    mx = x[0]
    for c in range(1, x.shape[0]):
        mx = max(mx, x[c])
    total = x.dtype.type(0)
    for c in range(x.shape[0]):
        y = fast_exp(x[c] - mx)
        x[c] = y
        total += y
    inv = x.dtype.type(1) / total
    for c in range(x.shape[0]):
        x[c] *= inv
    return np.float64(mx) + np.log(np.float64(total))


@njit(**_ROWS)
def _exp_in_place(x, m):
    """``x = exp(x - m)``."""
    for c in range(x.shape[0]):
        x[c] = fast_exp(x[c] - m)


# The row loops run over the window as a 1-D slice of its own: with the window's ends as loop
# bounds into the whole row LLVM did not vectorise them (4.3 against 1.0 ns per score).
@njit(**_VEC)
def _softmax_row(row, a, e):
    """``row[a:e]`` becomes its softmax and the rest of ``row`` zero; returns the log-sum-exp."""
    lse = _softmax_in_place(row[a:e])
    row[:a] = 0
    row[e:] = 0
    return lse


@njit(**_VEC)
def _probs_row(row, a, e, lse):
    """``row[a:e] = exp(row[a:e] - lse)`` (the forward's probabilities again), zero elsewhere."""
    _exp_in_place(row[a:e], row.dtype.type(lse))
    row[:a] = 0
    row[e:] = 0


@njit(**_ROWS)
def _dot(x, y):
    acc = x.dtype.type(0)
    for c in range(x.shape[0]):
        acc += x[c] * y[c]
    return acc


@njit(**_VEC)
def _add_into(dst, src):
    """``dst += src`` (1-D, one length)."""
    for c in range(dst.shape[0]):
        dst[c] += src[c]


@njit(**_VEC)
def _copy_into(dst, src):
    for c in range(dst.shape[0]):
        dst[c] = src[c]


@njit(**_VEC)
def _bias_grads(dq, tmp, dbu, dbv):
    """With relative positions, per query row: ``dbu += dq`` (the content part), ``dbv += tmp``
    (the position part), ``dq += tmp``."""
    for c in range(dq.shape[0]):
        g = dq[c]
        dbu[c] += g
        dbv[c] += tmp[c]
        dq[c] = g + tmp[c]


@njit(**_ROWS)
def _score_grads(ds, probs, delta, scale, nb, nk):
    """``ds = scale * P * (dP - delta)`` in place over ``ds`` (= dP), ``nb`` rows of ``nk``."""
    sc = ds.dtype.type(scale)
    for r in range(nb):
        dl = delta[r]
        base = r * nk
        for c in range(nk):
            ds[base + c] = sc * probs[base + c] * (ds[base + c] - dl)


@njit(inline="always", **_VEC)
def _slab(a, b, h, d):
    """Address of ``a[0, b, h*d]`` and the row stride (elements) of the ``[T, d]`` slab of
    sequence b, head h in a ``[T, B, D]`` array with unit stride along D."""
    return a.ctypes.data + b * a.strides[1] + h * d * a.itemsize, a.strides[0] // a.itemsize


@njit(**_VEC)
def _gather(a, b, h, n, dst):
    """``dst[:n] = a[:n, b, h*d:(h+1)*d]``: one head of one sequence as a contiguous ``[n, d]``
    slab (the GEMMs pack their operands; packing rows 8 KB apart, a power of two, ran at half
    the speed of packing a contiguous slab)."""
    d = dst.shape[1]
    for t in range(n):
        src = a[t, b, h * d:(h + 1) * d]
        row = dst[t]
        for c in range(d):
            row[c] = src[c]


@njit(**_VEC)
def _gather_t(a, b, h, n, dst):
    """``dst[:, :n] = a[:n, b, h*d:(h+1)*d].T``: a head's slab transposed, ``[d, T]``, so that
    products with it are plain (NN) GEMMs: OpenBLAS ran ``Q K^T`` at 72 GFLOP/s with K
    transposed by the GEMM and 88 with ``K^T`` stored (128 x 64 x 500, one thread)."""
    d = dst.shape[0]
    for t in range(n):
        src = a[t, b, h * d:(h + 1) * d]
        for c in range(d):
            dst[c, t] = src[c]


@njit(**_VEC)
def _scatter(src, a, b, h, n):
    """``a[:, b, h*d:(h+1)*d] = src`` on the first n frames, zero on the others."""
    d = src.shape[1]
    for t in range(a.shape[0]):
        row = a[t, b, h * d:(h + 1) * d]
        if t < n:
            s = src[t]
            for c in range(d):
                row[c] = s[c]
        else:
            row[:] = 0


@njit(**_VEC)
def _scores(gemm, Qs, Kt, posT, bu, bv, h, i0, nb, j0, nk, T, scale, rel, S, BD, QU, QV):
    """``S[:nb*nk]`` (rows of nk) = the scaled scores of queries ``i0 ..`` against keys
    ``j0 ..`` of one (sequence, head), from its slabs ``Qs [T, d]`` and ``Kt [d, T]``. With
    ``rel`` also fills ``QU = q + u`` and ``QV = q + v`` ``[nb, d]`` (kept for the backward)
    and adds the position term from ``posT [H, d, 2T-1]``."""
    d = Qs.shape[1]
    sz = Qs.itemsize
    ldk = Kt.shape[1]
    kp = Kt.ctypes.data + j0 * sz
    if not rel:
        gemm(ROW_MAJOR, NO_TRANS, NO_TRANS, nb, nk, d, scale, Qs.ctypes.data + i0 * d * sz, d,
             kp, ldk, 0.0, S.ctypes.data, nk)
        return
    for r in range(nb):
        for c in range(d):
            x = Qs[i0 + r, c]
            QU[r, c] = x + bu[h, c]
            QV[r, c] = x + bv[h, c]
    gemm(ROW_MAJOR, NO_TRANS, NO_TRANS, nb, nk, d, scale, QU.ctypes.data, d, kp, ldk, 0.0,
         S.ctypes.data, nk)
    # relative position of (i, j) is row T-1-i+j of pos: for the block, rows m0 .. m0+w-1
    m0 = T - 1 - (i0 + nb - 1) + j0
    w = nb + nk - 1
    M = 2 * T - 1
    pp = posT.ctypes.data + (h * d * M + m0) * sz
    gemm(ROW_MAJOR, NO_TRANS, NO_TRANS, nb, w, d, scale, QV.ctypes.data, d, pp, M, 0.0,
         BD.ctypes.data, w)
    for r in range(nb):
        off = r * w + nb - 1 - r
        _add_into(S[r * nk:(r + 1) * nk], BD[off:off + nk])


@njit(inline="always", **_VEC)
def _window(lo, hi, i, j0, L):
    """The columns ``a .. e-1`` of the block's score row for query i."""
    return lo[i] - j0, min(hi[i], L) - j0


@njit(**_VEC)
def _forward_pairs(gemm, q, k, v, out, lse, pairs, lengths, lo, hi, posT, bu, bv, scale, rel,
                   block, S, BD, QU, QV, Qs, Kt, Vs):
    """Forward of every (b, h) in ``pairs [n, 2]``: writes ``out`` (zero on padded frames)
    and ``lse [B, H, T]``. ``S``, ``BD``, ``QU``, ``QV`` and the slabs ``Qs, Vs [T, d]``,
    ``Kt [d, T]`` are this group's scratch."""
    T = q.shape[0]
    d = Qs.shape[1]
    sz = q.itemsize
    for p in range(pairs.shape[0]):
        b = pairs[p, 0]
        h = pairs[p, 1]
        L = lengths[b]
        _gather(q, b, h, L, Qs)
        _gather_t(k, b, h, L, Kt)
        _gather(v, b, h, L, Vs)
        op, ldo = _slab(out, b, h, d)
        for i0 in range(0, L, block):
            nb = min(block, L - i0)
            j0 = lo[i0]
            nk = min(hi[i0 + nb - 1], L) - j0
            _scores(gemm, Qs, Kt, posT, bu, bv, h, i0, nb, j0, nk, T, scale, rel, S, BD, QU,
                    QV)
            for r in range(nb):
                a, e = _window(lo, hi, i0 + r, j0, L)
                lse[b, h, i0 + r] = _softmax_row(S[r * nk:(r + 1) * nk], a, e)
            gemm(ROW_MAJOR, NO_TRANS, NO_TRANS, nb, d, nk, 1.0, S.ctypes.data, nk,
                 Vs.ctypes.data + j0 * d * sz, d, 0.0, op + i0 * ldo * sz, ldo)
        for t in range(L, T):
            out[t, b, h * d:(h + 1) * d] = 0


@njit(**_VEC)
def _backward_pairs(gemm, q, k, v, out, dout, lse, dq, dk, dv, pairs, lengths, lo, hi, posh,
                    posT, bu, bv, scale, rel, block, S, BD, QU, QV, DS, DBD, TMP, delta, Qs, Ks,
                    Kt, Vt, Gs, dKs, dVs, dpos, dbu, dbv):
    """Backward of every (b, h) in ``pairs``: writes ``dq``, ``dk``, ``dv`` (zero on padded
    frames) and, with ``rel``, adds into this group's ``dpos [H, 2T-1, d]``, ``dbu``,
    ``dbv [H, d]``. ``dout`` is read on valid rows only; ``Gs`` holds its slab, ``dKs``,
    ``dVs [T, d]`` accumulate the key and value gradients; ``Kt, Vt [d, T]`` are slabs
    transposed."""
    T = q.shape[0]
    d = Qs.shape[1]
    sz = q.itemsize
    for p in range(pairs.shape[0]):
        b = pairs[p, 0]
        h = pairs[p, 1]
        L = lengths[b]
        _gather(q, b, h, L, Qs)
        _gather(k, b, h, L, Ks)
        _gather_t(k, b, h, L, Kt)
        _gather_t(v, b, h, L, Vt)
        _gather(dout, b, h, L, Gs)
        dKs[:L] = 0
        dVs[:L] = 0
        dqp, lddq = _slab(dq, b, h, d)
        for i0 in range(0, L, block):
            nb = min(block, L - i0)
            j0 = lo[i0]
            nk = min(hi[i0 + nb - 1], L) - j0
            _scores(gemm, Qs, Kt, posT, bu, bv, h, i0, nb, j0, nk, T, scale, rel, S, BD, QU,
                    QV)
            for r in range(nb):
                i = i0 + r
                delta[r] = _dot(Gs[i], out[i, b, h * d:(h + 1) * d])
                a, e = _window(lo, hi, i, j0, L)
                _probs_row(S[r * nk:(r + 1) * nk], a, e, lse[b, h, i])
            gp = Gs.ctypes.data + i0 * d * sz
            # dV += P^T dO;  dP = dO V^T
            gemm(ROW_MAJOR, TRANS, NO_TRANS, nk, d, nb, 1.0, S.ctypes.data, nk, gp, d, 1.0,
                 dVs.ctypes.data + j0 * d * sz, d)
            gemm(ROW_MAJOR, NO_TRANS, NO_TRANS, nb, nk, d, 1.0, gp, d, Vt.ctypes.data + j0 * sz,
                 T, 0.0, DS.ctypes.data, nk)
            _score_grads(DS, S, delta, scale, nb, nk)
            # dQ = dS K;  dK += dS^T (q [+ u])
            gemm(ROW_MAJOR, NO_TRANS, NO_TRANS, nb, d, nk, 1.0, DS.ctypes.data, nk,
                 Ks.ctypes.data + j0 * d * sz, d, 0.0, dqp + i0 * lddq * sz, lddq)
            if rel:
                gemm(ROW_MAJOR, TRANS, NO_TRANS, nk, d, nb, 1.0, DS.ctypes.data, nk,
                     QU.ctypes.data, d, 1.0, dKs.ctypes.data + j0 * d * sz, d)
            else:
                gemm(ROW_MAJOR, TRANS, NO_TRANS, nk, d, nb, 1.0, DS.ctypes.data, nk,
                     Qs.ctypes.data + i0 * d * sz, d, 1.0, dKs.ctypes.data + j0 * d * sz, d)
            if not rel:
                continue
            m0 = T - 1 - (i0 + nb - 1) + j0
            w = nb + nk - 1
            for r in range(nb):
                off = r * w + nb - 1 - r
                DBD[r * w:off] = 0
                _copy_into(DBD[off:off + nk], DS[r * nk:(r + 1) * nk])
                DBD[off + nk:(r + 1) * w] = 0
            pp = (h * (2 * T - 1) + m0) * d * sz
            # dQ += dBD pos;  dpos += dBD^T (q + v)
            gemm(ROW_MAJOR, NO_TRANS, NO_TRANS, nb, d, w, 1.0, DBD.ctypes.data, w,
                 posh.ctypes.data + pp, d, 0.0, TMP.ctypes.data, d)
            gemm(ROW_MAJOR, TRANS, NO_TRANS, w, d, nb, 1.0, DBD.ctypes.data, w, QV.ctypes.data,
                 d, 1.0, dpos.ctypes.data + pp, d)
            for r in range(nb):
                _bias_grads(dq[i0 + r, b, h * d:(h + 1) * d], TMP[r], dbu[h], dbv[h])
        for t in range(L, T):
            dq[t, b, h * d:(h + 1) * d] = 0
        _scatter(dKs, dk, b, h, L)
        _scatter(dVs, dv, b, h, L)


# --- threads -------------------------------------------------------------------------------

def _deal(items, threads):
    """``(cost, item)`` pairs dealt into ``threads`` (None: the cores) groups of about equal
    cost, largest first to the least loaded group; empty groups are dropped."""
    n = (os.cpu_count() or 1) if threads is None else int(threads)
    n = max(1, min(n, len(items)))
    load = [0] * n
    dealt: list[list] = [[] for _ in range(n)]
    for c, item in sorted(items, key=lambda ci: -ci[0]):
        g = load.index(min(load))
        load[g] += c
        dealt[g].append(item)
    return [g for g in dealt if g]


def _groups(lengths, lo, hi, H, threads):
    """The (b, h) pairs of the non-empty sequences in groups of about equal work (the number of
    scores of each sequence): a list of int64 ``[n, 2]``."""
    cost = [int(np.sum(np.minimum(hi[:L], L) - lo[:L])) for L in lengths]
    items = [(cost[b], (b, h)) for b in range(lengths.size) for h in range(H) if lengths[b]]
    return [np.array(g, np.int64).reshape(-1, 2) for g in _deal(items, threads)]


def _sequence_groups(lengths, threads):
    """The sequences in groups of about equal frame counts, for the projections: lists of b."""
    return _deal([(int(L), b) for b, L in enumerate(lengths)], threads)


def _run(groups, fn):
    """``fn(g, group)`` for every group, one per thread, each thread's BLAS calls
    single-threaded (``_gemm.in_worker_threads``): the GEMMs run in parallel threads of their
    own."""
    in_worker_threads(fn, list(enumerate(groups)))


# --- entry points ----------------------------------------------------------------------------

@dataclasses.dataclass
class CpuAttentionCache:
    """What :func:`attention_backward` needs: the inputs and output (referenced, not copied:
    overwrite none of them before the backward) and each row's log-sum-exp."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    out: np.ndarray
    lse: np.ndarray          # [B, H, T] float64
    lengths: np.ndarray      # int64 [B]
    lo: np.ndarray           # int64 [T], see reference.attention.key_window
    hi: np.ndarray
    groups: list
    scale: float
    posh: np.ndarray | None  # [H, 2T-1, d]: pos [2T-1, D] head-major
    posT: np.ndarray | None  # [H, d, 2T-1]: the same transposed
    pos_bias_u: np.ndarray | None
    pos_bias_v: np.ndarray | None
    device: str = "cpu"


def _rows(a, dt, name, shape):
    """``a`` as an array of dtype ``dt`` with unit stride along its last axis (a view if it
    already is one)."""
    a = np.asarray(a)
    if a.shape != shape:
        raise ValueError(f"attention: {name} has shape {a.shape}, expected {shape}")
    if a.dtype != dt or (a.shape[-1] > 1 and a.strides[-1] != dt.itemsize) or \
            any(s < 0 for s in a.strides):
        a = np.ascontiguousarray(a, dtype=dt)
    return a


def _scratch(T, d, block, dt, rel):
    """A group's scratch: scores ``S``, position scores ``BD``, ``QU``, ``QV`` and two
    ``[T, d]`` slabs."""
    w = block + T - 1 if rel else 1
    qb = (block, d) if rel else (1, 1)
    return (np.empty(block * T, dt), np.empty(block * w, dt), np.empty(qb, dt),
            np.empty(qb, dt), np.empty((T, d), dt), np.empty((T, d), dt))


def attention_forward(q, k, v, lengths=None, num_heads=1, causal=False, chunk_size=None,
                      left_chunks=None, pos=None, pos_bias_u=None, pos_bias_v=None, scale=None,
                      threads=None, out=None):
    """The attention core on the CPU; arguments and results as the reference twin.

    ``q, k, v [T, B, D]`` may be strided views (e.g. thirds of a ``[T, B, 3D]`` projection)
    with unit stride along D. ``threads`` (None: the cores) is the number of groups of
    (sequence, head) pairs run in parallel; ``out`` an optional ``[T, B, D]`` array (unit
    stride along D) to write into. Returns ``out`` and a :class:`CpuAttentionCache`.
    """
    q = np.asarray(q)
    dt = q.dtype if q.dtype in (np.float32, np.float64) else np.dtype(np.float32)
    T, B, D = q.shape
    H = int(num_heads)
    d = D // H
    q, k, v = (_rows(a, dt, n, (T, B, D)) for a, n in ((q, "q"), (k, "k"), (v, "v")))
    lengths = check_lengths(lengths, T, B)
    lo, hi = key_window(T, causal, chunk_size, left_chunks)
    scale = 1.0 / np.sqrt(d) if scale is None else float(scale)
    rel = pos is not None
    if rel:
        # head-major [H, 2T-1, d] (and transposed, [H, d, 2T-1]): each head's positions one
        # contiguous slab for the GEMMs
        posh = np.ascontiguousarray(
            np.asarray(pos, dt).reshape(2 * T - 1, H, d).transpose(1, 0, 2))
        posT = np.ascontiguousarray(posh.transpose(0, 2, 1))
        bu = np.ascontiguousarray(pos_bias_u, dt).reshape(H, d)
        bv = np.ascontiguousarray(pos_bias_v, dt).reshape(H, d)
    else:
        posh = posT = np.zeros((1, 1, 1), dt)
        bu = bv = np.zeros((1, 1), dt)
    out = np.empty((T, B, D), dt) if out is None else _rows(out, dt, "out", (T, B, D))
    lse = np.zeros((B, H, T), np.float64)
    groups = _groups(lengths, lo, hi, H, threads)
    gemm = gemm_function(dt)
    block = QUERY_BLOCK

    def work(g, pairs):
        S, BD, QU, QV, Qs, Vs = _scratch(T, d, block, dt, rel)
        _forward_pairs(gemm, q, k, v, out, lse, pairs, lengths, lo, hi, posT, bu, bv,
                       scale, rel, block, S, BD, QU, QV, Qs, np.empty((d, T), dt), Vs)

    _run(groups, work)
    # sequences with no frames are in no group: their outputs are still to be zeroed
    for b in np.nonzero(lengths == 0)[0]:
        out[:, b] = 0
    cache = CpuAttentionCache(q, k, v, out, lse, lengths, lo, hi, groups, scale,
                              posh if rel else None, posT if rel else None, bu if rel else None,
                              bv if rel else None)
    return out, cache


def attention_backward(dout, cache: CpuAttentionCache, dq=None, dk=None, dv=None):
    """Gradients of the CPU attention core; arguments and results as the reference twin.

    ``dq, dk, dv`` may be given as ``[T, B, D]`` arrays with unit stride along D (e.g.
    thirds of one ``[T, B, 3D]`` gradient) to be written into (every element is written).
    """
    c = cache
    T, B, D = c.q.shape
    H = c.lse.shape[1]
    d = D // H
    dt = c.q.dtype
    dout = _rows(dout, dt, "dout", (T, B, D))
    dq, dk, dv = (np.empty((T, B, D), dt) if a is None else a for a in (dq, dk, dv))
    rel = c.posh is not None
    posh = c.posh if rel else np.zeros((1, 1, 1), dt)
    posT = c.posT if rel else posh
    bu = c.pos_bias_u if rel else np.zeros((1, 1), dt)
    bv = c.pos_bias_v if rel else np.zeros((1, 1), dt)
    n = len(c.groups)
    dpos = np.zeros((n, H, 2 * T - 1, d) if rel else (n, 1, 1, 1), dt)
    dbu = np.zeros((n, H, d) if rel else (n, 1, 1), dt)
    dbv = np.zeros((n, H, d) if rel else (n, 1, 1), dt)
    gemm = gemm_function(dt)
    block = QUERY_BLOCK

    def work(g, pairs):
        S, BD, QU, QV, Qs, Ks = _scratch(T, d, block, dt, rel)
        _backward_pairs(gemm, c.q, c.k, c.v, c.out, dout, c.lse, dq, dk, dv, pairs, c.lengths,
                        c.lo, c.hi, posh, posT, bu, bv, c.scale, rel, block, S, BD, QU, QV,
                        np.empty_like(S), np.empty_like(BD), np.empty((block, d), dt),
                        np.empty(block, dt), Qs, Ks, np.empty((d, T), dt), np.empty((d, T), dt),
                        np.empty((T, d), dt), np.empty((T, d), dt), np.empty((T, d), dt),
                        dpos[g], dbu[g], dbv[g])

    _run(c.groups, work)
    for b in np.nonzero(c.lengths == 0)[0]:   # in no group
        for a in (dq, dk, dv):
            a[:, b] = 0
    if not rel:
        return dq, dk, dv
    dpos = dpos.sum(axis=0).transpose(1, 0, 2).reshape(2 * T - 1, D)
    return dq, dk, dv, dpos, dbu.sum(axis=0), dbv.sum(axis=0)


@dataclasses.dataclass
class CpuMHSACache:
    """What :func:`mhsa_backward` needs: ``x`` (referenced: do not overwrite it before the
    backward), the core's cache (whose q, k, v and output live in batch-major buffers)."""

    x: np.ndarray
    o: np.ndarray            # [B, T, D] the core's output, batch-major
    core: CpuAttentionCache
    w_in: np.ndarray
    w_out: np.ndarray
    pos_emb: np.ndarray | None
    seqs: list               # the sequence groups of the projections' threads
    device: str = "cpu"


def _mm(gemm, a, b, c, ta=False, tb=False, beta=0.0):
    """``c = op(a) @ op(b) + beta * c`` through CBLAS on 2-D arrays whose rows may be strided
    (unit stride along them), e.g. one sequence's valid frames ``x[:L, b]`` of a ``[T, B, D]``
    array: no copy, and the padded frames are never read."""
    M = a.shape[1] if ta else a.shape[0]
    K = a.shape[0] if ta else a.shape[1]
    N = b.shape[0] if tb else b.shape[1]
    if M == 0 or N == 0:
        return
    sz = a.itemsize

    def ld(x):
        return max(x.strides[0] // sz, x.shape[1], 1)

    gemm(ROW_MAJOR, TRANS if ta else NO_TRANS, TRANS if tb else NO_TRANS, M, N, K, 1.0,
         a.ctypes.data, ld(a), b.ctypes.data, ld(b), beta, c.ctypes.data, ld(c))


def mhsa_forward(x, w_in, b_in, w_out, b_out, num_heads, lengths=None, causal=False,
                 chunk_size=None, left_chunks=None, pos_emb=None, w_pos=None, pos_bias_u=None,
                 pos_bias_v=None, scale=None, threads=None):
    """The self-attention layer on the CPU; arguments and results as the reference twin.

    The projections run per sequence over its valid frames only (one GEMM each, reading
    ``x[:L, b]`` in place), into batch-major ``[B, T, 3D]`` q, k, v whose rows the core reads
    in place; padded frames are never read, so they cost nothing and may hold anything.
    """
    x = np.asarray(x)
    dt = x.dtype if x.dtype in (np.float32, np.float64) else np.dtype(np.float32)
    x = _rows(x, dt, "x", x.shape)
    T, B, D = x.shape
    lengths = check_lengths(lengths, T, B)
    w_in = np.ascontiguousarray(w_in, dt)
    w_out = np.ascontiguousarray(w_out, dt)
    b_in = None if b_in is None else np.asarray(b_in, dt)
    b_out = None if b_out is None else np.asarray(b_out, dt)
    gemm = gemm_function(dt)
    seqs = _sequence_groups(lengths, threads)
    qkv = np.empty((B, T, 3 * D), dt)

    def project_in(g, bs):
        for b in bs:
            L = lengths[b]
            _mm(gemm, x[:L, b], w_in, qkv[b, :L], tb=True)
            if b_in is not None:
                qkv[b, :L] += b_in

    _run(seqs, project_in)
    pos = None
    if pos_emb is not None:
        pos_emb = np.ascontiguousarray(pos_emb, dt)
        pos = np.matmul(pos_emb, np.asarray(w_pos, dt).T)
    tm = qkv.transpose(1, 0, 2)          # [T, B, 3D] view
    o = np.empty((B, T, D), dt)
    _, core = attention_forward(tm[..., :D], tm[..., D:2 * D], tm[..., 2 * D:], lengths,
                                num_heads, causal, chunk_size, left_chunks, pos, pos_bias_u,
                                pos_bias_v, scale, threads, out=o.transpose(1, 0, 2))
    y = np.empty((T, B, D), dt)

    def project_out(g, bs):
        for b in bs:
            L = lengths[b]
            _mm(gemm, o[b, :L], w_out, y[:L, b], tb=True)
            if b_out is not None:
                y[:L, b] += b_out
            y[L:, b] = 0

    _run(seqs, project_out)
    return y, CpuMHSACache(x, o, core, w_in, w_out, pos_emb, seqs)


def mhsa_backward(dy, cache: CpuMHSACache):
    """Gradients of the CPU self-attention layer; results as the reference twin. ``dy`` is
    read on valid frames only."""
    c = cache
    T, B, D = c.x.shape
    dt = c.x.dtype
    lengths = c.core.lengths
    dy = _rows(dy, dt, "dy", (T, B, D))
    gemm = gemm_function(dt)
    n = len(c.seqs)
    dw_out = np.zeros((max(n, 1), D, D), dt)   # one accumulator per thread
    db_out = np.zeros((max(n, 1), D), dt)
    do = np.empty((B, T, D), dt)

    def back_out(g, bs):
        for b in bs:
            L = lengths[b]
            _mm(gemm, dy[:L, b], c.o[b, :L], dw_out[g], ta=True, beta=1.0)
            db_out[g] += dy[:L, b].sum(axis=0)
            _mm(gemm, dy[:L, b], c.w_out, do[b, :L])

    _run(c.seqs, back_out)
    dqkv = np.empty((B, T, 3 * D), dt)
    tm = dqkv.transpose(1, 0, 2)
    grads = attention_backward(do.transpose(1, 0, 2), c.core, tm[..., :D], tm[..., D:2 * D],
                               tm[..., 2 * D:])
    dx = np.empty((T, B, D), dt)
    dw_in = np.zeros((max(n, 1), 3 * D, D), dt)
    db_in = np.zeros((max(n, 1), 3 * D), dt)

    def back_in(g, bs):
        for b in bs:
            L = lengths[b]
            _mm(gemm, dqkv[b, :L], c.w_in, dx[:L, b])
            dx[L:, b] = 0
            _mm(gemm, dqkv[b, :L], c.x[:L, b], dw_in[g], ta=True, beta=1.0)
            db_in[g] += dqkv[b, :L].sum(axis=0)

    _run(c.seqs, back_in)
    dw_in, db_in, dw_out, db_out = (a.sum(axis=0) if n > 1 else a[0]
                                    for a in (dw_in, db_in, dw_out, db_out))
    out = (dx, dw_in, db_in, dw_out, db_out)
    if c.pos_emb is None:
        return out
    dpos, dbu, dbv = grads[3:]
    return (*out, np.matmul(dpos.T, c.pos_emb), dbu, dbv)
