"""CTC loss, gradient and Viterbi forced alignment in plain numpy: the specification.

This is the twin the Numba kernels (``kernels/cpu/ctc.py``, ``kernels/cuda/ctc.py``) are tested
against. It is dtype-generic: float32 logits give float32 results, float64 logits give float64
results (so the gradient can be checked by finite differences); the recursions always run in
float64.

The lattice (Graves et al., 2006): a target ``l`` of length L becomes the extended sequence
``l' = (blank, l1, blank, l2, ..., lL, blank)`` of 2L+1 states. A path may stay in a state, move
to the next one, or skip the blank between two *different* labels. ``alpha[t, s]`` is the log
probability of all path prefixes ending in state s at frame t, ``beta[t, s]`` that of all suffixes
starting in state s at frame t; both include the emission at frame t, so the state posterior is
``exp(alpha + beta - logp[t, l'_s] - log p(l|x))`` and the gradient of ``-log p`` with respect to
the unnormalised logits (log-softmax fused) is ``softmax - sum of posteriors per class``.
"""

from __future__ import annotations

import numpy as np

NEG_INF = -np.inf


def extend_targets(target: np.ndarray, blank: int) -> np.ndarray:
    """Interleave blanks: int [L] -> int [2L+1] ``(blank, l1, blank, ..., lL, blank)``."""
    ext = np.full(2 * len(target) + 1, blank, dtype=np.int64)
    ext[1::2] = target
    return ext


def min_frames(target: np.ndarray) -> int:
    """Frames a target of int [L] needs at least: L plus one blank per repeated label pair."""
    target = np.asarray(target)
    return int(len(target) + np.count_nonzero(target[1:] == target[:-1]))


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """float [..., C] -> float64 [..., C] log-softmax over the last axis."""
    x = logits.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - (m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True)))


def _logsumexp(*terms: np.ndarray) -> np.ndarray:
    """Elementwise log(sum(exp(terms))) over equal-shaped float64 arrays; all -inf gives -inf."""
    stack = np.stack(terms)
    m = stack.max(axis=0)
    safe = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        return np.where(np.isfinite(m), safe + np.log(np.exp(stack - safe).sum(axis=0)), m)


def _skip_allowed(ext: np.ndarray) -> np.ndarray:
    """bool [2L+1]: state s may be entered from s-2 (a label differing from the one before)."""
    allowed = np.zeros(len(ext), dtype=bool)
    allowed[3::2] = ext[3::2] != ext[1:-2:2]
    return allowed


def ctc_alpha(logp: np.ndarray, ext: np.ndarray) -> np.ndarray:
    """Forward variables: logp float64 [T, C], ext int [N] -> alpha float64 [T, N] (log space)."""
    T, N = logp.shape[0], len(ext)
    skip = _skip_allowed(ext)
    alpha = np.full((T, N), NEG_INF)
    alpha[0, :min(2, N)] = logp[0, ext[:min(2, N)]]
    for t in range(1, T):
        prev = alpha[t - 1]
        stay = prev
        step = np.concatenate(([NEG_INF], prev[:-1]))
        jump = np.where(skip, np.concatenate(([NEG_INF, NEG_INF], prev[:-2]))[:N], NEG_INF)
        alpha[t] = _logsumexp(stay, step, jump) + logp[t, ext]
    return alpha


def ctc_beta(logp: np.ndarray, ext: np.ndarray) -> np.ndarray:
    """Backward variables: logp float64 [T, C], ext int [N] -> beta float64 [T, N] (log space)."""
    T, N = logp.shape[0], len(ext)
    # entering s+2 from s is allowed exactly when s+2 may be entered by a skip
    skip_from = np.concatenate((_skip_allowed(ext)[2:], [False, False]))[:N]
    beta = np.full((T, N), NEG_INF)
    beta[T - 1, max(N - 2, 0):] = logp[T - 1, ext[max(N - 2, 0):]]
    for t in range(T - 2, -1, -1):
        nxt = beta[t + 1]
        stay = nxt
        step = np.concatenate((nxt[1:], [NEG_INF]))
        jump = np.where(skip_from, np.concatenate((nxt[2:], [NEG_INF, NEG_INF]))[:N], NEG_INF)
        beta[t] = _logsumexp(stay, step, jump) + logp[t, ext]
    return beta


def _check(logits, targets, input_lengths, target_lengths):
    """numpy views of the arguments, targets as [B, S]; shapes are checked by the dispatcher."""
    logits = np.asarray(logits)
    targets = np.asarray(targets)
    input_lengths = np.asarray(input_lengths)
    target_lengths = np.asarray(target_lengths)
    if logits.ndim != 3:
        raise ValueError(f"logits must be [T, B, C], got shape {logits.shape}")
    return logits, targets.reshape(logits.shape[1], -1), input_lengths, target_lengths


