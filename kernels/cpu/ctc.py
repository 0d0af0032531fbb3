"""CTC loss, gradient and Viterbi forced alignment as numba.njit kernels, parallel over the batch.

Same contract as the numpy twin ``kernels/reference/ctc.py`` (read its docstring for the
lattice). One sequence per ``prange`` iteration; within a sequence, three passes:

1. softmax over C for each frame, written straight into ``grad`` (float64 sums), plus the
   log-probabilities of the 2L+1 lattice states (``em [T, 2L+1]``);
2. alpha over the band of states reachable by frame t that can still reach the end
   (``lo(t) <= s < hi(t)``), kept for all frames;
3. beta from the last frame back with two rolling rows, and on the way the state posteriors
   ``exp(alpha + beta - logp - log p)``, subtracted from the softmax: the gradient.

The recursions run in float64 log space whatever the input dtype. What makes this fast:

- the band: states outside it are never touched (a fifth of the work when T is close to 2S);
- each frame's recursion is a loop over plain 1-D slices into a separate output row, with
  branch-free log-sum-exp and polynomial ``exp``/``log`` (``_exp``, ``_log_1_to_3``; relative
  error below 1e-14), so that LLVM turns it into AVX2/AVX-512 code: libm's exp and log are
  scalar calls, three to four per state, and were two thirds of the time;
- the posteriors of states that share a class (the blank: every even state) are added up in a
  short scalar scatter after the vector loop.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

NEG_INF = -np.inf

# exp: x = k ln2 + r with |r| <= ln2 / 2, e^r by its Taylor polynomial to r^11 (truncation
# error 0.347^12 / 12! < 1e-14 relative), 2^k put into the exponent bits
LOG2E = 1.4426950408889634
LN2_HI = 0.693145751953125  # ln 2 split so that k * LN2_HI is exact for |k| < 2^11
LN2_LO = 1.42860682030941723212e-6
# log on [1, 3] (a sum of three exponentials whose largest is exp(0)): y / sqrt(3) lies in
# [0.577, 1.732], and log y = log(3) / 2 + 2 atanh(z), z = (m - 1) / (m + 1), |z| <= 0.268;
# the atanh series to z^21 leaves < 1e-15
INV_SQRT3 = 0.5773502691896258
HALF_LOG3 = 0.5493061443340549
# Numba's / raises on zero and so stops LLVM vectorising; error_model="numpy" lets the loops
# below compile to AVX2/AVX-512 code
_VEC = {"cache": True, "error_model": "numpy", "nogil": True}


@intrinsic
def _int_bits_as_float(typingctx, bits):
    """Reinterpret an int64 as the float64 with the same bits (a vectorisable bitcast)."""
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(types.int64), codegen


@njit(inline="always", **_VEC)
def _exp(x):
    """e^x for a float64 x (clamped to [-708, 709]: -inf gives 3e-308, never NaN), vectorisable.

    Relative error below 1e-14; used where a lattice value is summed or turned into a
    probability, so the clamp at -708 never shows in a float32 result."""
    x = min(max(x, -708.0), 709.0)
    k = math.floor(x * LOG2E + 0.5)
    r = x - k * LN2_HI - k * LN2_LO
    p = 1.0 / 39916800.0
    p = p * r + 1.0 / 3628800.0
    p = p * r + 1.0 / 362880.0
    p = p * r + 1.0 / 40320.0
    p = p * r + 1.0 / 5040.0
    p = p * r + 1.0 / 720.0
    p = p * r + 1.0 / 120.0
    p = p * r + 1.0 / 24.0
    p = p * r + 1.0 / 6.0
    p = p * r + 0.5
    p = p * r + 1.0
    p = p * r + 1.0
    return p * _int_bits_as_float((np.int64(k) + 1023) << 52)


@njit(inline="always", **_VEC)
def _log_1_to_3(y):
    """log y for a float64 y in [1, 3], vectorisable (absolute error < 1e-14)."""
    m = y * INV_SQRT3
    z = (m - 1.0) / (m + 1.0)
    z2 = z * z
    p = 1.0 / 21.0
    p = p * z2 + 1.0 / 19.0
    p = p * z2 + 1.0 / 17.0
    p = p * z2 + 1.0 / 15.0
    p = p * z2 + 1.0 / 13.0
    p = p * z2 + 1.0 / 11.0
    p = p * z2 + 1.0 / 9.0
    p = p * z2 + 1.0 / 7.0
    p = p * z2 + 1.0 / 5.0
    p = p * z2 + 1.0 / 3.0
    p = p * z2 + 1.0
    return HALF_LOG3 + 2.0 * z * p


@njit(inline="always", **_VEC)
def _lse3(a, b, c):
    """log(e^a + e^b + e^c) for float64 log values, exact with -inf; branch-free.

    The largest term contributes e^0 = 1, so only the other two need an exponential."""
    hi_ab = max(a, b)
    lo_ab = min(a, b)
    m = max(hi_ab, c)
    mid = min(hi_ab, c)
    finite = m > NEG_INF
    ms = m if finite else 0.0
    r = ms + _log_1_to_3(1.0 + _exp(lo_ab - ms) + _exp(mid - ms))
    return r if finite else NEG_INF


@njit(**_VEC)
def _extend(targets, b, L, blank):
    """Lattice of sequence b: (ext int64 [2L+1] classes, skip float64 [2L+3], min frames).

    ``skip[s]`` is 0 where state s may be entered from s-2 (a label unlike the one before),
    else -inf; it is added to the skip term, and padded with -inf for the beta recursion.
    """
    N = 2 * L + 1
    ext = np.full(N, blank, dtype=np.int64)
    skip = np.full(N + 2, NEG_INF)
    repeats = 0
    for i in range(L):
        ext[2 * i + 1] = targets[b, i]
        if i > 0:
            if targets[b, i] == targets[b, i - 1]:
                repeats += 1
            else:
                skip[2 * i + 1] = 0.0
    return ext, skip, L + repeats


@njit(inline="always", **_VEC)
def _row_max(x, acc):
    """Largest value of x [C] (NaN ignored), using acc [16] of x's dtype as scratch. Sixteen
    running maxima break the dependency chain of one, so the loop vectorises: four times
    faster at C=500."""
    C = x.shape[0]
    acc[:] = NEG_INF
    n16 = C - C % 16
    for c0 in range(0, n16, 16):
        for j in range(16):
            v = x[c0 + j]
            acc[j] = v if v > acc[j] else acc[j]
    m = x.dtype.type(NEG_INF)
    for j in range(16):
        m = acc[j] if acc[j] > m else m
    for c in range(n16, C):
        m = x[c] if x[c] > m else m
    return m


@njit(fastmath={"reassoc", "contract"}, **_VEC)
def _softmax_row(x, out, acc):
    """out[c] = softmax(x)[c] for one frame x [C]; returns the float64 log normaliser."""
    C = x.shape[0]
    m = np.float64(_row_max(x, acc))
    total = 0.0
    for c in range(C):
        e = _exp(np.float64(x[c]) - m)
        out[c] = e
        total += e
    inv = 1.0 / total
    for c in range(C):
        out[c] *= inv
    return m + math.log(total)


@njit(**_VEC)
def _emissions(logits, b, Tb, ext, grad):
    """Softmax into grad[t, b] for t < Tb; returns float64 [Tb, N] log-probs of the states."""
    N = ext.shape[0]
    em = np.empty((Tb, N))
    acc = np.empty(16, dtype=logits.dtype)
    for t in range(Tb):
        lse = _softmax_row(logits[t, b], grad[t, b], acc)
        for s in range(N):
            em[t, s] = logits[t, b, ext[s]] - lse
    return em


@njit(inline="always", **_VEC)
def _alpha_step(prev, skip, em, out):
    """One frame of alpha over a band of n states: prev float64 [n + 2] (the previous frame
    from two states before the band), skip and em float64 [n]; writes out float64 [n].

    Written over separate 1-D slices, so that LLVM vectorises it."""
    for i in range(out.shape[0]):
        out[i] = _lse3(prev[i + 2], prev[i + 1], prev[i] + skip[i]) + em[i]


@njit(inline="always", **_VEC)
def _beta_step(nxt, skip, em, alpha, logz, out, post):
    """One frame of beta over a band of n states, and their posteriors: nxt float64 [n + 2]
    (the next frame from the band's first state), skip float64 [n] (for states two ahead), em
    and alpha float64 [n]; writes out (beta) and post (probability of the state) [n]."""
    for i in range(out.shape[0]):
        v = _lse3(nxt[i], nxt[i + 1], nxt[i + 2] + skip[i]) + em[i]
        out[i] = v
        post[i] = _exp(alpha[i] + v - em[i] - logz)


@njit(**_VEC)
def _ctc_one(logits, targets, b, Tb, L, blank, grad):
    """Cost of sequence b; fills grad[:, b] (zero on padding). Returns float64 -log p."""
    T = logits.shape[0]
    for t in range(Tb, T):
        grad[t, b, :] = 0.0
    ext, skip, need = _extend(targets, b, L, blank)
    N = 2 * L + 1
    if Tb < need or Tb == 0:
        for t in range(Tb):
            grad[t, b, :] = 0.0
        return 0.0 if (Tb == 0 and L == 0) else np.inf
    em = _emissions(logits, b, Tb, ext, grad)

    # alpha[t, s + 2] for state s: two -inf columns in front stand for s - 1, s - 2 < 0.
    # Only the band [lo(t), hi(t)) of states reachable by frame t that can still finish is
    # computed; everything else stays -inf.
    alpha = np.full((Tb, N + 2), NEG_INF)
    for s in range(max(0, N - 2 * Tb), min(N, 2)):
        alpha[0, s + 2] = em[0, s]
    row = np.empty(N)
    for t in range(1, Tb):
        lo = max(0, N - 2 * (Tb - t))
        hi = min(N, 2 * t + 2)
        _alpha_step(alpha[t - 1, lo:hi + 2], skip[lo:hi], em[t, lo:hi], row[:hi - lo])
        alpha[t, lo + 2:hi + 2] = row[:hi - lo]
    logz = _lse3(alpha[Tb - 1, N + 1], alpha[Tb - 1, N], NEG_INF)
    if logz == NEG_INF:  # every path underflowed: treat as impossible
        for t in range(Tb):
            grad[t, b, :] = 0.0
        return np.inf

    # beta with two rolling rows of N + 2 (two -inf columns behind). The row for frame Tb is
    # virtual: log 1 in the final blank, so the last frame needs no special case. Rows are only
    # read inside the band of the frame after, which they hold.
    nxt = np.full(N + 2, NEG_INF)
    cur = np.full(N + 2, NEG_INF)
    nxt[N - 1] = 0.0
    post = np.empty(N)
    for t in range(Tb - 1, -1, -1):
        lo = max(0, N - 2 * (Tb - t))
        hi = min(N, 2 * t + 2)
        _beta_step(nxt[lo:hi + 2], skip[lo + 2:hi + 2], em[t, lo:hi], alpha[t, lo + 2:hi + 2],
                   logz, row[:hi - lo], post[:hi - lo])
        cur[lo:hi] = row[:hi - lo]
        g = grad[t, b]
        for s in range(lo, hi):  # scatter: classes repeat across states (the blank always)
            g[ext[s]] -= post[s - lo]
        if t == Tb - 1:
            nxt[N - 1] = NEG_INF
        nxt, cur = cur, nxt
    return -logz


@njit(cache=True, parallel=True)
def _ctc_loss_batch(logits, targets, input_lengths, target_lengths, blank, costs, grad):
    for b in prange(logits.shape[1]):
        costs[b] = _ctc_one(logits, targets, b, input_lengths[b], target_lengths[b], blank, grad)


def ctc_loss(logits, targets, input_lengths, target_lengths, blank: int = 0):
    """CTC cost and gradient on the CPU; same contract as ``reference.ctc.ctc_loss``.

    Takes logits float32/float64 [T, B, C], targets int32 [B, S], input_lengths and
    target_lengths int32 [B] (checked by the caller, ``asrkit.kernels.ctc``). Returns costs [B]
    and grad [T, B, C] in the dtype of ``logits``.
    """
    logits = np.ascontiguousarray(logits)
    costs = np.empty(logits.shape[1], dtype=logits.dtype)
    grad = np.empty(logits.shape, dtype=logits.dtype)
    _ctc_loss_batch(logits, np.ascontiguousarray(targets, dtype=np.int32),
                    np.ascontiguousarray(input_lengths, dtype=np.int32),
                    np.ascontiguousarray(target_lengths, dtype=np.int32), int(blank), costs, grad)
    return costs, grad


@njit(cache=True)
def _align_one(x, targets, b, Tb, L, blank, path, scores):
    """Viterbi path of sequence b into path[:, b] (-1 elsewhere) and its score into scores[b]."""
    T = x.shape[0]
    for t in range(T):
        path[t, b] = -1
    ext, skip, need = _extend(targets, b, L, blank)
    N = 2 * L + 1
    if Tb < need or Tb == 0:
        scores[b] = 0.0 if (Tb == 0 and L == 0) else NEG_INF
        return
    back = np.zeros((Tb, N), dtype=np.int8)
    delta = np.full(N, NEG_INF)
    new = np.empty(N)
    delta[0] = x[0, b, ext[0]]
    if N > 1:
        delta[1] = x[0, b, ext[1]]
    for t in range(1, Tb):
        for s in range(N):
            best = delta[s]
            move = 0
            if s >= 1 and delta[s - 1] > best:
                best = delta[s - 1]
                move = 1
            if skip[s] == 0.0 and delta[s - 2] > best:
                best = delta[s - 2]
                move = 2
            new[s] = best + x[t, b, ext[s]]
            back[t, s] = move
        delta, new = new, delta
    s = N - 1
    if N > 1 and delta[N - 2] > delta[N - 1]:
        s = N - 2
    scores[b] = delta[s]
    for t in range(Tb - 1, -1, -1):
        path[t, b] = ext[s]
        s -= back[t, s]


@njit(cache=True, parallel=True)
def _ctc_align_batch(x, targets, input_lengths, target_lengths, blank, path, scores):
    for b in prange(x.shape[1]):
        _align_one(x, targets, b, input_lengths[b], target_lengths[b], blank, path, scores)


def ctc_align(logits, targets, input_lengths, target_lengths, blank: int = 0,
              return_scores: bool = False):
    """Viterbi forced alignment on the CPU; same contract as ``reference.ctc.ctc_align``.

    Takes logits or log-probs float [T, B, C], targets int32 [B, S], input_lengths and
    target_lengths int32 [B]. Returns int32 [T, B] (and float64 [B] scores with
    ``return_scores``).
    """
    x = np.ascontiguousarray(logits)
    T, B, _ = x.shape
    path = np.empty((T, B), dtype=np.int32)
    scores = np.empty(B, dtype=np.float64)
    _ctc_align_batch(x, np.ascontiguousarray(targets, dtype=np.int32),
                     np.ascontiguousarray(input_lengths, dtype=np.int32),
                     np.ascontiguousarray(target_lengths, dtype=np.int32), int(blank), path,
                     scores)
    return (path, scores) if return_scores else path
