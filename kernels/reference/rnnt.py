"""RNN-T (transducer) loss and its gradients in plain numpy: the specification.

This is the twin the Numba kernels (``kernels/cpu/rnnt.py``, ``kernels/cuda/rnnt.py``) are tested
against. It is dtype-generic: float32 inputs give float32 results, float64 inputs float64 results
(so gradients can be checked by finite differences); the recursions always run in float64.

The lattice (Graves, 2012, "Sequence transduction with recurrent neural networks"): for a
sequence of T frames and a target ``y`` of U labels, node ``(t, u)`` (``0 <= t < T``,
``0 <= u <= U``) means "u labels emitted, at frame t". The joiner gives a distribution over V
classes at every node, ``logp[t, u] = log_softmax(logits[t, u])``. From ``(t, u)`` a path either
emits the blank and moves to ``(t + 1, u)`` (from ``(T - 1, U)`` that final blank ends the path)
or emits ``y[u]`` and moves to ``(t, u + 1)``. With ``lpb[t, u] = logp[t, u, blank]`` and
``lpl[t, u] = logp[t, u, y[u]]``::

    alpha[0, 0] = 0
    alpha[t, u] = logaddexp(alpha[t-1, u] + lpb[t-1, u], alpha[t, u-1] + lpl[t, u-1])
    beta[T-1, U] = lpb[T-1, U]
    beta[t, u]  = logaddexp(beta[t+1, u] + lpb[t, u], beta[t, u+1] + lpl[t, u])
    log p(y | x) = beta[0, 0] = alpha[T-1, U] + lpb[T-1, U]

The posterior of the blank leaving ``(t, u)`` is ``pb = exp(alpha + lpb + beta[t+1, u] - log p)``
(``beta[T, U] = 0`` for the final blank), that of the label ``pl = exp(alpha + lpl + beta[t, u+1]
- log p)``; their sum is the node's occupancy ``exp(alpha + beta - log p)``. With the log-softmax
fused, the gradient of ``-log p`` with respect to the unnormalised logits of node ``(t, u)`` is
``(pb + pl) * softmax - pb * onehot(blank) - pl * onehot(y[u])``.

Conventions: a sequence with no frames has no path (cost inf, zero gradient); an empty target
costs ``-sum_t lpb[t, 0]``. Nodes outside ``t < T_b``, ``u <= U_b`` (padding) get zero gradients.

The joiner that :func:`rnnt_joiner_loss` merges into the loss is the usual additive one,
``logits[b, t, u] = weight @ tanh(enc[t, b] + pred[u, b]) + bias`` (``weight [V, H]`` as
``torch.nn.Linear`` stores it), with ``enc [T, B, H]`` and ``pred [U+1, B, H]`` the encoder's
and the prediction network's outputs, time-major like every asrkit sequence, already projected
to the joiner's dimension H.
"""

from __future__ import annotations

import numpy as np

from asrkit.kernels.reference.ctc import log_softmax

NEG_INF = -np.inf


def rnnt_alpha(lpb: np.ndarray, lpl: np.ndarray) -> np.ndarray:
    """Forward variables: lpb float64 [T, U+1], lpl float64 [T, U] -> alpha float64 [T, U+1]."""
    T, U1 = lpb.shape
    alpha = np.full((T, U1), NEG_INF)
    alpha[0, 0] = 0.0
    for u in range(1, U1):
        alpha[0, u] = alpha[0, u - 1] + lpl[0, u - 1]
    for t in range(1, T):
        alpha[t, 0] = alpha[t - 1, 0] + lpb[t - 1, 0]
        for u in range(1, U1):
            alpha[t, u] = np.logaddexp(alpha[t - 1, u] + lpb[t - 1, u],
                                       alpha[t, u - 1] + lpl[t, u - 1])
    return alpha


def rnnt_beta(lpb: np.ndarray, lpl: np.ndarray) -> np.ndarray:
    """Backward variables: lpb float64 [T, U+1], lpl float64 [T, U] -> beta float64 [T, U+1]."""
    T, U1 = lpb.shape
    U = U1 - 1
    beta = np.full((T, U1), NEG_INF)
    beta[T - 1, U] = lpb[T - 1, U]
    for u in range(U - 1, -1, -1):
        beta[T - 1, u] = beta[T - 1, u + 1] + lpl[T - 1, u]
    for t in range(T - 2, -1, -1):
        beta[t, U] = beta[t + 1, U] + lpb[t, U]
        for u in range(U - 1, -1, -1):
            beta[t, u] = np.logaddexp(beta[t + 1, u] + lpb[t, u], beta[t, u + 1] + lpl[t, u])
    return beta


def rnnt_posteriors(lpb: np.ndarray, lpl: np.ndarray):
    """log p(y | x) and the transition posteriors of one sequence.

    Takes lpb float64 [T, U+1] (blank) and lpl float64 [T, U] (next label) log-probabilities.
    Returns ``(logz, pb, pl)``: logz a float, pb float64 [T, U+1] the posterior of the blank
    leaving each node, pl float64 [T, U+1] that of the label (zero in the last column).
    """
    T, U1 = lpb.shape
    alpha = rnnt_alpha(lpb, lpl)
    beta = rnnt_beta(lpb, lpl)
    logz = beta[0, 0]
    nxt_blank = np.full((T, U1), NEG_INF)
    nxt_blank[:-1] = beta[1:]
    nxt_blank[T - 1, U1 - 1] = 0.0  # the final blank ends the path
    pb = np.exp(alpha + lpb + nxt_blank - logz)
    pl = np.zeros((T, U1))
    pl[:, :-1] = np.exp(alpha[:, :-1] + lpl + beta[:, 1:] - logz)
    return logz, pb, pl


