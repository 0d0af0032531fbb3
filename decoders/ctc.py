"""CTC decoders: greedy (best path) and prefix beam search with n-gram shallow fusion.

Both read ``[T, C]`` natural-log scores (log-softmax outputs, or any decodable) and return token
ids with blanks removed and repeats collapsed. The beam search follows Hannun et al. (2014): each
prefix keeps the probability of ending in blank and in non-blank, so identical labelings reached
by different alignments are merged. With an LM (anything with ``begin_state()`` and
``score_word(state, word) -> (log10 p, next_state)``, e.g. ``asrkit.lm.NgramLM``), a word's LM
score is added when the word is complete: ``score = log p_ctc + lm_weight * ln p_lm + word_bonus
* words``.

Where words end depends on the token inventory (``unit``):
- ``"word"``: every token is a word;
- ``"char"``: characters, with ``word_delimiter`` (default ``"|"``, or ``" "``) between words;
- ``"bpe"``: SentencePiece pieces, a piece starting with ``"▁"`` opens a new word.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from asrkit.decoders.decodable import as_matrix

LN10 = math.log(10.0)
NEG_INF = -math.inf
SP_SPACE = "\u2581"  # SentencePiece's word-start marker


def ctc_greedy(log_probs, blank: int = 0, length: int | None = None) -> list[int]:
    """Best-path decoding: argmax per frame, collapse repeats, drop blanks.

    Takes ``[T, C]`` scores (array or decodable) and optionally the valid length; returns the
    token ids.
    """
    scores = as_matrix(log_probs)
    if length is not None:
        scores = scores[:length]
    best = scores.argmax(axis=1)
    out, prev = [], -1
    for tok in best.tolist():
        if tok != prev and tok != blank:
            out.append(tok)
        prev = tok
    return out


def ctc_greedy_batch(log_probs: np.ndarray, lengths: np.ndarray, blank: int = 0) -> list[list[int]]:
    """Greedy decoding of a padded batch ``[T, B, C]`` with ``lengths int32[B]``."""
    return [ctc_greedy(log_probs[:, b], blank, int(lengths[b])) for b in range(log_probs.shape[1])]


def _logaddexp(a: float, b: float) -> float:
    if a == NEG_INF:
        return b
    if b == NEG_INF:
        return a
    m = a if a > b else b
    return m + math.log1p(math.exp(-abs(a - b)))


@dataclasses.dataclass
class Hypothesis:
    """One n-best entry: token ids, words (when tokens are given), and its scores (natural log)."""

    tokens: list[int]
    words: list[str]
    score: float
    acoustic: float
    lm: float


@dataclasses.dataclass
class _Beam:
    p_b: float = NEG_INF  # log p(prefix, ending in blank)
    p_nb: float = NEG_INF  # log p(prefix, ending in its last label)
    lm_score: float = 0.0  # weighted LM log-prob of completed words + word bonuses
    lm_state: object = None
    partial: str = ""  # the word being spelled (char / bpe units)
    words: tuple = ()

    @property
    def total(self) -> float:
        return _logaddexp(self.p_b, self.p_nb)


def _entry(table: dict, prefix: tuple, template: _Beam) -> _Beam:
    """``table[prefix]``, created with ``template``'s LM fields and zero probability if absent."""
    b = table.get(prefix)
    if b is None:
        b = table[prefix] = dataclasses.replace(template, p_b=NEG_INF, p_nb=NEG_INF)
    return b


class _LmScorer:
    def __init__(self, lm, lm_weight: float, word_bonus: float, unk_word: str | None):
        self.lm, self.w, self.bonus, self.unk = lm, lm_weight, word_bonus, unk_word
        self.cache: dict = {}

    def start(self):
        return self.lm.begin_state() if self.lm is not None else None

    def add_word(self, state, word: str):
        """Return (weighted ln score incl. bonus, next state) of ``word`` after ``state``."""
        if self.lm is None:
            return self.bonus, None
        key = (state, word)
        hit = self.cache.get(key)
        if hit is None:
            log10p, nxt = self.lm.score_word(state, word)
            hit = self.cache[key] = (self.w * log10p * LN10 + self.bonus, nxt)
        return hit


