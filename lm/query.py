"""Numba kernels that score words with a back-off n-gram model.

The model is flat: ``keys`` (uint64, n-gram hashes, see ``hashing``), ``prob`` and ``bow``
(float32 log10 probability and back-off weight) hold all orders one after another; order ``n``
occupies rows ``offsets[n-1]:offsets[n]``, sorted by key. Unigram rows are indexed by word id
directly. A state is the context, most recent word last, at most ``order - 1`` words long.

The public kernels take ``(table, prob, bow, slots, ...)``: the hash index, the unigram
probabilities and back-offs (indexed by word id) and the index's slot offsets (whose length
gives the order). Few array arguments keep numba's per-call overhead small.

Lookups of orders >= 2 go through an open-addressing hash index (``build_index``), as in
KenLM's probing model: per order a power-of-two number of slots, at least twice the n-grams,
probed linearly from ``key & (slots - 1)``. A slot is 16 bytes, the key then the n-gram's
float32 probability and back-off (all ones = empty), so a hit costs one cache line, where a
binary search in the sorted keys would take about twenty dependent loads.

Scoring follows the ARPA back-off rule (as SRILM and KenLM do): for the longest listed n-gram
``(c_{m-j+1}..c_m, w)``, ``log p(w | c) = prob(c_{m-j+1}..c_m, w) + sum_{i>j} bow(c_{m-i+1}..c_m)``.
The state after ``w`` is the longest listed suffix of ``(c, w)`` of at most ``order - 1`` words.
The sentence kernels also carry the back-off weights of the state's suffixes (as KenLM's
``State`` does), found on the way, so only the probability walk needs lookups.

The kernels a decoder calls per word (``score_at``, ``score_sentence_at``, ``score_rows``)
take the address of the model's header (``model_header``) instead of its arrays, so that a call
costs little more than numba's dispatch of a few integers (see ``asrkit.lm.addresses``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from asrkit.lm.addresses import address, f32_at, i64_at, u64_at
from asrkit.lm.hashing import mix

EMPTY = np.uint64(0xFFFFFFFFFFFFFFFF)


@njit(cache=True)
def build_index(keys, prob, bow, offsets):
    """Hash index of orders >= 2: returns ``(table uint64 [2 * S], slot_offsets int64
    [order + 1])``; order ``n`` owns slots ``slot_offsets[n-1]:slot_offsets[n]``."""
    order = len(offsets) - 1
    slot_offsets = np.zeros(order + 1, dtype=np.int64)
    for n in range(2, order + 1):
        m = offsets[n] - offsets[n - 1]
        size = 2
        while size < 2 * m:
            size *= 2
        slot_offsets[n] = slot_offsets[n - 1] + size
    table = np.full(2 * slot_offsets[order], EMPTY, dtype=np.uint64)
    values = table.view(np.float32)
    for n in range(2, order + 1):
        base = slot_offsets[n - 1]
        mask = np.uint64(slot_offsets[n] - base - 1)
        for r in range(offsets[n - 1], offsets[n]):
            h = keys[r]
            s = np.int64(h & mask)
            while table[2 * (base + s) + 1] != EMPTY:
                s = np.int64(np.uint64(s + 1) & mask)
            table[2 * (base + s)] = h
            values[4 * (base + s) + 2] = prob[r]
            values[4 * (base + s) + 3] = bow[r]
    return table, slot_offsets


@njit(cache=True, inline="always")
def find(table, slot_offsets, n, h):
    """Slot of the order-``n`` n-gram with hash ``h`` (its prob is ``values[4 * slot + 2]``,
    its back-off ``values[4 * slot + 3]``), or -1 when it is not listed.

    The probe stops after a whole table too: a table always has a free slot, but one read from
    a damaged file might not, and a lookup must never spin forever."""
    base = slot_offsets[n - 1]
    size = slot_offsets[n] - base
    mask = np.uint64(size - 1)
    s = np.int64(h & mask)
    for _ in range(size):
        i = base + s
        if table[2 * i + 1] == EMPTY:
            return -1
        if table[2 * i] == h:
            return i
        s = np.int64(np.uint64(s + 1) & mask)
    return -1


@njit(cache=True, inline="always")
def _walk(table, values, prob, bow, slots, order, ctx, nctx, word):
    """Score ``word`` after ``ctx[:nctx]`` (any indexable of word ids, most recent last; only
    its last ``order - 1`` words matter). Returns ``(log10 p, next state length, length of the
    n-gram matched)``; the next state is the last ``length`` words of ``(ctx, word)``.

    The back-off weights of the context's suffixes are looked up only for the suffixes longer
    than the n-gram matched (the ones the back-off rule charges)."""
    m = min(nctx, order - 1)
    best = prob[word]
    best_len = 0
    state_len = 1 if order > 1 else 0
    h = mix(np.uint64(0), word)
    for i in range(1, m + 1):
        h = mix(h, ctx[nctx - i])
        s = find(table, slots, i + 1, h)
        if s >= 0:
            best = values[4 * s + 2]
            best_len = i
            if i + 1 <= order - 1:
                state_len = i + 1
    logp = np.float64(best)
    if best_len < m:
        hc = np.uint64(0)
        for j in range(1, m + 1):
            hc = mix(hc, ctx[nctx - j])
            if j > best_len:
                if j == 1:
                    logp += bow[ctx[nctx - 1]]
                else:
                    s = find(table, slots, j, hc)
                    if s >= 0:
                        logp += values[4 * s + 3]
    return logp, state_len, best_len + 1


@njit(cache=True)
def score_word(table, prob, bow, slots, ctx, nctx, word, out_ctx):
    """Score ``word`` after the context ``ctx[:nctx]`` (int32, most recent last).

    Writes the next state's words into ``out_ctx`` (int32, length >= order - 1) and returns
    ``(log10 p, next state length, length of the n-gram matched)``.
    """
    values = table.view(np.float32)
    order = len(slots) - 1
    lp, m, matched = _walk(table, values, prob, bow, slots, order, ctx, nctx, word)
    for j in range(m - 1):
        out_ctx[j] = ctx[nctx - m + 1 + j]
    if m > 0:
        out_ctx[m - 1] = word
    return lp, m, matched


@njit(cache=True)
def _run(table, values, slots, prob, bow, order, ids, lo, hi, bos_id, eos_id, word_logp, k,
         buf, bbuf):
    """Score ``ids[lo:hi]`` (+ ``</s>`` when ``eos_id >= 0``) from ``<s>`` (``bos_id >= 0``) or
    the null state; stores each word's log10 p at ``word_logp[k:]`` when it is not empty.
    ``buf`` int32 ``[order]`` and ``bbuf`` float32 ``[2, order]`` are scratch. Returns the
    total.

    The same walk as ``advance``, written out with the state updated in place: this loop is
    what sentence scoring, perplexity and pruning spend their time in.
    """
    ctx = buf
    cbow, nbow = bbuf[0], bbuf[1]
    nctx = 0
    if bos_id >= 0 and order > 1:
        ctx[0] = bos_id
        cbow[0] = bow[bos_id]
        nctx = 1
    total = 0.0
    for t in range(lo, hi + (1 if eos_id >= 0 else 0)):
        w = ids[t] if t < hi else eos_id
        best = prob[w]
        best_len = 0
        new_len = 1 if order > 1 else 0
        nbow[0] = bow[w]
        h = mix(np.uint64(0), w)
        for i in range(1, nctx + 1):
            if i + 1 > order:
                break
            h = mix(h, ctx[nctx - i])
            s = find(table, slots, i + 1, h)
            if s >= 0:
                best = values[4 * s + 2]
                best_len = i
                if i + 1 < order:
                    new_len = i + 1
                    nbow[i] = values[4 * s + 3]
            elif i + 1 < order:
                nbow[i] = 0.0
        lp = np.float64(best)
        for i in range(best_len, nctx):
            lp += cbow[i]
        for j in range(new_len - 1):
            ctx[j] = ctx[nctx - new_len + 1 + j]
        if new_len > 0:
            ctx[new_len - 1] = w
        for j in range(new_len):
            cbow[j] = nbow[j]
        nctx = new_len
        if len(word_logp):
            word_logp[k] = lp
        k += 1
        total += lp
    return total


@njit(cache=True)
def score_sentences(table, prob, bow, slots, ids, starts, bos_id, eos_id, use_bos, use_eos,
                    word_logp):
    """Score many sentences at once.

    ``ids`` (int32) holds the sentences' word ids back to back, sentence ``s`` at
    ``ids[starts[s]:starts[s+1]]``. With ``use_eos`` each sentence also scores ``</s>``.
    ``word_logp`` (float64, ``len(ids) + use_eos * n_sentences``) receives each word's log10
    probability, sentence by sentence, ``</s>`` last. Returns float64 ``[n_sentences]`` totals.
    """
    order = len(slots) - 1
    values = table.view(np.float32)
    n = len(starts) - 1
    totals = np.zeros(n, dtype=np.float64)
    buf = np.zeros(order, np.int32)
    bbuf = np.zeros((2, order), np.float32)
    k = 0
    for s in range(n):
        lo, hi = starts[s], starts[s + 1]
        totals[s] = _run(table, values, slots, prob, bow, order, ids, lo, hi,
                         bos_id if use_bos else -1, eos_id if use_eos else -1, word_logp, k,
                         buf, bbuf)
        k += hi - lo + (1 if use_eos else 0)
    return totals


@njit(cache=True)
def context_log10_probs(table, prob, bow, slots, contexts, bos_id):
    """log10 of the marginal probability of each context (a row of int32 ``contexts [M, L]``).

    The chain rule with the model itself; a context that starts with ``<s>`` (id ``bos_id``)
    takes p(<s>) = 1 and starts from the sentence-begin state, as SRILM does when pruning.
    Returns float64 ``[M]``.
    """
    m, length = contexts.shape
    order = len(slots) - 1
    values = table.view(np.float32)
    out = np.zeros(m, dtype=np.float64)
    buf = np.zeros(order, np.int32)
    bbuf = np.zeros((2, order), np.float32)
    none = np.zeros(0)
    for i in range(m):
        bos = length > 0 and contexts[i, 0] == bos_id
        out[i] = _run(table, values, slots, prob, bow, order, contexts[i], 1 if bos else 0,
                      length, bos_id if bos else -1, -1, none, 0, buf, bbuf)
    return out


# -- kernels that reach the model by address ---------------------------------------------------

HEADER_SIZE = 8  # table address, table rows, prob address, bow address, V, slots address, order


def model_header(table: np.ndarray, prob: np.ndarray, bow: np.ndarray,
                 slots: np.ndarray) -> np.ndarray:
    """int64 ``[HEADER_SIZE]`` header listing the model's arrays by address (``table`` uint64
    ``[2 * S]``, ``prob``/``bow`` float32 ``[V]``, ``slots`` int64 ``[order + 1]``); the caller
    keeps the arrays alive as long as the header is used."""
    table = np.asarray(table)
    hdr = np.zeros(HEADER_SIZE, dtype=np.int64)
    hdr[0] = address(table) if table.size else 0
    hdr[1] = table.size // 2
    hdr[2], hdr[3] = address(prob), address(bow)
    hdr[4] = prob.size
    hdr[5] = address(slots)
    hdr[6] = slots.size - 1
    return hdr


@njit(cache=True, inline="always")
def _model_at(h):
    """(table, values, prob, bow, slots, order) of the model whose header is at ``h``."""
    hdr = i64_at(h, HEADER_SIZE)
    table = u64_at(hdr[0], 2 * hdr[1])
    values = f32_at(hdr[0], 4 * hdr[1])
    prob = f32_at(hdr[2], hdr[4])
    bow = f32_at(hdr[3], hdr[4])
    order = hdr[6]
    slots = i64_at(hdr[5], order + 1)
    return table, values, prob, bow, slots, order


@njit(cache=True)
def score_at(h, nctx, c0, c1, c2, c3, word):
    """``(log10 p, next state length)`` of ``word`` after the context ``(c0, c1, c2, c3)[:nctx]``
    (most recent last, ``nctx <= 4``) with the model whose header is at address ``h``."""
    table, values, prob, bow, slots, order = _model_at(h)
    lp, n, _ = _walk(table, values, prob, bow, slots, order, (c0, c1, c2, c3), nctx, word)
    return lp, n


@njit(cache=True)
def score_sentence_at(h, ids, bos_id, eos_id):
    """Total log10 probability of one sentence of word ids (int32), starting after ``<s>``
    when ``bos_id >= 0`` and ending with ``</s>`` when ``eos_id >= 0``, with the model whose
    header is at address ``h``."""
    table, values, prob, bow, slots, order = _model_at(h)
    return _run(table, values, slots, prob, bow, order, ids, 0, len(ids), bos_id, eos_id,
                np.zeros(0), 0, np.zeros(order, np.int32), np.zeros((2, order), np.float32))


@njit(cache=True)
def score_rows(h, states, words, logp, out):
    """Score ``words[r]`` (int32 ``[N]``) after state row ``states[r]`` for every ``r``.

    A state row is int32 ``[order]``: its length ``n`` then its words (most recent last),
    zero-padded. Writes log10 p into ``logp`` (float64 ``[N]``) and the next state rows into
    ``out`` (int32 ``[N, order]``, zero-padded, so equal states are equal rows)."""
    table, values, prob, bow, slots, order = _model_at(h)
    width = states.shape[1]
    for r in range(len(words)):
        n = states[r, 0]
        ctx = states[r, 1:]
        w = words[r]
        lp, m, _ = _walk(table, values, prob, bow, slots, order, ctx, n, w)
        logp[r] = lp
        out[r, 0] = m
        for j in range(m - 1):
            out[r, 1 + j] = ctx[n - m + 1 + j]
        if m > 0:
            out[r, m] = w
        for j in range(m + 1, width):
            out[r, j] = 0
