"""RNN-T loss on the CPU: numba.njit kernels, and BLAS GEMMs for the merged joiner.

Same contract as the numpy twin ``kernels/reference/rnnt.py`` (read its docstring for the
lattice). Both entry points share three stages, with the recursions in float64 log space:

1. per lattice node ``(b, t, u)``: the log normaliser of the V logits and the log-probabilities
   of the blank and of the next label (``lse``, ``lpb``, ``lpl``, float64 ``[B, T, U+1]``);
2. per sequence (``prange`` over the batch): alpha and beta over the ``[T_b, U_b+1]`` lattice,
   the cost, and the posteriors of the blank and of the label leaving each node (``pb``,
   ``pl``); this is O(T U) against the O(T U V) of the other two stages;
3. per node: ``grad = (pb + pl) * softmax - pb * onehot(blank) - pl * onehot(label)``.

``rnnt_loss`` runs stages 1 and 3 over the given logits ``[B, T, U+1, V]``, ``prange`` over the
frames of all sequences (two streaming passes over the logits; the gradient may be written over
them with ``out=logits``).

``rnnt_joiner_loss`` never holds the ``[B, T, U+1, V]`` logits ("function merging"): the valid nodes
are cut into blocks of ``block`` rows, and for each block the joiner is computed on the spot, ``h =
tanh(enc[t, b] + pred[u, b])`` (njit) and ``z = [h | 1] @ [W | b]^T`` (one BLAS GEMM, the bias
riding along as a column of ones), and reduced to stage 1's three numbers per node. After stage 2
the blocks are computed again for the backward: ``dz`` (stage 3, in place of ``z``), ``dh = dz @ [W
| b]`` and ``d[W | b] += dz^T @ [h | 1]`` (two more GEMMs), and ``d(enc + pred) = dh * (1 - h^2)``
added into ``d_enc[t, b]`` and ``d_pred[u, b]``. Nodes whose occupancy ``pb + pl`` is below
``prune`` (default 1e-12) are left out of the backward: their gradient rows are bounded by ``2 *
occupancy`` in absolute sum, so each changes an entry of ``d_weight`` or ``d_enc``/``d_pred`` by at
most ``2e-12 * max|h|`` or ``2e-12 * max|W|``; with random logits about 40% of the nodes are left
out (B=8 T=200 U=50 V=500), more the more peaked the model. ``prune=0`` keeps every node.
Threads: the nodes are dealt into one contiguous range per thread and each thread works through its
blocks alone, its GEMMs made single-threaded with OpenBLAS's ``openblas_set_num_threads_local``: one
parallel region per pass and one kind of thread on the cores (numba's workers, OpenBLAS's and ours,
interleaved per block, spun against each other and made two threads slower than one on the 2-core
VM). Peak memory is a few blocks per thread (``block * (V + 2H)`` floats), the float64 ``[B, T,
U+1]`` node arrays, and per extra thread its own ``d_enc``, ``d_pred`` and ``d_weight`` (summed at
the end). """

from __future__ import annotations

import math

import numba
import numpy as np
from numba import njit, prange

from asrkit.kernels.cpu._gemm import blas_threads_local, in_worker_threads
from asrkit.kernels.cpu.ctc import _VEC, _exp, _row_max
from asrkit.kernels.cpu.lstm import fast_tanh

NEG_INF = -np.inf
BLOCK_ROWS = 512  # joiner rows per block: z [512, V] stays in L2 for V up to ~500 (float32)
PRUNE = 1e-12     # nodes of lower occupancy are left out of the joiner's backward


# not inlined: a caller's fastmath flags would apply to an inlined body, and without "reassoc"
# the sum below stays a scalar chain (4x slower)
@njit(fastmath={"reassoc", "contract"}, **_VEC)
def _row_lse(x, acc):
    """log sum exp of a row x [V] (float32/float64), as float64; acc [16] of x's dtype."""
    m = np.float64(_row_max(x, acc))
    total = 0.0
    for v in range(x.shape[0]):
        total += _exp(np.float64(x[v]) - m)
    return m + math.log(total)