def ctc_prefix_beam_search(log_probs, tokens: Sequence[str] | None = None, blank: int = 0,
                           beam: int = 16, token_beam: float = 12.0, nbest: int = 1, lm=None,
                           lm_weight: float = 0.5, word_bonus: float = 0.0, unit: str = "word",
                           word_delimiter: str = "|", length: int | None = None
                           ) -> list[Hypothesis]:
    """CTC prefix beam search, optionally fused with a word-level LM.

    Args:
        log_probs: ``[T, C]`` natural-log scores (array or decodable), e.g. log-softmax outputs.
        tokens: token strings by id (needed with an LM, or to get ``words`` back).
        blank: id of the blank token.
        beam: prefixes kept after each frame.
        token_beam: per frame, only tokens within this many nats of the best are extended.
        nbest: how many hypotheses to return.
        lm: optional LM with ``begin_state()`` and ``score_word(state, word)`` (log10).
        lm_weight, word_bonus: shallow-fusion weight and per-word insertion bonus (nats).
        unit: ``"word"``, ``"char"`` or ``"bpe"`` (see module docstring).
        word_delimiter: the word-separator token for ``unit="char"``.
        length: number of valid frames (default: all).
    Returns:
        Up to ``nbest`` hypotheses, best first (end-of-sentence LM score included).
    """
    if lm is not None and tokens is None:
        raise ValueError("LM fusion needs the token strings (tokens=...)")
    if unit not in ("word", "char", "bpe"):
        raise ValueError(f"unit must be 'word', 'char' or 'bpe', got {unit!r}")
    scores = as_matrix(log_probs)
    if length is not None:
        scores = scores[:length]
    scorer = _LmScorer(lm, lm_weight, word_bonus, None)
    beams: dict[tuple, _Beam] = {(): _Beam(p_b=0.0, lm_state=scorer.start())}

    def extend(prefix: tuple, old: _Beam, tok: int) -> tuple[tuple, _Beam]:
        """The beam entry for prefix+tok, with LM bookkeeping (probabilities filled by caller)."""
        new_prefix = prefix + (tok,)
        if tokens is None:
            return new_prefix, _Beam(lm_score=old.lm_score, words=old.words)
        sym = tokens[tok]
        lm_score, state, partial, words = old.lm_score, old.lm_state, old.partial, old.words
        if unit == "word":
            add, state = scorer.add_word(state, sym)
            lm_score += add
            words = words + (sym,)
        elif unit == "char" and sym == word_delimiter:
            if partial:
                add, state = scorer.add_word(state, partial)
                lm_score, words, partial = lm_score + add, words + (partial,), ""
        elif unit == "bpe" and sym.startswith(SP_SPACE):
            if partial:
                add, state = scorer.add_word(state, partial)
                lm_score, words = lm_score + add, words + (partial,)
            partial = sym[len(SP_SPACE):]
        else:
            partial = partial + sym
        return new_prefix, _Beam(lm_score=lm_score, lm_state=state, partial=partial, words=words)

    for t in range(scores.shape[0]):
        frame = scores[t]
        cutoff = float(frame.max()) - token_beam
        candidates = [int(c) for c in np.flatnonzero(frame >= cutoff)]
        nxt: dict[tuple, _Beam] = {}
        for prefix, b in beams.items():
            total = b.total
            for c in candidates:
                lp = float(frame[c])
                if c == blank:
                    nb = _entry(nxt, prefix, b)
                    nb.p_b = _logaddexp(nb.p_b, total + lp)
                    continue
                last = prefix[-1] if prefix else None
                if c == last:
                    # repeat without a blank in between collapses into the same prefix
                    same = _entry(nxt, prefix, b)
                    same.p_nb = _logaddexp(same.p_nb, b.p_nb + lp)
                    new_total = b.p_b + lp
                else:
                    new_total = total + lp
                new_prefix = prefix + (c,)
                ext = nxt.get(new_prefix)
                if ext is None:
                    _, ext = extend(prefix, b, c)
                    ext.p_b = ext.p_nb = NEG_INF
                    nxt[new_prefix] = ext
                ext.p_nb = _logaddexp(ext.p_nb, new_total)
        ranked = sorted(nxt.items(), key=lambda kv: kv[1].total + kv[1].lm_score, reverse=True)
        beams = dict(ranked[:beam])

    finals = []
    for prefix, b in beams.items():
        lm_score, words, state = b.lm_score, b.words, b.lm_state
        if tokens is not None and unit != "word" and b.partial:
            add, state = scorer.add_word(state, b.partial)
            lm_score, words = lm_score + add, words + (b.partial,)
        if lm is not None:
            log10p, _ = lm.score_word(state, "</s>")
            lm_score += lm_weight * log10p * LN10
        finals.append(Hypothesis(list(prefix), list(words), b.total + lm_score, b.total,
                                 lm_score))
    finals.sort(key=lambda h: h.score, reverse=True)
    return finals[:nbest]