def _node_log_probs(logits_b: np.ndarray, target: np.ndarray, blank: int):
    """logits float [T, U+1, V], target int [U] -> (logp float64 [T, U+1, V], lpb, lpl)."""
    logp = log_softmax(logits_b)
    lpb = logp[:, :, blank]
    U = len(target)
    lpl = logp[:, np.arange(U), target] if U else np.zeros((logp.shape[0], 0))
    return logp, lpb, lpl


def rnnt_loss(logits, targets, input_lengths, target_lengths, blank: int = 0):
    """RNN-T negative log-likelihood per sequence and its gradient with respect to the logits.

    Takes logits float [B, T, U+1, V] (the joiner's unnormalised output; log-softmax over V is
    applied here), targets int [B, S] padded, input_lengths int [B] (frames T_b <= T) and
    target_lengths int [B] (labels U_b <= min(S, U)). Returns costs [B] (``-log p(y_b | x_b)``,
    inf for a sequence without frames) and grad [B, T, U+1, V] (``d sum(costs) / d logits``, zero
    outside ``t < T_b, u <= U_b``), both in the dtype of ``logits``.
    """
    logits = np.asarray(logits)
    targets = np.asarray(targets)
    B, T, U1, V = logits.shape
    dtype = logits.dtype if logits.dtype in (np.float32, np.float64) else np.float64
    costs = np.zeros(B)
    grad = np.zeros((B, T, U1, V))
    for b in range(B):
        Tb, Ub = int(input_lengths[b]), int(target_lengths[b])
        if Tb == 0:
            costs[b] = np.inf
            continue
        target = targets[b, :Ub].astype(np.int64)
        logp, lpb, lpl = _node_log_probs(logits[b, :Tb, :Ub + 1], target, blank)
        logz, pb, pl = rnnt_posteriors(lpb, lpl)
        costs[b] = -logz
        if not np.isfinite(logz):  # every path underflowed: no gradient
            continue
        g = np.exp(logp) * (pb + pl)[:, :, None]
        g[:, :, blank] -= pb
        g[:, np.arange(Ub), target] -= pl[:, :Ub]
        grad[b, :Tb, :Ub + 1] = g
    return costs.astype(dtype), grad.astype(dtype)


def joiner_hidden(enc, pred) -> np.ndarray:
    """enc [T, B, H], pred [U+1, B, H] -> float64 [B, T, U+1, H]: tanh(enc[t, b] + pred[u, b])."""
    e = np.asarray(enc, np.float64).transpose(1, 0, 2)
    p = np.asarray(pred, np.float64).transpose(1, 0, 2)
    return np.tanh(e[:, :, None, :] + p[:, None, :, :])


def joiner(enc, pred, weight, bias) -> np.ndarray:
    """The additive joiner: enc [T, B, H], pred [U+1, B, H], weight [V, H], bias [V] ->
    logits float64 [B, T, U+1, V] = ``weight @ tanh(enc[t, b] + pred[u, b]) + bias``."""
    return joiner_hidden(enc, pred) @ np.asarray(weight, np.float64).T \
        + np.asarray(bias, np.float64)


def rnnt_joiner_loss(enc, pred, weight, bias, targets, input_lengths, target_lengths,
                     blank: int = 0):
    """RNN-T loss of the additive joiner's logits, with gradients for the joiner's inputs.

    Takes enc float [T, B, H] (encoder output projected to the joiner dimension), pred float
    [U+1, B, H] (prediction network output, projected; row 0 follows the start symbol) -- both
    time-major, as asrkit's sequences are -- weight float [V, H], bias float [V], targets int
    [B, S], input_lengths and target_lengths int [B]. Returns ``(costs [B], (d_enc [T, B, H],
    d_pred [U+1, B, H], d_weight [V, H], d_bias [V]))`` in the dtype of ``enc``: the costs of
    :func:`rnnt_loss` on ``joiner(enc, pred, weight, bias)`` and the gradients of their sum
    (zero on padded frames and label positions). Here the full logits are built: this is the
    specification the memory-lean kernels are checked against.
    """
    enc = np.asarray(enc)
    dtype = enc.dtype if enc.dtype in (np.float32, np.float64) else np.float64
    h = joiner_hidden(enc, pred)
    logits = h @ np.asarray(weight, np.float64).T + np.asarray(bias, np.float64)
    costs, dz = rnnt_loss(logits, targets, input_lengths, target_lengths, blank)
    da = (dz @ np.asarray(weight, np.float64)) * (1.0 - h * h)
    d_weight = np.einsum("btuv,btuh->vh", dz, h)
    d_bias = dz.sum(axis=(0, 1, 2))
    grads = (da.sum(axis=2).transpose(1, 0, 2), da.sum(axis=1).transpose(1, 0, 2), d_weight,
             d_bias)
    return costs.astype(dtype), tuple(np.ascontiguousarray(g, dtype=dtype) for g in grads)
