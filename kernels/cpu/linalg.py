"""The affine map ``times`` on the CPU: one BLAS GEMM per sequence over its valid frames only.

A padded batch ``x [T, B, K]`` holds sequence b's frames as the rows ``t * B + b``: a matrix of
``lengths[b]`` rows with leading dimension ``B * K``, which ``cblas_?gemm`` takes as it is (no
gather, no copy). So the product, its input gradient and its weight gradient each run as B GEMMs
that skip the padding frames, which the numpy twin (:mod:`asrkit.kernels.reference.linalg`, one
GEMM over all ``T * B`` rows) multiplies too: with lengths drawn from T/2..T that is a third of
the FLOPs of every dense layer. The sequences are dealt into one group of about equal frames
per kernel thread, each group's GEMMs single-threaded in a thread of its own
(``_gemm.in_worker_threads``, as the attention's projections): one hand-off per op rather
than BLAS's threads meeting at every GEMM (a batch of fewer sequences than threads keeps BLAS's
threads). Inputs this does not cover (other ranks, a vector W, mixed dtypes, batches with
little padding) go to the twin.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from asrkit.kernels.cpu._gemm import (
    NO_TRANS,
    TRANS,
    gemm_at,
    gemm_function,
    in_worker_threads,
    kernel_threads,
    sequence_groups,
)
from asrkit.kernels.reference import linalg as ref

MAX_VALID_FRACTION = 0.95  # above this share of valid frames, one GEMM over every row


@njit(cache=True, nogil=True)
def _per_sequence(gemm, a, w, lengths, seqs, out, trans_w):
    """``out[:L_b, b] = a[:L_b, b] @ op(w)`` for the b of ``seqs`` (``op(w) = w.T`` when
    ``trans_w``), their padding rows of ``out`` zero; ``a [T, B, K]``, ``out [T, B, N]``
    C-contiguous."""
    T, B, K = a.shape
    N = out.shape[2]
    af, wf, of = a.reshape(-1), w.reshape(-1), out.reshape(-1)
    ldw = K if trans_w else N
    for b in seqs:
        L = lengths[b]
        gemm_at(gemm, NO_TRANS, TRANS if trans_w else NO_TRANS, L, N, K, af, b * K, B * K, wf, 0,
                ldw, 0.0, of, b * N, B * N)
        for t in range(max(L, 0), T):
            out[t, b, :] = 0


@njit(cache=True, nogil=True)
def _weight_grad(gemm, x, g, lengths, seqs, gw):
    """``gw = sum_b x[:L_b, b].T @ g[:L_b, b]`` over the b of ``seqs``; ``x [T, B, K]``,
    ``g [T, B, N]``."""
    T, B, K = x.shape
    N = g.shape[2]
    xf, gf, wf = x.reshape(-1), g.reshape(-1), gw.reshape(-1)
    for i in range(seqs.size):
        b = seqs[i]
        gemm_at(gemm, TRANS, NO_TRANS, K, N, lengths[b], xf, b * K, B * K, gf, b * N, B * N,
                0.0 if i == 0 else 1.0, wf, 0, N)


def _in_groups(lengths, fn):
    """``fn(k, seqs)`` for groups k of sequences (int64 arrays): one group per kernel thread,
    each in a thread of its own with single-threaded BLAS; one group in this thread with
    BLAS's threads where the batch has fewer sequences than there are threads."""
    threads = kernel_threads()
    groups = [np.array(g, np.int64) for g in sequence_groups(lengths, threads)]
    if len(groups) < threads:
        fn(0, np.arange(lengths.size, dtype=np.int64))
        return 1
    in_worker_threads(fn, list(enumerate(groups)))
    return len(groups)


def _covered(x, W, lengths, *others) -> bool:
    """Whether the per-sequence GEMMs apply: a 3-D sequence with lengths and enough padding,
    a matrix W, one float dtype."""
    if lengths is None or x.ndim != 3 or W.ndim != 2 or x.shape[0] * x.shape[1] == 0:
        return False
    if x.dtype not in (np.float32, np.float64) or \
            any(a.dtype != x.dtype for a in (W, *others) if a is not None):
        return False
    return float(np.sum(lengths)) <= MAX_VALID_FRACTION * x.shape[0] * x.shape[1]


def _lengths(lengths, T):
    return np.clip(np.asarray(lengths, np.int64), 0, T)


def times(x, W, lengths=None, out=None):
    """``x [..., K] @ W [K, N]`` -> ``[..., N]`` (into ``out`` when given), zero on padding
    frames when ``lengths`` are given (see the twin)."""
    if not _covered(x, W, lengths, out) or (out is not None and not out.flags.c_contiguous):
        return ref.times(x, W, lengths, out)
    x, W = np.ascontiguousarray(x), np.ascontiguousarray(W)
    y = np.empty(x.shape[:2] + (W.shape[1],), x.dtype) if out is None else out
    L, gemm = _lengths(lengths, x.shape[0]), gemm_function(x.dtype)
    _in_groups(L, lambda k, seqs: _per_sequence(gemm, x, W, L, seqs, y, False))
    return y


def times_backward(g, x, W, lengths=None, want=(True, True)):
    """``(gx, gW)`` of :func:`times` for the output gradient ``g`` (None where ``want`` is
    False)."""
    if not _covered(x, W, lengths, g):
        return ref.times_backward(g, x, W, lengths, want)
    g, x, W = np.ascontiguousarray(g), np.ascontiguousarray(x), np.ascontiguousarray(W)
    L = _lengths(lengths, x.shape[0])
    gemm = gemm_function(x.dtype)
    gx = np.empty(x.shape, x.dtype) if want[0] else None
    # each group adds into its own weight gradient; the first one's is the result
    parts = [np.empty(W.shape, x.dtype) for _ in range(kernel_threads())] if want[1] else None

    def grads(k, seqs):
        if gx is not None:
            _per_sequence(gemm, g, W, L, seqs, gx, True)
        if parts is not None:
            _weight_grad(gemm, x, g, L, seqs, parts[k])

    n = _in_groups(L, grads)
    gW = None
    if parts is not None:
        gW = parts[0]
        for p in parts[1:n]:
            gW += p
    return gx, gW