@njit(inline="always", fastmath={"contract"}, **_VEC)
def _grad_row(x, lse, occ, g):
    """g[v] = occ * softmax(x)[v] for a row x [V] with log normaliser lse (g may be x)."""
    for v in range(x.shape[0]):
        g[v] = _exp(np.float64(x[v]) - lse) * occ


@njit(parallel=True, **_VEC)
def _node_stats(logits, targets, input_lengths, target_lengths, blank, lse, lpb, lpl):
    """Stage 1 over given logits [B, T, U1, V]: fills lse, lpb, lpl float64 [B, T, U1] at the
    valid nodes."""
    B, T = logits.shape[0], logits.shape[1]
    for bt in prange(B * T):
        b = bt // T
        t = bt - b * T
        if t >= input_lengths[b]:
            continue
        acc = np.empty(16, dtype=logits.dtype)
        Ub = target_lengths[b]
        for u in range(Ub + 1):
            row = logits[b, t, u]
            s = _row_lse(row, acc)
            lse[b, t, u] = s
            lpb[b, t, u] = row[blank] - s
            if u < Ub:
                lpl[b, t, u] = row[targets[b, u]] - s


@njit(**_VEC)
def _lse2(a, b):
    m = max(a, b)
    if m == NEG_INF:
        return NEG_INF
    return m + math.log1p(math.exp(min(a, b) - m))


@njit(**_VEC)
def _sequence(lpb, lpl, b, Tb, Ub, pb, pl):
    """Stage 2 for sequence b: alpha, beta, and the posteriors into pb, pl [B, T, U1] (zero
    where the path is impossible). Returns float64 -log p(y | x)."""
    if Tb == 0:
        return np.inf
    U1 = Ub + 1
    alpha = np.empty((Tb, U1))
    alpha[0, 0] = 0.0
    for u in range(1, U1):
        alpha[0, u] = alpha[0, u - 1] + lpl[b, 0, u - 1]
    for t in range(1, Tb):
        alpha[t, 0] = alpha[t - 1, 0] + lpb[b, t - 1, 0]
        for u in range(1, U1):
            alpha[t, u] = _lse2(alpha[t - 1, u] + lpb[b, t - 1, u],
                                alpha[t, u - 1] + lpl[b, t, u - 1])
    # beta with rows in place of one another: row t+1 is read while row t is written
    beta = np.empty((Tb, U1))
    beta[Tb - 1, Ub] = lpb[b, Tb - 1, Ub]
    for u in range(Ub - 1, -1, -1):
        beta[Tb - 1, u] = beta[Tb - 1, u + 1] + lpl[b, Tb - 1, u]
    for t in range(Tb - 2, -1, -1):
        beta[t, Ub] = beta[t + 1, Ub] + lpb[b, t, Ub]
        for u in range(Ub - 1, -1, -1):
            beta[t, u] = _lse2(beta[t + 1, u] + lpb[b, t, u], beta[t, u + 1] + lpl[b, t, u])
    logz = beta[0, 0]
    if not math.isfinite(logz):  # every path underflowed: no gradient
        for t in range(Tb):
            for u in range(U1):
                pb[b, t, u] = 0.0
                pl[b, t, u] = 0.0
        return np.inf
    for t in range(Tb):
        for u in range(U1):
            a = alpha[t, u] - logz
            if t + 1 < Tb:
                pb[b, t, u] = math.exp(a + lpb[b, t, u] + beta[t + 1, u])
            else:
                pb[b, t, u] = math.exp(a + lpb[b, t, u]) if u == Ub else 0.0
            pl[b, t, u] = math.exp(a + lpl[b, t, u] + beta[t, u + 1]) if u < Ub else 0.0
    return -logz


