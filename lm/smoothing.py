"""Estimation of back-off n-gram models from counts: interpolated modified Kneser-Ney (default),
Witten-Bell and absolute discounting.

Conventions (those of KenLM's ``lmplz``; SRILM's ``-kndiscount -interpolate`` differs only in
details noted here):

- Kneser-Ney uses raw counts for the highest order and continuation counts
  ``N1+(. w_2..w_n)`` below it, except for n-grams that start with ``<s>``, which keep their
  raw counts (nothing can precede ``<s>``). Three discounts per order (Chen & Goodman eq. 26)::

      Y = n1 / (n1 + 2 n2);  D1 = 1 - 2Y n2/n1;  D2 = 2 - 3Y n3/n2;  D3+ = 3 - 4Y n4/n3

  from the count-of-counts ``n_j`` of the (adjusted) counts of that order. Where they cannot be
  computed (tiny data) the fallback ``0.5, 1.0, 1.5`` is used, as ``lmplz --discount_fallback``.
- Interpolation: ``p(w|h) = u(w|h) + gamma(h) p(w|h')`` with ``u = (a - D(a)) / sum_x a(h x)``
  and ``gamma(h) = 1 - sum_w u(w|h)``; the ARPA back-off weight of ``h`` is ``gamma(h)``, which
  makes every context sum to one. Unigrams interpolate with the uniform distribution over the
  vocabulary without ``<s>``; that is how ``<unk>`` (usually unseen, adjusted count 0) gets its
  probability, ``gamma(empty) / (|V| - 1)``, as lmplz does. ``<s>`` gets log10 p = -99.
- Witten-Bell: ``u = c(h w) / (c(h) + T(h))``, ``gamma = T(h) / (c(h) + T(h))`` with raw counts
  at every order (``T`` = distinct words after ``h``). Absolute discounting: one
  ``D = n1 / (n1 + 2 n2)`` per order, raw counts.
- Count cut-offs as ``lmplz --prune``: per order, n-grams whose raw count is <= the threshold
  are dropped (not unigrams); their probability mass goes to the back-off weight, and the
  discounts still come from all counts. Thresholds must not decrease with the order, which
  keeps every prefix and suffix of a listed n-gram listed.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable

import numpy as np

from asrkit.lm.counts import NgramCounts, count_ngrams
from asrkit.lm.hashing import ngram_hashes
from asrkit.lm.vocab import BOS_ID

DISCOUNTS = ("kneser-ney", "witten-bell", "absolute")
KN_FALLBACK = (0.5, 1.0, 1.5)
LOG10_ZERO = -99.0


def adjusted_counts(counts: NgramCounts, method: str) -> list[np.ndarray]:
    """Counts the smoothing uses, per order (float64 ``[M_n]``, rows as ``counts.words``).

    Kneser-Ney: continuation counts below the highest order (raw for n-grams starting with
    ``<s>``); the others: raw counts. The unigram ``<s>`` always gets 0.
    """
    adj = [c.astype(np.float64) for c in counts.counts]
    if method == "kneser-ney":
        for k in range(1, counts.order):  # k = order index of the lower table (k+1-grams)
            higher = counts.words[k]
            if k == 1:
                cont = np.bincount(higher[:, 1], minlength=len(counts.vocab)).astype(np.float64)
            else:
                uh, cnt = np.unique(ngram_hashes(higher[:, 1:]), return_counts=True)
                cont = np.zeros(len(adj[k - 1]))
                cont[np.searchsorted(counts.hashes[k - 1], uh)] = cnt
            starts_bos = counts.words[k - 1][:, 0] == BOS_ID
            adj[k - 1] = np.where(starts_bos, adj[k - 1], cont)
    adj[0][BOS_ID] = 0.0
    return adj


def kn_discounts(a: np.ndarray, order: int) -> tuple[float, float, float]:
    """Modified Kneser-Ney discounts ``(D1, D2, D3+)`` from adjusted counts ``a`` of one order."""
    n = [int(np.count_nonzero(a == j)) for j in range(1, 5)]
    if min(n) > 0:
        y = n[0] / (n[0] + 2.0 * n[1])
        d = tuple(j - (j + 1) * y * n[j] / n[j - 1] for j in (1, 2, 3))
        if all(0.0 < d[j - 1] <= j for j in (1, 2, 3)):
            return d
    warnings.warn(f"cannot estimate Kneser-Ney discounts for {order}-grams from count-of-counts "
                  f"n1..n4 = {n} (small or artificial data); using the fallback "
                  f"{KN_FALLBACK}", RuntimeWarning, stacklevel=3)
    return KN_FALLBACK


def absolute_discount(a: np.ndarray, order: int) -> float:
    """One absolute discount ``n1 / (n1 + 2 n2)`` for an order (0.5 when undefined)."""
    n1, n2 = int(np.count_nonzero(a == 1)), int(np.count_nonzero(a == 2))
    if n1 == 0 or n2 == 0:
        warnings.warn(f"cannot estimate the absolute discount for {order}-grams (n1={n1}, "
                      f"n2={n2}); using 0.5", RuntimeWarning, stacklevel=3)
        return 0.5
    return n1 / (n1 + 2.0 * n2)


def _check_cutoffs(cutoffs: list[int] | None, order: int) -> list[int]:
    if not cutoffs:
        return [0] * order
    cutoffs = [int(c) for c in cutoffs]
    if any(c < 0 for c in cutoffs):
        raise ValueError(f"count cut-offs must be >= 0, got {cutoffs}")
    if cutoffs[0] != 0:
        raise ValueError("unigrams cannot be cut off: the first cut-off must be 0")
    if any(b < a for a, b in zip(cutoffs, cutoffs[1:])):
        raise ValueError(f"count cut-offs must not decrease with the order, got {cutoffs}")
    return (cutoffs + [cutoffs[-1]] * order)[:order]


def estimate(counts: NgramCounts, discount: str = "kneser-ney",
             cutoffs: list[int] | None = None):
    """Smooth ``counts`` into an ``NgramLM`` (see the module docstring for the formulas).

    ``discount`` is one of ``DISCOUNTS``; ``cutoffs[n-1]`` drops n-grams with raw count <= it
    (the last value applies to higher orders). The model's ``meta`` dict records the discounts.
    """
    from asrkit.lm.model import NgramLM

    if discount not in DISCOUNTS:
        raise ValueError(f"unknown discount {discount!r}; expected one of {', '.join(DISCOUNTS)}")
    if counts.tokens == 0:
        raise ValueError("no words to train on: the text is empty")
    order, vocab_size = counts.order, len(counts.vocab)
    cut = _check_cutoffs(cutoffs, order)
    adj = adjusted_counts(counts, discount)
    tables = []
    lin_prob_prev = None
    discounts = []
    for k in range(1, order + 1):
        words, a, raw = counts.words[k - 1], adj[k - 1], counts.counts[k - 1]
        keep = raw > cut[k - 1] if k > 1 else np.ones(len(a), dtype=bool)
        if k == 1:
            group = np.zeros(len(a), dtype=np.int64)
            in_model = np.arange(len(a)) != BOS_ID
            ctx_h = None
        else:
            ctx_key = words[:, 0] if k == 2 else ngram_hashes(words[:, :-1])
            ctx_h, group = np.unique(ctx_key, return_inverse=True)
            group = group.reshape(-1)
            in_model = np.ones(len(a), dtype=bool)
        stat_a = a[in_model & (a > 0)]
        if discount == "kneser-ney":
            d = kn_discounts(stat_a, k)
            discounts.append(d)
            table = np.array([0.0, *d])
            num = a - table[np.minimum(a, 3).astype(np.int64)]
            z = np.bincount(group, weights=np.where(in_model, a, 0.0))
        elif discount == "absolute":
            d = absolute_discount(stat_a, k)
            discounts.append((d,))
            num = np.maximum(a - d, 0.0)
            z = np.bincount(group, weights=np.where(in_model, a, 0.0))
        else:
            discounts.append(())
            types = np.bincount(group, weights=(in_model & (a > 0)).astype(np.float64))
            z = np.bincount(group, weights=np.where(in_model, a, 0.0)) + types
            num = a
        num = np.where(in_model, num, 0.0)
        kept_mass = np.bincount(group, weights=np.where(keep, num, 0.0), minlength=len(z))
        with np.errstate(divide="ignore", invalid="ignore"):
            gamma = np.where(z > 0, (z - kept_mass) / z, 1.0)
            u = np.where(z[group] > 0, num / z[group], 0.0)
        if k == 1:
            p = u + gamma[0] / (vocab_size - 1)
            p[BOS_ID] = 0.0
        else:
            rows = np.flatnonzero(keep)
            lower = (words[rows, 1] if k == 2 else
                     np.searchsorted(counts.hashes[k - 2], ngram_hashes(words[rows, 1:])))
            p = np.zeros(len(a))
            p[rows] = u[rows] + gamma[group[rows]] * lin_prob_prev[lower]
            # back-off weights of the contexts, stored on the (k-1)-grams
            ctx_rows = ctx_h if k == 2 else np.searchsorted(counts.hashes[k - 2], ctx_h)
            prev_bow = tables[k - 2][2]
            with np.errstate(divide="ignore"):
                prev_bow[ctx_rows] = np.log10(gamma)
        with np.errstate(divide="ignore"):
            # rounding can lift a certain event a hair above 1; files keep log10 p <= 0
            logp = np.where(p > 0, np.minimum(np.log10(np.maximum(p, 1e-300)), 0.0), LOG10_ZERO)
        tables.append([words, logp, np.zeros(len(a))])
        lin_prob_prev = p
    out = []
    for k, (words, logp, bow) in enumerate(tables, start=1):
        # n-grams under the cut-offs leave now that their counts fed the normalisers
        keep = counts.counts[k - 1] > cut[k - 1] if k > 1 else slice(None)
        bow = np.where(np.isfinite(bow), bow, LOG10_ZERO)  # gamma = 0: nothing to back off to
        out.append((words[keep], logp[keep], bow[keep]))
    lm = NgramLM.from_tables(counts.vocab, out, arpa_order=False)
    lm.meta = {"discount": discount, "discounts": discounts, "cutoffs": cut,
               "sentences": counts.sentences, "tokens": counts.tokens}
    return lm


def train(source: str | os.PathLike | Iterable[str], order: int = 3,
          discount: str = "kneser-ney", cutoffs: list[int] | None = None,
          vocab_file: str | None = None, vocab_size: int | None = None,
          prune: float | None = None):
    """Count ``source`` (a text path or an iterable of lines, one sentence each) and estimate
    an order-``order`` model; optionally entropy-prune it with threshold ``prune``.

    Returns an ``NgramLM``.
    """
    counts = count_ngrams(source, order, vocab_file=vocab_file, vocab_size=vocab_size)
    lm = estimate(counts, discount=discount, cutoffs=cutoffs)
    if prune:
        from asrkit.lm.prune import prune_entropy

        meta = lm.meta
        lm = prune_entropy(lm, prune)
        lm.meta = {**meta, "prune": prune}
    return lm
