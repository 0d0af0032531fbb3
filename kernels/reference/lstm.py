"""Plain-numpy LSTM: the specification the CPU and CUDA kernels are tested against.

One direction of a (projected) LSTM over a padded batch ``x [T, B, I]`` with ``lengths [B]``,
gate order i, f, g, o as ``torch.nn.LSTM``::

    a_t = W_ih x_t + b_ih + W_hh h_{t-1} + b_hh          (4H)
    i, f, g, o = sigmoid(a_i), sigmoid(a_f), tanh(a_g), sigmoid(a_o)
    c_t = f * c_{t-1} + i * g
    m_t = o * tanh(c_t)
    h_t = W_hr m_t   (projection, LSTMP)   or   h_t = m_t

Packed-sequence semantics: sequence b is processed for steps s = 0 .. lengths[b]-1; step s reads
frame t = s (forward) or t = lengths[b]-1-s (``reverse=True``, each sequence starts at its own
end). Padded frames give ``y = 0`` and leave the state alone, so ``h_n, c_n`` are each
sequence's state after its own last step.

Everything is dtype-generic (float64 for gradient checks) and written for clarity, not speed.
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass
class ReferenceLSTMCache:
    """What :func:`lstm_backward` needs; arrays indexed by frame ``t`` (not by step)."""

    x: np.ndarray          # [T, B, I] the input (referenced, not copied)
    gates: np.ndarray      # [T, B, 4H] activations i, f, g, o
    c: np.ndarray          # [T, B, H] cell after the frame
    c_prev: np.ndarray     # [T, B, H] cell before the frame
    h_prev: np.ndarray     # [T, B, P] hidden state before the frame
    m: np.ndarray          # [T, B, H] o * tanh(c)
    lengths: np.ndarray    # int64 [B]
    reverse: bool
    w_ih: np.ndarray
    w_hh: np.ndarray
    w_hr: np.ndarray | None
    device: str = "reference"


def _sigmoid(a):
    return 1.0 / (1.0 + np.exp(-a))


def check_lengths(lengths, T: int, B: int) -> np.ndarray:
    """Return ``lengths`` as int64 [B] (all T when None); ValueError if any is outside [0, T]."""
    if lengths is None:
        return np.full(B, T, dtype=np.int64)
    lengths = np.asarray(lengths)
    if lengths.shape != (B,):
        raise ValueError(f"lengths has shape {lengths.shape}, expected ({B},) for a batch of {B}")
    if not np.issubdtype(lengths.dtype, np.integer):
        raise ValueError(f"lengths must be integers, got {lengths.dtype}")
    bad = np.nonzero((lengths < 0) | (lengths > T))[0]
    if bad.size:
        b = int(bad[0])
        raise ValueError(f"lengths[{b}] = {int(lengths[b])} is outside [0, T={T}]")
    return lengths.astype(np.int64)


def frames_at_step(s: int, lengths: np.ndarray, reverse: bool):
    """Sequences active at step ``s`` and the frame each reads: ``(b [n], t [n])``."""
    b = np.nonzero(s < lengths)[0]
    t = lengths[b] - 1 - s if reverse else np.full(b.size, s, dtype=np.int64)
    return b, t


def lstm_forward(x, h0, c0, w_ih, w_hh, b_ih, b_hh, lengths=None, reverse=False, w_hr=None):
    """One LSTM direction over a padded batch.

    Takes ``x [T, B, I]``, ``h0 [B, P]``, ``c0 [B, H]``, ``w_ih [4H, I]``, ``w_hh [4H, P]``,
    ``b_ih, b_hh [4H]``, optional ``lengths int[B]`` and ``w_hr [P, H]`` (P = H without it).
    Returns ``y [T, B, P]``, ``h_n [B, P]``, ``c_n [B, H]`` and a :class:`ReferenceLSTMCache`.
    """
    x = np.asarray(x)
    T, B, _ = x.shape
    H = w_hh.shape[0] // 4
    P = H if w_hr is None else w_hr.shape[0]
    dt = np.result_type(x, w_ih)
    lengths = check_lengths(lengths, T, B)
    h = np.array(h0, dtype=dt, copy=True)
    c = np.array(c0, dtype=dt, copy=True)
    y = np.zeros((T, B, P), dt)
    gates = np.zeros((T, B, 4 * H), dt)
    cs, c_prev, ms = (np.zeros((T, B, H), dt) for _ in range(3))
    h_prev = np.zeros((T, B, P), dt)
    for s in range(T):
        b, t = frames_at_step(s, lengths, reverse)
        if b.size == 0:
            break
        a = x[t, b] @ w_ih.T + b_ih + h[b] @ w_hh.T + b_hh
        i, f = _sigmoid(a[:, :H]), _sigmoid(a[:, H:2 * H])
        g, o = np.tanh(a[:, 2 * H:3 * H]), _sigmoid(a[:, 3 * H:])
        c_new = f * c[b] + i * g
        m = o * np.tanh(c_new)
        h_new = m if w_hr is None else m @ w_hr.T
        gates[t, b] = np.concatenate([i, f, g, o], axis=1)
        c_prev[t, b], h_prev[t, b] = c[b], h[b]
        cs[t, b], ms[t, b] = c_new, m
        c[b], h[b] = c_new, h_new
        y[t, b] = h_new
    cache = ReferenceLSTMCache(x, gates, cs, c_prev, h_prev, ms, lengths, bool(reverse),
                               w_ih, w_hh, w_hr)
    return y, h, c, cache


def lstm_backward(dy, dh_n, dc_n, cache: ReferenceLSTMCache):
    """Gradients of one LSTM direction from :func:`lstm_forward`'s cache.

    Takes ``dy [T, B, P]``, ``dh_n [B, P]``, ``dc_n [B, H]`` (any may be None for zero).
    Returns ``(dx, dh0, dc0, dw_ih, dw_hh, db_ih, db_hh)`` with the shapes of the forward's
    arguments, plus ``dw_hr [P, H]`` as an eighth element when the forward had a projection.
    """
    x, gates = cache.x, cache.gates
    T, B, _ = x.shape
    H = gates.shape[2] // 4
    P = cache.h_prev.shape[2]
    dt = gates.dtype
    dy = np.zeros((T, B, P), dt) if dy is None else np.asarray(dy, dt)
    dh = np.zeros((B, P), dt) if dh_n is None else np.array(dh_n, dt, copy=True)
    dc = np.zeros((B, H), dt) if dc_n is None else np.array(dc_n, dt, copy=True)
    dx = np.zeros(x.shape, dt)
    dw_ih = np.zeros(cache.w_ih.shape, dt)
    dw_hh = np.zeros(cache.w_hh.shape, dt)
    db = np.zeros(4 * H, dt)
    dw_hr = None if cache.w_hr is None else np.zeros(cache.w_hr.shape, dt)
    for s in range(T - 1, -1, -1):
        b, t = frames_at_step(s, cache.lengths, cache.reverse)
        if b.size == 0:
            continue
        dh_t = dh[b] + dy[t, b]
        if cache.w_hr is None:
            dm = dh_t
        else:
            dw_hr += dh_t.T @ cache.m[t, b]
            dm = dh_t @ cache.w_hr
        g4 = gates[t, b]
        i, f, g, o = g4[:, :H], g4[:, H:2 * H], g4[:, 2 * H:3 * H], g4[:, 3 * H:]
        tc = np.tanh(cache.c[t, b])
        dct = dc[b] + dm * o * (1.0 - tc * tc)
        da = np.concatenate([dct * g * i * (1.0 - i),
                             dct * cache.c_prev[t, b] * f * (1.0 - f),
                             dct * i * (1.0 - g * g),
                             dm * tc * o * (1.0 - o)], axis=1)
        dc[b] = dct * f
        dh[b] = da @ cache.w_hh
        dx[t, b] = da @ cache.w_ih
        dw_ih += da.T @ x[t, b]
        dw_hh += da.T @ cache.h_prev[t, b]
        db += da.sum(axis=0)
    out = (dx, dh, dc, dw_ih, dw_hh, db, db.copy())
    return out if dw_hr is None else (*out, dw_hr)


def join_directions(yf, yb, hf, hb, cf, cb):
    """BLSTM outputs from the two directions: ``y [T, B, 2P]``, ``h_n [2, B, P]``, ``c_n``."""
    return np.concatenate([yf, yb], axis=-1), np.stack([hf, hb]), np.stack([cf, cb])


def join_gradients(gf, gb):
    """BLSTM gradients: ``dx`` summed over the directions, every other gradient stacked."""
    return (gf[0] + gb[0], *(np.stack([a, b]) for a, b in zip(gf[1:], gb[1:])))