@njit(parallel=True, **_VEC)
def _lattice(lpb, lpl, input_lengths, target_lengths, costs, pb, pl):
    """Stage 2 for every sequence (in parallel): costs [B] and the posteriors pb, pl."""
    for b in prange(lpb.shape[0]):
        costs[b] = _sequence(lpb, lpl, b, input_lengths[b], target_lengths[b], pb, pl)


@njit(parallel=True, **_VEC)
def _node_grads(logits, targets, input_lengths, target_lengths, blank, lse, pb, pl, grad):
    """Stage 3 over given logits: grad [B, T, U1, V] (may be logits itself), zero on padding."""
    B, T, U1 = logits.shape[0], logits.shape[1], logits.shape[2]
    for bt in prange(B * T):
        b = bt // T
        t = bt - b * T
        Ub = target_lengths[b]
        for u in range(U1):
            g = grad[b, t, u]
            if t >= input_lengths[b] or u > Ub:
                g[:] = 0
                continue
            _grad_row(logits[b, t, u], lse[b, t, u], pb[b, t, u] + pl[b, t, u], g)
            g[blank] -= pb[b, t, u]
            if u < Ub:
                g[targets[b, u]] -= pl[b, t, u]


def _ints(*arrays):
    return tuple(np.ascontiguousarray(a, dtype=np.int32) for a in arrays)


def _node_arrays(B, T, U1):
    """float64 [B, T, U1] arrays lse, lpb, lpl, pb, pl (lpl's last column stays unused)."""
    return tuple(np.zeros((B, T, U1)) for _ in range(5))


def rnnt_loss(logits, targets, input_lengths, target_lengths, blank: int = 0, out=None):
    """RNN-T cost and gradient on the CPU; same contract as ``reference.rnnt.rnnt_loss``.

    Takes logits float32/float64 [B, T, U+1, V] (C-contiguous for ``out=logits``), targets int32
    [B, S], input_lengths and target_lengths int32 [B] (checked by the caller,
    ``asrkit.kernels.rnnt``), and ``out``: None, or an array like ``logits`` (``logits`` itself
    included) to write the gradient into. Returns costs [B] and grad [B, T, U+1, V] in the dtype
    of ``logits``.
    """
    x = np.ascontiguousarray(logits)
    B, T, U1, _ = x.shape
    tg, il, tl = _ints(targets, input_lengths, target_lengths)
    lse, lpb, lpl, pb, pl = _node_arrays(B, T, U1)
    costs = np.empty(B)
    _node_stats(x, tg, il, tl, int(blank), lse, lpb, lpl)
    _lattice(lpb, lpl, il, tl, costs, pb, pl)
    grad = np.empty_like(x) if out is None else out
    _node_grads(x, tg, il, tl, int(blank), lse, pb, pl, grad)
    return costs.astype(x.dtype), grad


# ---------------------------------------------------------------------------------------------
# the joiner merged into the loss


@njit(**_VEC)
def _node_rows(input_lengths, target_lengths):
    """The valid nodes in (b, t, u) order: int32 [R, 3]."""
    R = 0
    for b in range(input_lengths.shape[0]):
        R += input_lengths[b] * (target_lengths[b] + 1)
    rows = np.empty((R, 3), dtype=np.int32)
    r = 0
    for b in range(input_lengths.shape[0]):
        for t in range(input_lengths[b]):
            for u in range(target_lengths[b] + 1):
                rows[r, 0] = b
                rows[r, 1] = t
                rows[r, 2] = u
                r += 1
    return rows


@njit(**_VEC)
def _kept_rows(rows, pb, pl, prune):
    """The nodes of ``rows`` whose occupancy pb + pl is at least ``prune``: int32 [R', 3]."""
    keep = np.empty(rows.shape[0], dtype=np.bool_)
    n = 0
    for r in range(rows.shape[0]):
        b, t, u = rows[r, 0], rows[r, 1], rows[r, 2]
        keep[r] = pb[b, t, u] + pl[b, t, u] >= prune
        n += keep[r]
    out = np.empty((n, 3), dtype=np.int32)
    i = 0
    for r in range(rows.shape[0]):
        if keep[r]:
            out[i] = rows[r]
            i += 1
    return out


