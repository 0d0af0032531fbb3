"""Grammars G: from an ARPA n-gram LM (as Kaldi's arpa2fst), or a word loop.

Weights are natural-log costs, as in Kaldi: an ARPA log10 probability p becomes
``-ln(10) * p`` (``LN10``), so the cost of a sentence in G is -ln P(sentence).

G from an LM of order N (Kaldi's ArpaLmCompiler): one state per history (every listed n-gram
of order < N not ending in ``</s>``, plus the empty history); the start state is the history
``<s>``. An n-gram ``h w`` is an arc from state h to the state of ``h w`` (for order N: of its
longest suffix that has a state) with cost -ln P(w | h); ``h </s>`` is the final cost of h. A
history h with backoff weight b has a backoff arc to its longest proper suffix with a state,
labelled ``#0`` on input and epsilon on output, cost -ln(10) * b. History states without any
n-gram of their own are bypassed (their incoming arcs go on along the backoff, weights added),
as arpa2fst's RemoveRedundantStates does. ``<s>`` never labels an arc.

Because backoff arcs are ordinary alternative paths, the best path through G for a sentence can
in rare cases be cheaper than the LM's score (when backing off beats a listed n-gram); the path
that takes a backoff arc only where no n-gram is listed has exactly the LM's score.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping

import numpy as np

from asrkit.decoders.fst import Fst, FstBuilder, SymbolTable

LN10 = math.log(10.0)
BOS, EOS, BACKOFF = "<s>", "</s>", "#0"


def arpa_to_fst(lm, words: SymbolTable, bos: str = BOS, eos: str = EOS,
                backoff_symbol: str = BACKOFF, dtype=np.float32) -> Fst:
    """G from an n-gram LM with ``order``, ``vocab`` and ``iter_ngrams(n)`` yielding
    ``(words, log10 prob, log10 backoff)`` (``asrkit.lm.NgramLM``). Word labels come from
    ``words``, which must hold every LM word and ``backoff_symbol``. Returns an acceptor except
    for the backoff arcs (``#0`` : epsilon)."""
    order = int(lm.order)
    missing = [w for w in lm.vocab if w not in words and w not in (bos, eos)]
    if missing:
        raise ValueError(f"{len(missing)} LM words are not in the word table, e.g. {missing[:5]}")
    backoff_label = words.id(backoff_symbol)
    ngrams = [list(lm.iter_ngrams(n)) for n in range(1, order + 1)]
    # histories: every n-gram of order < N (not ending in </s>), and the empty history
    backoff: dict[tuple[str, ...], float] = {(): 0.0}
    for n in range(1, order):
        for ws, _, bow in ngrams[n - 1]:
            if ws[-1] != eos:
                backoff[ws] = bow
    start_history = (bos,) if order > 1 else ()
    if start_history not in backoff:
        raise ValueError(f"{getattr(lm, 'source', '') or 'the LM'}: no {bos} unigram, so G has "
                         "no start state")
    has_own = {()}  # histories with n-grams (or a final cost) of their own
    for n in range(2, order + 1):
        for ws, _, _ in ngrams[n - 1]:
            has_own.add(ws[:-1])

    def backoff_target(h):
        """Longest proper suffix of h that is a history."""
        for k in range(1, len(h) + 1):
            if h[k:] in backoff:
                return h[k:]
        return ()

    def settle(h):
        """The state reached on entering history h, and the extra cost of getting there: a
        history with no n-grams of its own is passed through along its backoff arcs."""
        cost = 0.0
        while h not in has_own:
            cost += -LN10 * backoff[h]
            h = backoff_target(h)
        return h, cost

    b = FstBuilder(isymbols=words, osymbols=words)
    state: dict[tuple[str, ...], int] = {}

    def state_of(h) -> int:
        s = state.get(h)
        if s is None:
            s = state[h] = b.add_state()
        return s

    b.set_start(state_of(start_history))
    state_of(())
    for n in range(1, order + 1):
        for ws, prob, _ in ngrams[n - 1]:
            h, w = ws[:-1], ws[-1]
            if w == bos:
                continue
            if h not in backoff:
                continue  # history never listed: unreachable in ARPA semantics
            if prob == -math.inf:
                continue  # probability 0: no path (the weight would be +inf, the zero)
            src = state_of(h)
            cost = -LN10 * prob
            if w == eos:
                b.set_final(src, cost)
                continue
            nxt, extra = settle(ws if n < order else backoff_target(ws))
            b.add_arc(src, state_of(nxt), words.id(w), words.id(w), cost + extra)
    for h, bow in backoff.items():
        if not h or h not in state:
            continue
        tgt, extra = settle(backoff_target(h))
        b.add_arc(state[h], state_of(tgt), backoff_label, 0, -LN10 * bow + extra)
    return b.compile(dtype=dtype)


def word_loop_fst(words: SymbolTable, vocabulary: Iterable[str] | Mapping[str, float],
                  dtype=np.float32) -> Fst:
    """A one-state grammar accepting any sequence of the words. ``vocabulary``: an iterable of
    words (uniform, cost ln V each) or a mapping word -> weight (probabilities after
    normalisation; cost -ln(weight / total))."""
    if isinstance(vocabulary, Mapping):
        items = [(w, float(v)) for w, v in vocabulary.items()]
        total = sum(v for _, v in items)
        if not items or not all(math.isfinite(v) and v > 0 for _, v in items) or \
                not math.isfinite(total):
            raise ValueError("word loop weights must be finite numbers > 0")
        costs = [(w, -math.log(v / total)) for w, v in items]
    else:
        ws = list(dict.fromkeys(vocabulary))
        if not ws:
            raise ValueError("word loop needs at least one word")
        costs = [(w, math.log(len(ws))) for w in ws]
    b = FstBuilder(isymbols=words, osymbols=words)
    s = b.add_state()
    b.set_start(s)
    b.set_final(s)
    for w, c in costs:
        try:
            wid = words.id(w)
        except KeyError:
            raise ValueError(f"word loop: {w!r} is not in the word table") from None
        b.add_arc(s, s, wid, wid, c)
    return b.compile(dtype=dtype)


def read_word_weights(path: str | os.PathLike, known: Iterable[str] | None = None
                      ) -> dict[str, float]:
    """Read a weighted word loop's file: ``word weight`` per line (blank lines skipped),
    weights finite and > 0, each word once and, with ``known``, one of those words. Errors
    (ValueError) name the file and line; an unreadable file raises OSError."""
    from asrkit.utils.textfile import read_text

    path = os.fspath(path)
    known = set(known) if known is not None else None
    weights: dict[str, float] = {}
    for lineno, line in enumerate(read_text(path).split("\n"), 1):
        fields = line.split()
        if not fields:
            continue
        where = f"{path}:{lineno}"
        try:
            w = float(fields[1]) if len(fields) == 2 else math.nan
        except ValueError:
            w = math.nan
        if not (math.isfinite(w) and w > 0):
            raise ValueError(f"{where}: expected 'word weight' with a finite weight > 0, got "
                             f"{line.strip()!r}")
        word = fields[0]
        if word in weights:
            raise ValueError(f"{where}: word {word!r} is listed twice")
        if known is not None and word not in known:
            raise ValueError(f"{where}: word {word!r} is not in the lexicon")
        weights[word] = w
    if not weights:
        raise ValueError(f"{path}: no words")
    if not math.isfinite(sum(weights.values())):
        raise ValueError(f"{path}: the weights add up to more than a float holds")
    return weights
