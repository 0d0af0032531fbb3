"""Relative-entropy pruning of back-off n-gram models (Stolcke 1998), as SRILM's ``-prune``.

For each n-gram ``(h, w)`` of order >= 2 the change in the model's relative entropy if it were
dropped (and ``h``'s back-off weight recomputed) is::

    bo'(h) = (num(h) + p(w|h)) / (den(h) + p(w|h'))
    dH = -P(h) [ p(w|h) (log p(w|h') + log bo'(h) - log p(w|h)) + num(h) (log bo'(h) - log bo(h)) ]

with ``num(h) = 1 - sum_{v listed after h} p(v|h)``, ``den(h) = 1 - sum_v p(v|h')`` and ``P(h)``
the marginal probability of the context by the chain rule (``<s>`` has probability 1). The
n-gram is dropped when the relative perplexity change ``10**dH - 1`` is below the threshold.
Orders are pruned from the highest down, each against the model as it stands, and back-off
weights are recomputed after each order, so the pruned model is normalised.

Unlike SRILM, an n-gram that is a prefix *or a suffix* of a kept longer n-gram is never
dropped: KenLM and our decoders expect both to be listed.
"""

from __future__ import annotations

import math

import numpy as np

from asrkit.lm import query
from asrkit.lm.hashing import ngram_hashes


def _suffix_rows(keys_lower: np.ndarray, words: np.ndarray) -> np.ndarray:
    """Rows, in the next-lower order's table, of the suffixes of ``words`` (int32 [M, k])."""
    if words.shape[1] == 2:
        return words[:, 1].astype(np.int64)
    return np.searchsorted(keys_lower, ngram_hashes(words[:, 1:]))


def _context_rows(keys_lower: np.ndarray, words: np.ndarray) -> np.ndarray:
    """Rows, in the next-lower order's table, of the contexts (prefixes) of ``words``."""
    if words.shape[1] == 2:
        return words[:, 0].astype(np.int64)
    return np.searchsorted(keys_lower, ngram_hashes(words[:, :-1]))


def _recompute_backoffs(tables, k: int) -> None:
    """Set the back-off weights of the (k-1)-grams from the listed k-grams (in place)."""
    words, logp = tables[k - 1][0], tables[k - 1][1]
    lower_words, lower_logp, lower_bow, keys_lower = tables[k - 2]
    p = 10.0 ** logp
    p_lower = 10.0 ** lower_logp[_suffix_rows(keys_lower, words)]
    ctx = _context_rows(keys_lower, words)
    m = len(lower_words)
    num = 1.0 - np.bincount(ctx, weights=p, minlength=m)
    den = 1.0 - np.bincount(ctx, weights=p_lower, minlength=m)
    has = np.bincount(ctx, minlength=m) > 0
    ok = has & (num > 0) & (den > 1e-12)
    lower_bow[ok] = np.log10(num[ok] / den[ok])
    lower_bow[~has] = 0.0


def check_threshold(threshold: float) -> float:
    """``threshold`` as a float; ValueError unless it is a finite number >= 0."""
    t = float(threshold)
    if not math.isfinite(t) or t < 0:
        raise ValueError(f"pruning threshold must be a finite number >= 0, got {threshold}")
    return t


def prune_entropy(lm, threshold: float):
    """Return a copy of ``lm`` (an ``NgramLM``) without the n-grams whose removal raises the
    perplexity by less than ``threshold`` (relative, e.g. 1e-8), with back-off weights
    recomputed. A threshold of 0 returns ``lm`` itself."""
    from asrkit.lm.model import NgramLM

    threshold = check_threshold(threshold)
    if threshold == 0:
        return lm
    order = lm.order
    offsets = lm._offsets
    # per order: words, log10 prob, log10 bow (float64 copies), keys; rows sorted by key
    tables = []
    for n in range(1, order + 1):
        lo, hi = int(offsets[n - 1]), int(offsets[n])
        tables.append([np.asarray(lm._words[n - 1]), np.asarray(lm._prob[lo:hi], np.float64),
                       np.asarray(lm._bow[lo:hi], np.float64), np.asarray(lm._keys[lo:hi])])
    keeps = [np.ones(len(t[0]), dtype=bool) for t in tables]
    for k in range(order, 1, -1):
        words, logp = tables[k - 1][0], tables[k - 1][1]
        lower_words, lower_logp, lower_bow, keys_lower = tables[k - 2]
        protected = np.zeros(len(words), dtype=bool)
        if k < order:  # prefixes and suffixes of the kept (k+1)-grams stay
            hw = tables[k][0]  # already pruned
            keys_k = tables[k - 1][3]
            protected[_context_rows(keys_k, hw)] = True
            protected[_suffix_rows(keys_k, hw)] = True
        p = 10.0 ** logp
        p_lower = 10.0 ** lower_logp[_suffix_rows(keys_lower, words)]
        ctx = _context_rows(keys_lower, words)
        m = len(lower_words)
        num = (1.0 - np.bincount(ctx, weights=p, minlength=m))[ctx]
        den = (1.0 - np.bincount(ctx, weights=p_lower, minlength=m))[ctx]
        bo = lower_bow[ctx]
        uctx, inv = np.unique(ctx, return_inverse=True)
        ctx_logprob = query.context_log10_probs(
            *lm._q,
            np.ascontiguousarray(lower_words[uctx], dtype=np.int32),
            lm.bos_id)[inv.reshape(-1)]
        with np.errstate(divide="ignore", invalid="ignore"):
            new_bo = np.log10(np.maximum(num + p, 1e-300)) - np.log10(
                np.maximum(den + p_lower, 1e-300))
            delta = -(10.0 ** ctx_logprob) * (
                p * (np.log10(p_lower) + new_bo - logp) + np.maximum(num, 0.0) * (new_bo - bo))
        change = 10.0 ** delta - 1.0
        keep = ~((change < threshold) & ~protected)
        keeps[k - 1] = keep
        tables[k - 1] = [words[keep], logp[keep], tables[k - 1][2][keep],
                         tables[k - 1][3][keep]]
        _recompute_backoffs(tables, k)
    out = []
    for n in range(1, order + 1):
        rank = np.asarray(lm._ranks[n - 1])
        # map the kept rows to their original ARPA positions and list them in that order
        kept_rows = np.flatnonzero(keeps[n - 1])
        new_index = np.full(len(keeps[n - 1]), -1, dtype=np.int64)
        new_index[kept_rows] = np.arange(len(kept_rows))
        in_order = new_index[rank]
        in_order = in_order[in_order >= 0]
        words, logp, bow = tables[n - 1][0], tables[n - 1][1], tables[n - 1][2]
        out.append((words[in_order], logp[in_order], bow[in_order]))
    return NgramLM.from_tables(lm.vocab, out, arpa_order=True, source=lm.source)
