"""Plain-numpy multi-head self-attention: the specification the CPU and CUDA kernels are tested
against.

Core (:func:`attention_forward`): queries, keys and values ``q, k, v [T, B, D]`` of one padded
batch (``D = H * d``, head h owns features ``h*d .. (h+1)*d - 1``), per sequence b and head h::

    S = scale * (q_h k_h^T)                                  [T, T]
    S[i, j] = -inf where query i may not see key j           (the mask, below)
    P = softmax_j(S),  out_h = P v_h

With relative positions (Transformer-XL; ESPnet's ``RelPositionMultiHeadedAttention`` in its
"latest" form, icefall's conformer) a projected positional embedding ``pos [2T-1, D]`` enters,
row m standing for the relative position ``i - j = T-1-m`` (ESPnet's ``RelPositionalEncoding``
order: T-1 first, -(T-1) last), with two learnt biases ``pos_bias_u, pos_bias_v [H, d]``::

    S[i, j] = scale * ((q_i + u_h) . k_j + (q_i + v_h) . pos_h[T-1-i+j])

The second term is ESPnet's ``rel_shift(matrix_bd)`` written as an index: see :func:`rel_shift`.

The mask: query i of sequence b may see key j when ``j < lengths[b]`` (key padding) and, with
``causal``, ``j <= i``, and, with ``chunk_size = c``, when j's chunk is not after i's
(``j // c <= i // c``) and, with ``left_chunks = n`` (None: all), at most n chunks before it
(``j // c >= i // c - n``): WeNet's ``subsequent_chunk_mask`` and icefall's streaming
``chunk_size`` (``left_chunks = left_context_frames // chunk_size``). Padded queries
(``i >= lengths[b]``) give zero outputs and take no part in any gradient; padded values of
q, k, v are never read.

:func:`mhsa_forward` is the whole layer of ``torch.nn.MultiheadAttention`` (``in_proj_weight``,
``in_proj_bias``, ``out_proj``) around the core, optionally with ESPnet's ``linear_pos``
(``w_pos``) applied to a positional embedding. Everything is dtype-generic (float64 for gradient
checks) and written for clarity, not speed: it keeps every [B, H, T, T] matrix.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from asrkit.kernels.reference.lstm import check_lengths

NEG_INF = -np.inf


def key_window(T: int, causal: bool = False, chunk_size: int | None = None,
               left_chunks: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The keys each query may see before key padding: ``lo, hi int64 [T]``, query i sees
    ``lo[i] <= j < hi[i]``. Both are non-decreasing in i (the kernels rely on it)."""
    i = np.arange(T, dtype=np.int64)
    lo = np.zeros(T, np.int64)
    hi = np.full(T, T, np.int64)
    if chunk_size is not None:
        c = int(chunk_size)
        hi = np.minimum(hi, (i // c + 1) * c)
        if left_chunks is not None:
            lo = np.maximum(lo, (i // c - int(left_chunks)) * c)
    if causal:
        hi = np.minimum(hi, i + 1)
    return lo, hi


def attention_mask(T: int, lengths=None, causal: bool = False, chunk_size: int | None = None,
                   left_chunks: int | None = None, B: int | None = None) -> np.ndarray:
    """``bool [B, T, T]``: ``mask[b, i, j]`` is True where query i of sequence b may see key j
    (the rules of the module docstring, written out); rows of padded queries are all False.
    ``lengths int[B]`` (None: all T, with ``B`` sequences)."""
    if lengths is None:
        lengths = np.full(1 if B is None else B, T, np.int64)
    lengths = np.asarray(lengths, np.int64)
    i = np.arange(T)[:, None]
    j = np.arange(T)[None, :]
    allowed = np.ones((T, T), bool)
    if causal:
        allowed &= j <= i
    if chunk_size is not None:
        allowed &= j // chunk_size <= i // chunk_size
        if left_chunks is not None:
            allowed &= j // chunk_size >= i // chunk_size - left_chunks
    valid = np.arange(T)[None, :] < lengths[:, None]                         # [B, T]
    return allowed[None] & valid[:, :, None] & valid[:, None, :]


def rel_shift(x: np.ndarray) -> np.ndarray:
    """``[..., T, 2T-1] -> [..., T, T]``: ``out[..., i, j] = x[..., i, T-1-i+j]``, the score of
    query i against the relative position ``i - j`` (what ESPnet's ``rel_shift`` computes with
    a zero column, a reshape and a slice)."""
    T = x.shape[-2]
    i = np.arange(T)[:, None]
    j = np.arange(T)[None, :]
    return x[..., i, T - 1 - i + j]


def rel_unshift(g: np.ndarray) -> np.ndarray:
    """The adjoint of :func:`rel_shift`: ``[..., T, T] -> [..., T, 2T-1]`` (zeros where no
    score reads)."""
    T = g.shape[-1]
    out = np.zeros(g.shape[:-1] + (2 * T - 1,), g.dtype)
    i = np.arange(T)[:, None]
    j = np.arange(T)[None, :]
    out[..., i, T - 1 - i + j] = g
    return out


@dataclasses.dataclass
class ReferenceAttentionCache:
    """What :func:`attention_backward` needs."""

    q: np.ndarray          # [B, H, T, d] (padding zeroed)
    k: np.ndarray
    v: np.ndarray
    probs: np.ndarray      # [B, H, T, T] softmax (0 where masked and on padded queries)
    lengths: np.ndarray    # int64 [B]
    scale: np.floating               # of the arrays' dtype
    pos: np.ndarray | None           # [H, 2T-1, d]
    pos_bias_u: np.ndarray | None    # [H, d]
    pos_bias_v: np.ndarray | None
    device: str = "reference"


def _heads(a, lengths, H):
    """``[T, B, D] -> [B, H, T, d]`` with padded frames zeroed."""
    T, B, D = a.shape
    a = np.array(a, copy=True)
    a[np.arange(T)[:, None] >= lengths[None, :]] = 0
    return a.reshape(T, B, H, D // H).transpose(1, 2, 0, 3)


def _merge(a):
    """``[B, H, T, d] -> [T, B, H*d]``."""
    B, H, T, d = a.shape
    return np.ascontiguousarray(a.transpose(2, 0, 1, 3).reshape(T, B, H * d))


def attention_forward(q, k, v, lengths=None, num_heads=1, causal=False, chunk_size=None,
                      left_chunks=None, pos=None, pos_bias_u=None, pos_bias_v=None, scale=None):
    """Multi-head attention core over a padded batch.

    Takes ``q, k, v [T, B, D]``, ``lengths int[B]`` (None: all T), ``num_heads`` H (D % H == 0),
    the mask options, and for relative positions ``pos [2T-1, D]`` with ``pos_bias_u,
    pos_bias_v [H, D/H]``; ``scale`` defaults to ``1/sqrt(D/H)``. Returns ``out [T, B, D]``
    (zero on padded frames) and a :class:`ReferenceAttentionCache`.
    """
    q = np.asarray(q)
    T, B, D = q.shape
    H = int(num_heads)
    d = D // H
    dt = np.result_type(q, k, v)
    lengths = check_lengths(lengths, T, B)
    scale = dt.type(1.0 / np.sqrt(d) if scale is None else scale)
    qh, kh, vh = (_heads(np.asarray(a, dt), lengths, H) for a in (q, k, v))
    ph = bu = bv = None
    if pos is None:
        scores = scale * (qh @ kh.swapaxes(-1, -2))
    else:
        ph = np.asarray(pos, dt).reshape(2 * T - 1, H, d).transpose(1, 0, 2)   # [H, 2T-1, d]
        bu = np.asarray(pos_bias_u, dt).reshape(H, d)
        bv = np.asarray(pos_bias_v, dt).reshape(H, d)
        ac = (qh + bu[None, :, None, :]) @ kh.swapaxes(-1, -2)
        bd = rel_shift((qh + bv[None, :, None, :]) @ ph.swapaxes(-1, -2)[None])
        scores = scale * (ac + bd)
    mask = attention_mask(T, lengths, causal, chunk_size, left_chunks)[:, None]   # [B, 1, T, T]
    scores = np.where(mask, scores, NEG_INF)
    row_max = scores.max(axis=-1, keepdims=True)
    row_max = np.where(np.isfinite(row_max), row_max, 0)
    e = np.where(mask, np.exp(scores - row_max), 0)
    total = e.sum(axis=-1, keepdims=True)
    probs = e / np.where(total > 0, total, 1)
    out = _merge(probs @ vh)
    cache = ReferenceAttentionCache(qh, kh, vh, probs, lengths, scale, ph, bu, bv)
    return out, cache


def attention_backward(dout, cache: ReferenceAttentionCache):
    """Gradients of :func:`attention_forward` given ``dout [T, B, D]`` (ignored on padding).

    Returns ``(dq, dk, dv)`` shaped ``[T, B, D]`` (zero on padding); with relative positions
    also ``dpos [2T-1, D]``, ``dpos_bias_u [H, d]`` and ``dpos_bias_v [H, d]``.
    """
    c = cache
    B, H, T, d = c.q.shape
    do = _heads(np.asarray(dout, c.q.dtype), c.lengths, H)
    P = c.probs
    dv = P.swapaxes(-1, -2) @ do
    dp = do @ c.v.swapaxes(-1, -2)
    ds = c.scale * P * (dp - (dp * P).sum(axis=-1, keepdims=True))   # d(loss)/d(q.k)
    if c.pos is None:
        dq = ds @ c.k
        dk = ds.swapaxes(-1, -2) @ c.q
        return _merge(dq), _merge(dk), _merge(dv)
    dq_ac = ds @ c.k
    dk = ds.swapaxes(-1, -2) @ (c.q + c.pos_bias_u[None, :, None, :])
    dbd = rel_unshift(ds)                                               # [B, H, T, 2T-1]
    dq_bd = dbd @ c.pos[None]
    dpos = (dbd.swapaxes(-1, -2) @ (c.q + c.pos_bias_v[None, :, None, :])).sum(axis=0)
    valid = (np.arange(T)[None, :] < c.lengths[:, None])[:, None, :, None]  # [B, 1, T, 1]
    dbu = np.where(valid, dq_ac, 0).sum(axis=(0, 2))
    dbv = np.where(valid, dq_bd, 0).sum(axis=(0, 2))
    dpos = np.ascontiguousarray(dpos.transpose(1, 0, 2).reshape(2 * T - 1, H * d))
    return _merge(dq_ac + dq_bd), _merge(dk), _merge(dv), dpos, dbu, dbv


@dataclasses.dataclass
class ReferenceMHSACache:
    """What :func:`mhsa_backward` needs."""

    x: np.ndarray
    o: np.ndarray                    # [T, B, D] the core's output
    core: ReferenceAttentionCache
    lengths: np.ndarray
    w_in: np.ndarray
    w_out: np.ndarray
    pos_emb: np.ndarray | None
    w_pos: np.ndarray | None
    device: str = "reference"


def _zero_padding(a, lengths):
    a = np.array(a, copy=True)
    a[np.arange(a.shape[0])[:, None] >= lengths[None, :]] = 0
    return a


def mhsa_forward(x, w_in, b_in, w_out, b_out, num_heads, lengths=None, causal=False,
                 chunk_size=None, left_chunks=None, pos_emb=None, w_pos=None, pos_bias_u=None,
                 pos_bias_v=None, scale=None):
    """Multi-head self-attention layer: ``q, k, v = x w_in^T + b_in``, the core, ``y = o
    w_out^T + b_out``, ``y = 0`` on padded frames.

    Takes ``x [T, B, D]``, ``w_in [3D, D]``, ``b_in [3D]`` (rows q, k, v: torch's
    ``in_proj_weight``/``in_proj_bias``; ESPnet's ``linear_q/k/v`` stacked), ``w_out [D, D]``,
    ``b_out [D]`` (None for no bias), ``num_heads``, ``lengths``, the mask options and, for
    relative positions, ``pos_emb [2T-1, D]`` with ``w_pos [D, D]`` (ESPnet's ``linear_pos``,
    no bias) and ``pos_bias_u, pos_bias_v [H, D/H]``. Returns ``y [T, B, D]`` and a cache.
    """
    x = np.asarray(x)
    T, B, D = x.shape
    dt = np.result_type(x, w_in)
    lengths = check_lengths(lengths, T, B)
    x = _zero_padding(np.asarray(x, dt), lengths)
    qkv = x @ np.asarray(w_in, dt).T
    if b_in is not None:
        qkv = qkv + b_in
    pos = None if pos_emb is None else np.asarray(pos_emb, dt) @ np.asarray(w_pos, dt).T
    o, core = attention_forward(qkv[..., :D], qkv[..., D:2 * D], qkv[..., 2 * D:], lengths,
                                num_heads, causal, chunk_size, left_chunks, pos, pos_bias_u,
                                pos_bias_v, scale)
    y = o @ np.asarray(w_out, dt).T
    if b_out is not None:
        y = y + b_out
    y = _zero_padding(y, lengths)
    return y, ReferenceMHSACache(x, o, core, lengths, np.asarray(w_in, dt),
                                 np.asarray(w_out, dt),
                                 None if pos_emb is None else np.asarray(pos_emb, dt),
                                 None if w_pos is None else np.asarray(w_pos, dt))


def mhsa_backward(dy, cache: ReferenceMHSACache):
    """Gradients of :func:`mhsa_forward` given ``dy [T, B, D]`` (ignored on padding).

    Returns ``(dx, dw_in, db_in, dw_out, db_out)``; with relative positions also ``dw_pos
    [D, D]``, ``dpos_bias_u`` and ``dpos_bias_v [H, D/H]``.
    """
    c = cache
    T, B, D = c.x.shape
    dy = _zero_padding(np.asarray(dy, c.x.dtype), c.lengths).reshape(T * B, D)
    dw_out = dy.T @ c.o.reshape(T * B, D)
    db_out = dy.sum(axis=0)
    do = (dy @ c.w_out).reshape(T, B, D)
    grads = attention_backward(do, c.core)
    dqkv = np.concatenate(grads[:3], axis=-1).reshape(T * B, 3 * D)
    dx = (dqkv @ c.w_in).reshape(T, B, D)
    dw_in = dqkv.T @ c.x.reshape(T * B, D)
    out = (dx, dw_in, dqkv.sum(axis=0), dw_out, db_out)
    if c.pos_emb is None:
        return out
    dpos, dbu, dbv = grads[3:]
    return (*out, dpos.T @ c.pos_emb, dbu, dbv)
