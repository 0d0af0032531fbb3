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
"""

from __future__ import annotations

import numpy as np
from numba import njit

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
def advance(table, values, slots, prob, bow, order, ctx, ctx_bow, nctx, word, out_ctx,
            out_bow):
    """Score ``word`` after ``ctx[:nctx]`` (int32, most recent last) whose suffix back-offs are
    ``ctx_bow[:nctx]`` (``ctx_bow[i]`` = log10 bow of the last ``i + 1`` words, 0 if unlisted).

    Writes the next state and its back-offs into ``out_ctx`` / ``out_bow``; returns
    ``(log10 p, next state length, length of the n-gram matched)``. ``values`` is
    ``table.view(np.float32)``.
    """
    best = prob[word]
    best_len = 0
    state_len = 1 if order > 1 else 0
    if order > 1:
        out_bow[0] = bow[word]
    h = mix(np.uint64(0), word)
    for i in range(1, nctx + 1):
        if i + 1 > order:
            break
        h = mix(h, ctx[nctx - i])
        s = find(table, slots, i + 1, h)
        if s >= 0:
            best = values[4 * s + 2]
            best_len = i
            if i + 1 <= order - 1:
                state_len = i + 1
                out_bow[i] = values[4 * s + 3]
        elif i + 1 <= order - 1:
            out_bow[i] = 0.0
    logp = np.float64(best)
    for i in range(best_len, nctx):
        logp += ctx_bow[i]
    for j in range(state_len - 1):
        out_ctx[j] = ctx[nctx - state_len + 1 + j]
    if state_len > 0:
        out_ctx[state_len - 1] = word
    # out_bow was filled by suffix length (index = length - 1) of the new state
    return logp, state_len, best_len + 1


@njit(cache=True)
def context_backoffs(table, values, slots, bow, ctx, nctx, out_bow):
    """Fill ``out_bow[i]`` with the log10 back-off of the last ``i + 1`` words of ``ctx``."""
    h = np.uint64(0)
    for i in range(1, nctx + 1):
        h = mix(h, ctx[nctx - i])
        if i == 1:
            out_bow[0] = bow[ctx[nctx - 1]]
        else:
            s = find(table, slots, i, h)
            out_bow[i - 1] = values[4 * s + 3] if s >= 0 else 0.0


@njit(cache=True)
def score_word(table, prob, bow, slots, ctx, nctx, word, out_ctx):
    """Score ``word`` after the context ``ctx[:nctx]`` (int32, most recent last).

    Writes the next state's words into ``out_ctx`` (int32, length >= order - 1) and returns
    ``(log10 p, next state length, length of the n-gram matched)``.
    """
    values = table.view(np.float32)
    order = len(slots) - 1
    width = max(order - 1, 1)
    ctx_bow = np.zeros(width, dtype=np.float32)
    out_bow = np.zeros(width, dtype=np.float32)
    context_backoffs(table, values, slots, bow, ctx, nctx, ctx_bow)
    return advance(table, values, slots, prob, bow, order, ctx, ctx_bow, nctx, word, out_ctx,
                   out_bow)


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
def score_one(table, prob, bow, slots, ids, bos_id, eos_id):
    """Total log10 probability of one sentence of word ids (int32), starting after ``<s>``
    when ``bos_id >= 0`` and ending with ``</s>`` when ``eos_id >= 0``."""
    order = len(slots) - 1
    values = table.view(np.float32)
    return _run(table, values, slots, prob, bow, order, ids, 0, len(ids), bos_id, eos_id,
                np.zeros(0), 0, np.zeros(order, np.int32), np.zeros((2, order), np.float32))


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