@njit(inline="always", fastmath={"contract"}, **_VEC)
def _tanh_row(e, p, h):
    H = e.shape[0]
    for j in range(H):
        h[j] = fast_tanh(e[j] + p[j])
    h[H] = 1


@njit(**_VEC)
def _hidden(enc, pred, rows, h):
    """h[i] = [tanh(enc[t, b] + pred[u, b]), 1] for the nodes rows[i] = (b, t, u)."""
    for i in range(rows.shape[0]):
        _tanh_row(enc[rows[i, 1], rows[i, 0]], pred[rows[i, 2], rows[i, 0]], h[i])


@njit(**_VEC)
def _block_stats(z, rows, targets, target_lengths, blank, lse, lpb, lpl):
    """Stage 1 on a block of joiner outputs z [n, V] for the nodes rows [n, 3]."""
    acc = np.empty(16, dtype=z.dtype)
    for i in range(rows.shape[0]):
        b, t, u = rows[i, 0], rows[i, 1], rows[i, 2]
        row = z[i]
        s = _row_lse(row, acc)
        lse[b, t, u] = s
        lpb[b, t, u] = row[blank] - s
        if u < target_lengths[b]:
            lpl[b, t, u] = row[targets[b, u]] - s


@njit(**_VEC)
def _block_grads(z, rows, targets, target_lengths, blank, lse, pb, pl):
    """Stage 3 in place on a block of joiner outputs z [n, V]: z becomes d cost / d z."""
    for i in range(rows.shape[0]):
        b, t, u = rows[i, 0], rows[i, 1], rows[i, 2]
        g = z[i]
        _grad_row(g, lse[b, t, u], pb[b, t, u] + pl[b, t, u], g)
        g[blank] -= pb[b, t, u]
        if u < target_lengths[b]:
            g[targets[b, u]] -= pl[b, t, u]


@njit(fastmath={"contract"}, **_VEC)
def _scatter_hidden_grads(dh, h, rows, d_enc, d_pred):
    """da = dh * (1 - h^2) per node, added into d_enc[t, b] and d_pred[u, b]."""
    H = d_enc.shape[2]
    for i in range(rows.shape[0]):
        de = d_enc[rows[i, 1], rows[i, 0]]
        dp = d_pred[rows[i, 2], rows[i, 0]]
        dhi = dh[i]
        hi = h[i]
        for j in range(H):
            a = dhi[j] * (1 - hi[j] * hi[j])
            de[j] += a
            dp[j] += a