def ctc_loss(logits, targets, input_lengths, target_lengths, blank: int = 0):
    """CTC negative log-likelihood per sequence and its gradient with respect to the logits.

    Takes logits float [T, B, C] (unnormalised; log-softmax is applied here), targets int [B, S]
    (padded), input_lengths and target_lengths int [B]. Returns costs [B] (``-log p(target |
    input)``; inf when no alignment fits) and grad [T, B, C] (``d sum(costs) / d logits``; zero
    on padded frames and for impossible sequences), both in the dtype of ``logits``.
    """
    logits, targets, input_lengths, target_lengths = _check(
        logits, targets, input_lengths, target_lengths)
    T, B, C = logits.shape
    dtype = logits.dtype if logits.dtype in (np.float32, np.float64) else np.float64
    costs = np.zeros(B, dtype=np.float64)
    grad = np.zeros((T, B, C), dtype=np.float64)
    for b in range(B):
        Tb, L = int(input_lengths[b]), int(target_lengths[b])
        target = targets[b, :L].astype(np.int64)
        if Tb < min_frames(target) or Tb == 0:
            costs[b] = 0.0 if Tb == 0 and L == 0 else np.inf  # no frames: only "" is possible
            continue
        ext = extend_targets(target, blank)
        logp = log_softmax(logits[:Tb, b])
        alpha = ctc_alpha(logp, ext)
        beta = ctc_beta(logp, ext)
        logz = np.logaddexp(alpha[-1, -1], alpha[-1, -2]) if len(ext) > 1 else alpha[-1, 0]
        costs[b] = -logz
        if logz == NEG_INF:  # every path underflowed: as impossible, no gradient
            continue
        post = np.exp(alpha + beta - logp[:, ext] - logz)  # [Tb, N] state posteriors
        occupancy = np.zeros((Tb, C))
        np.add.at(occupancy, (slice(None), ext), post)
        grad[:Tb, b] = np.exp(logp) - occupancy
    return costs.astype(dtype), grad.astype(dtype)


def ctc_align(logits, targets, input_lengths, target_lengths, blank: int = 0,
              return_scores: bool = False):
    """Viterbi forced alignment: the best frame-level path through the CTC lattice.

    Takes logits or log-probabilities float [T, B, C] (the best path is the same for both, since
    the per-frame log-softmax normaliser is shared by all paths), targets int [B, S], input_lengths
    and target_lengths int [B]. Returns int32 [T, B]: the class (label or blank) of each frame
    on the best path, -1 on padded frames and for sequences no alignment fits. With
    ``return_scores``, also returns float64 [B]: the sum of the input over the best path (its
    log-probability when log-probabilities are given), -inf when impossible. Ties prefer staying
    in a state over moving on, and moving by one over skipping; at the end, the final blank.
    """
    logits, targets, input_lengths, target_lengths = _check(
        logits, targets, input_lengths, target_lengths)
    T, B, C = logits.shape
    path = np.full((T, B), -1, dtype=np.int32)
    scores = np.full(B, NEG_INF)
    for b in range(B):
        Tb, L = int(input_lengths[b]), int(target_lengths[b])
        target = targets[b, :L].astype(np.int64)
        if Tb == 0 or Tb < min_frames(target):
            if Tb == 0 and L == 0:
                scores[b] = 0.0
            continue
        ext = extend_targets(target, blank)
        N = len(ext)
        skip = _skip_allowed(ext)
        x = logits[:Tb, b].astype(np.float64)
        delta = np.full(N, NEG_INF)
        delta[:min(2, N)] = x[0, ext[:min(2, N)]]
        back = np.zeros((Tb, N), dtype=np.int8)  # how many states the path moved to get here
        for t in range(1, Tb):
            new = np.full(N, NEG_INF)
            for s in range(N):
                best, move = delta[s], 0
                if s >= 1 and delta[s - 1] > best:
                    best, move = delta[s - 1], 1
                if skip[s] and delta[s - 2] > best:
                    best, move = delta[s - 2], 2
                new[s] = best + x[t, ext[s]]
                back[t, s] = move
            delta = new
        s = N - 1
        if N > 1 and delta[N - 2] > delta[N - 1]:
            s = N - 2
        scores[b] = delta[s]
        for t in range(Tb - 1, -1, -1):
            path[t, b] = ext[s]
            s -= back[t, s]
    return (path, scores) if return_scores else path