def _split(n: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous ranges of about equal size covering ``range(n)`` (none empty)."""
    edges = np.linspace(0, n, max(1, min(parts, n)) + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]) if b > a]


def _in_workers(bounds, fn):
    """Run ``fn(k, r0, r1)`` for each range k, one per thread, each with single-threaded BLAS
    calls (``_gemm.in_worker_threads``): one kind of thread at a time on the cores, no
    synchronisation between blocks."""
    in_worker_threads(fn, [(k, r0, r1) for k, (r0, r1) in enumerate(bounds)])


def rnnt_joiner_loss(enc, pred, weight, bias, targets, input_lengths, target_lengths,
                     blank: int = 0, block: int = BLOCK_ROWS, prune: float = PRUNE,
                     threads: int | None = None):
    """RNN-T loss of the additive joiner with the joiner merged in, on the CPU.

    Same contract as ``reference.rnnt.rnnt_joiner_loss``: enc float [T, B, H], pred float
    [U+1, B, H], weight [V, H], bias [V], targets int32 [B, S], input_lengths and target_lengths
    int32 [B] (checked by the caller). ``block``: joiner rows per GEMM; ``prune``: nodes of
    lower occupancy are left out of the backward (see the module docstring; 0 keeps all);
    ``threads`` (None: numba's thread count): the nodes are dealt into that many contiguous
    ranges, each worked through by one thread with single-threaded GEMMs.
    Returns ``(costs [B], (d_enc, d_pred, d_weight, d_bias))`` in the dtype of ``enc``.
    """
    dt = np.dtype(enc.dtype) if np.dtype(enc.dtype) in (np.float32, np.float64) \
        else np.dtype(np.float32)
    enc = np.ascontiguousarray(enc, dtype=dt)
    pred = np.ascontiguousarray(pred, dtype=dt)
    T, B, H = enc.shape
    U1 = pred.shape[0]
    V = weight.shape[0]
    w_aug = np.empty((V, H + 1), dt)   # [W | b]: the bias is the weight of a constant 1
    w_aug[:, :H] = weight
    w_aug[:, H] = bias
    w_aug_t = np.ascontiguousarray(w_aug.T)
    tg, il, tl = _ints(targets, input_lengths, target_lengths)
    blank = int(blank)
    lse, lpb, lpl, pb, pl = _node_arrays(B, T, U1)
    workers = 1 if blas_threads_local() is None else max(1, int(threads or numba.get_num_threads()))

    rows = _node_rows(il, tl)

    def forward(k, r0, r1):
        h = np.empty((min(block, r1 - r0), H + 1), dt)
        z = np.empty((min(block, r1 - r0), V), dt)
        for s0 in range(r0, r1, block):
            rb = rows[s0:min(s0 + block, r1)]
            n = rb.shape[0]
            _hidden(enc, pred, rb, h[:n])
            np.matmul(h[:n], w_aug_t, out=z[:n])
            _block_stats(z[:n], rb, tg, tl, blank, lse, lpb, lpl)

    _in_workers(_split(rows.shape[0], workers), forward)
    costs = np.empty(B)
    _lattice(lpb, lpl, il, tl, costs, pb, pl)

    kept = _kept_rows(rows, pb, pl, float(prune))
    bounds = _split(kept.shape[0], workers)
    # each worker adds into its own gradients (nodes of two ranges may share a frame, and all
    # share label positions and the weights); the first worker's are the results
    acc = [(np.zeros((T, B, H), dt), np.zeros((U1, B, H), dt), np.zeros((V, H + 1), dt))
           for _ in range(max(1, len(bounds)))]

    def backward(k, r0, r1):
        d_enc, d_pred, d_w_aug = acc[k]
        m = min(block, r1 - r0)
        h = np.empty((m, H + 1), dt)
        z = np.empty((m, V), dt)
        dh = np.empty((m, H + 1), dt)
        dw_part = np.empty((V, H + 1), dt)
        for s0 in range(r0, r1, block):
            rb = kept[s0:min(s0 + block, r1)]
            n = rb.shape[0]
            _hidden(enc, pred, rb, h[:n])
            np.matmul(h[:n], w_aug_t, out=z[:n])
            _block_grads(z[:n], rb, tg, tl, blank, lse, pb, pl)
            np.matmul(z[:n], w_aug, out=dh[:n])
            np.matmul(z[:n].T, h[:n], out=dw_part)
            d_w_aug += dw_part
            _scatter_hidden_grads(dh[:n], h[:n], rb, d_enc, d_pred)

    _in_workers(bounds, backward)
    d_enc, d_pred, d_w_aug = acc[0]
    for other in acc[1:]:
        for mine, theirs in zip(acc[0], other):
            mine += theirs
    d_weight = np.ascontiguousarray(d_w_aug[:, :H])
    d_bias = np.ascontiguousarray(d_w_aug[:, H])
    return costs.astype(dt), (d_enc, d_pred, d_weight, d_bias)
