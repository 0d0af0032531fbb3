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

A ``Lexicon`` restricts the spelling to known words (a partial word must be a prefix of one, a
finished word must be one), as flashlight's lexicon decoder does: without it, a fused n-gram LM
meets out-of-vocabulary spellings at every word end and scores them as ``<unk>``.

Prefixes are interned (one node per distinct prefix, extended by (node, token)), so extending a
prefix costs O(1) and its LM bookkeeping is done once. Without an LM and a lexicon the search
needs no strings and runs compiled (``_prefix_search_kernel``, numba); with them it is Python.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Iterable, Sequence

import numba
import numpy as np

from asrkit.decoders.decodable import as_matrix
from asrkit.decoders.options import count, finite

LN10 = math.log(10.0)
NEG_INF = -math.inf
SP_SPACE = "\u2581"  # SentencePiece's word-start marker


def ctc_greedy(log_probs, blank: int = 0, length: int | None = None) -> list[int]:
    """Best-path decoding: argmax per frame, collapse repeats, drop blanks.

    Takes ``[T, C]`` scores (array or decodable) and optionally the valid length; returns the
    token ids.
    """
    scores = _valid_scores(log_probs, blank, length)
    best = scores.argmax(axis=1)
    out, prev = [], -1
    for tok in best.tolist():
        if tok != prev and tok != blank:
            out.append(tok)
        prev = tok
    return out


def _valid_scores(log_probs, blank: int, length: int | None) -> np.ndarray:
    """The ``[T, C]`` scores (``as_matrix``: no NaN or +inf) cut to ``length`` frames, with
    ``blank`` a column and ``length`` within 0..T; ValueError naming the option otherwise."""
    scores = as_matrix(log_probs)
    blank = count("blank", blank, 0)
    if blank >= scores.shape[1]:
        raise ValueError(f"blank must be a token id below {scores.shape[1]}, got {blank}")
    if length is not None:
        if count("length", length, 0) > scores.shape[0]:
            raise ValueError(f"length {length} exceeds the {scores.shape[0]} frames")
        scores = scores[:length]
    return scores


def ctc_greedy_batch(log_probs: np.ndarray, lengths: np.ndarray, blank: int = 0) -> list[list[int]]:
    """Greedy decoding of a padded batch ``[T, B, C]`` with ``lengths int32[B]``."""
    return [ctc_greedy(log_probs[:, b], blank, int(lengths[b])) for b in range(log_probs.shape[1])]


@dataclasses.dataclass
class Hypothesis:
    """One n-best entry: token ids, words (when tokens are given), and its scores (natural log)."""

    tokens: list[int]
    words: list[str]
    score: float
    acoustic: float
    lm: float


@dataclasses.dataclass(slots=True)
class _Node:
    """An interned prefix: its parent prefix, last token and LM bookkeeping (fixed per prefix,
    so computed once when the prefix is first extended to, not once per frame)."""

    parent: int
    token: int
    lm_score: float = 0.0  # weighted LM log-prob of completed words + word bonuses
    lm_state: object = None
    partial: str = ""  # the word being spelled (char / bpe units)
    words: tuple = ()


class _LmScorer:
    def __init__(self, lm, lm_weight: float, word_bonus: float):
        self.lm, self.w, self.bonus = lm, lm_weight, word_bonus
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


class Lexicon:
    """The words a constrained search may spell, and all their prefixes.

    ``Lexicon(words)`` takes an iterable of words; ``ctc_prefix_beam_search(lexicon=...)`` then
    only extends partial words that are prefixes of a lexicon word and only ends words that are
    in it (as flashlight's lexicon decoder does with its trie).
    """

    def __init__(self, words):
        self.words = frozenset(words)
        self.prefixes = frozenset(w[:i] for w in self.words for i in range(1, len(w) + 1))

    def __len__(self) -> int:
        return len(self.words)


def _logaddexp(a: float, b: float) -> float:
    if a < b:
        a, b = b, a
    if b == NEG_INF:
        return a
    return a + math.log1p(math.exp(b - a))


class _Spelling:
    """Interned prefixes with their LM bookkeeping; node 0 is the empty prefix."""

    def __init__(self, tokens, unit, word_delimiter, scorer: _LmScorer, lexicon):
        self.tokens, self.unit, self.delim = tokens, unit, word_delimiter
        self.scorer, self.lexicon = scorer, lexicon
        self.nodes = [_Node(-1, -1, lm_state=scorer.start())]
        self.children: dict[tuple[int, int], int] = {}

    def child(self, nid: int, tok: int) -> int:
        """Node id of prefix ``nid`` + ``tok``; -1 when the lexicon forbids it."""
        key = (nid, tok)
        hit = self.children.get(key)
        if hit is None:
            node = self._make(nid, tok)
            if node is None:
                hit = -1
            else:
                self.nodes.append(node)
                hit = len(self.nodes) - 1
            self.children[key] = hit
        return hit

    def _make(self, nid: int, tok: int) -> _Node | None:
        old = self.nodes[nid]
        if self.tokens is None:
            return _Node(nid, tok, old.lm_score, old.lm_state, old.partial, old.words)
        sym, lex, unit = self.tokens[tok], self.lexicon, self.unit
        if unit == "word":
            if lex is not None and sym not in lex.words:
                return None
            node = _Node(nid, tok, old.lm_score, old.lm_state, "", old.words)
            self._end_word(node, sym)
        elif unit == "char" and sym == self.delim:
            if lex is not None and old.partial and old.partial not in lex.words:
                return None
            node = _Node(nid, tok, old.lm_score, old.lm_state, "", old.words)
            if old.partial:
                self._end_word(node, old.partial)
        elif unit == "bpe" and sym.startswith(SP_SPACE):
            partial = sym[len(SP_SPACE):]
            if lex is not None and ((old.partial and old.partial not in lex.words)
                                    or (partial and partial not in lex.prefixes)):
                return None
            node = _Node(nid, tok, old.lm_score, old.lm_state, partial, old.words)
            if old.partial:
                self._end_word(node, old.partial)
        else:
            partial = old.partial + sym
            if lex is not None and partial not in lex.prefixes:
                return None
            node = _Node(nid, tok, old.lm_score, old.lm_state, partial, old.words)
        return node

    def _end_word(self, node: _Node, word: str) -> None:
        add, node.lm_state = self.scorer.add_word(node.lm_state, word)
        node.lm_score += add
        node.words = node.words + (word,)

    def token_ids(self, nid: int) -> list[int]:
        """The tokens of prefix ``nid``."""
        out = []
        while nid > 0:
            node = self.nodes[nid]
            out.append(node.token)
            nid = node.parent
        return out[::-1]


def ctc_prefix_beam_search(log_probs, tokens: Sequence[str] | None = None, blank: int = 0,
                           beam: int = 16, token_beam: float = 12.0, nbest: int = 1, lm=None,
                           lm_weight: float = 0.5, word_bonus: float = 0.0, unit: str = "word",
                           word_delimiter: str = "|", length: int | None = None,
                           lexicon: Lexicon | Iterable[str] | None = None,
                           score_beam: float = math.inf) -> list[Hypothesis]:
    """CTC prefix beam search, optionally fused with a word-level LM and constrained to a
    lexicon.

    Args:
        log_probs: ``[T, C]`` natural-log scores (array or decodable), e.g. log-softmax outputs.
        tokens: token strings by id (needed with an LM or a lexicon, or to get ``words`` back).
        blank: id of the blank token.
        beam: prefixes kept after each frame.
        token_beam: per frame, only tokens within this many nats of the best are extended.
        nbest: how many hypotheses to return.
        lm: optional LM with ``begin_state()`` and ``score_word(state, word)`` (log10).
        lm_weight, word_bonus: shallow-fusion weight and per-word insertion bonus (nats).
        unit: ``"word"``, ``"char"`` or ``"bpe"`` (see module docstring).
        word_delimiter: the word-separator token for ``unit="char"``.
        length: number of valid frames (default: all).
        lexicon: optional ``Lexicon`` (or iterable of words): only its words can be spelled
            (a hypothesis that ends inside a word is returned only when all do).
        score_beam: after each frame, prefixes scoring more than this many nats below the best
            are dropped too (flashlight's ``beam_threshold``); the default keeps ``beam``.
    Returns:
        Up to ``nbest`` hypotheses, best first (end-of-sentence LM score included).
    """
    if (lm is not None or lexicon is not None) and tokens is None:
        raise ValueError("LM fusion and lexicon constraints need the token strings (tokens=...)")
    if unit not in ("word", "char", "bpe"):
        raise ValueError(f"unit must be 'word', 'char' or 'bpe', got {unit!r}")
    beam, nbest = count("beam", beam), count("nbest", nbest)
    token_beam = finite("token_beam", token_beam, 0.0, allow_inf=True)
    score_beam = finite("score_beam", score_beam, 0.0, strict=True, allow_inf=True)
    lm_weight, word_bonus = finite("lm_weight", lm_weight), finite("word_bonus", word_bonus)
    if lexicon is not None and not isinstance(lexicon, Lexicon):
        lexicon = Lexicon(lexicon)
    scores = _valid_scores(log_probs, blank, length)
    if tokens is not None and len(tokens) != scores.shape[1]:
        raise ValueError(f"{len(tokens)} token strings for scores of {scores.shape[1]} tokens")
    if lm is None and lexicon is None and (tokens is None or word_bonus == 0.0):
        prefixes = _plain_prefix_search(scores, blank, beam, token_beam, score_beam)
        return _finish_plain(prefixes, tokens, unit, word_delimiter, word_bonus, nbest)
    spell = _Spelling(tokens, unit, word_delimiter, _LmScorer(lm, lm_weight, word_bonus),
                      lexicon)
    nodes, children = spell.nodes, spell.children
    beams: dict[int, list[float]] = {0: [0.0, NEG_INF]}  # prefix -> [p_blank, p_nonblank]

    def extend_all(candidates: list[tuple[int, float]]) -> dict[int, list[float]]:
        """Every beam entry extended by every candidate (token, log p): the next entries."""
        nxt: dict[int, list[float]] = {}
        for nid, (p_b, p_nb) in beams.items():
            total = _logaddexp(p_b, p_nb)
            last = nodes[nid].token
            for c, lp in candidates:
                if c == blank:
                    e = nxt.get(nid)
                    if e is None:
                        e = nxt[nid] = [NEG_INF, NEG_INF]
                    e[0] = _logaddexp(e[0], total + lp)
                    continue
                if c == last:
                    # a repeat without a blank in between collapses into the same prefix
                    e = nxt.get(nid)
                    if e is None:
                        e = nxt[nid] = [NEG_INF, NEG_INF]
                    e[1] = _logaddexp(e[1], p_nb + lp)
                    new_total = p_b + lp
                else:
                    new_total = total + lp
                child = children.get((nid, c))
                if child is None:
                    child = spell.child(nid, c)
                if child < 0:
                    continue
                e = nxt.get(child)
                if e is None:
                    e = nxt[child] = [NEG_INF, NEG_INF]
                e[1] = _logaddexp(e[1], new_total)
        return nxt

    for t in range(scores.shape[0]):
        frame = scores[t]
        cand = np.flatnonzero(frame >= frame.max() - token_beam)
        nxt = extend_all(list(zip(cand.tolist(), frame[cand].tolist())))
        if not nxt and len(cand) < len(frame):
            # the lexicon forbade every likely token: fall back to all of them (blank included)
            nxt = extend_all(list(enumerate(frame.tolist())))
        beams = _prune(nxt, beam, score_beam, lambda n, e: _logaddexp(e[0], e[1])
                       + nodes[n].lm_score)

    finals = []
    ends_in_word = {nid for nid in beams if lexicon is not None and unit != "word"
                    and nodes[nid].partial and nodes[nid].partial not in lexicon.words}
    if len(ends_in_word) == len(beams):
        ends_in_word = set()  # nothing ends cleanly: keep the spellings rather than nothing
    for nid, (p_b, p_nb) in beams.items():
        if nid in ends_in_word:
            continue
        node = nodes[nid]
        total = _logaddexp(p_b, p_nb)
        lm_score, words, state = node.lm_score, node.words, node.lm_state
        if unit != "word" and node.partial:
            add, state = spell.scorer.add_word(state, node.partial)
            lm_score, words = lm_score + add, words + (node.partial,)
        if lm is not None:
            log10p, _ = lm.score_word(state, "</s>")
            lm_score += lm_weight * log10p * LN10
        finals.append(Hypothesis(spell.token_ids(nid), list(words), total + lm_score, total,
                                 lm_score))
    finals.sort(key=lambda h: h.score, reverse=True)
    return finals[:nbest]


def _prune(entries: dict, beam: int, score_beam: float, score) -> dict:
    """The ``beam`` best entries (stable among ties) that are within ``score_beam`` of the best."""
    ranked = heapq.nlargest(beam, ((score(k, e), k, e) for k, e in entries.items()),
                            key=lambda x: x[0])
    if ranked and score_beam != math.inf:
        floor = ranked[0][0] - score_beam
        ranked = [r for r in ranked if r[0] >= floor]
    return {k: e for _, k, e in ranked}


def _finish_plain(prefixes, tokens, unit, word_delimiter, word_bonus, nbest) -> list[Hypothesis]:
    """Hypotheses from the compiled search's (token ids, log p) pairs; words (and the per-word
    bonus) from the token strings when given."""
    out = []
    for toks, total in prefixes:
        words: list[str] = []
        if tokens is not None:
            syms = [tokens[i] for i in toks]
            if unit == "word":
                words = syms
            elif unit == "char":
                words = "".join(" " if s == word_delimiter else s for s in syms).split()
            else:
                words = "".join(syms).replace(SP_SPACE, " ").split()
        bonus = word_bonus * len(words)
        out.append(Hypothesis(toks, words, total + bonus, total, bonus))
    out.sort(key=lambda h: h.score, reverse=True)
    return out[:nbest]


@numba.njit(cache=True)
def _lae(a, b):
    if a < b:
        a, b = b, a
    if b == -np.inf:
        return a
    return a + np.log1p(np.exp(b - a))


@numba.njit(cache=True)
def _prefix_search_kernel(scores, blank, beam, token_beam, score_beam):
    """Prefix beam search without LM over ``scores`` float32 [T, C]. Prefixes are interned
    nodes (parent int32, token int32; node 0 = empty prefix). Returns the final beam's node
    ids, their log-probabilities and the node arrays (parent, token)."""
    T, C = scores.shape
    cap = 1024
    parent = np.empty(cap, np.int32)
    token = np.empty(cap, np.int32)
    parent[0] = -1
    token[0] = -1
    n_nodes = 1
    children = numba.typed.Dict.empty(numba.types.int64, numba.types.int64)
    slot = np.full(cap, -1, np.int64)  # node -> index in the next frame's entries
    cur = np.zeros(1, np.int64)
    cur_b = np.zeros(1, np.float64)
    cur_nb = np.full(1, -np.inf)
    for t in range(T):
        frame = scores[t]
        top = frame.max()
        cands = np.flatnonzero(frame >= top - token_beam)
        n_max = cur.shape[0] * (cands.shape[0] + 1)
        nxt = np.empty(n_max, np.int64)
        nxt_b = np.full(n_max, -np.inf)
        nxt_nb = np.full(n_max, -np.inf)
        n = 0
        for i in range(cur.shape[0]):
            nid = cur[i]
            p_b = cur_b[i]
            p_nb = cur_nb[i]
            total = _lae(p_b, p_nb)
            last = token[nid]
            for c in cands:
                lp = frame[c]
                if c == blank or c == last:
                    k = slot[nid]
                    if k < 0:
                        k = slot[nid] = n
                        nxt[n] = nid
                        n += 1
                    if c == blank:
                        nxt_b[k] = _lae(nxt_b[k], total + lp)
                        continue
                    nxt_nb[k] = _lae(nxt_nb[k], p_nb + lp)
                    new_total = p_b + lp
                else:
                    new_total = total + lp
                key = nid * C + c
                if key in children:
                    child = children[key]
                else:
                    if n_nodes >= parent.shape[0]:
                        bigger = 2 * parent.shape[0]
                        parent2 = np.empty(bigger, np.int32)
                        parent2[:n_nodes] = parent[:n_nodes]
                        parent = parent2
                        token2 = np.empty(bigger, np.int32)
                        token2[:n_nodes] = token[:n_nodes]
                        token = token2
                        slot2 = np.full(bigger, -1, np.int64)
                        slot2[:n_nodes] = slot[:n_nodes]
                        slot = slot2
                    child = n_nodes
                    parent[child] = nid
                    token[child] = c
                    n_nodes += 1
                    children[key] = child
                k = slot[child]
                if k < 0:
                    k = slot[child] = n
                    nxt[n] = child
                    n += 1
                nxt_nb[k] = _lae(nxt_nb[k], new_total)
        tot = np.empty(n)
        for k in range(n):
            slot[nxt[k]] = -1
            tot[k] = _lae(nxt_b[k], nxt_nb[k])
        order = np.argsort(-tot, kind="mergesort")[:beam]
        m = order.shape[0]
        floor = tot[order[0]] - score_beam
        while m > 1 and tot[order[m - 1]] < floor:
            m -= 1
        order = order[:m]
        cur = nxt[order]
        cur_b = nxt_b[order]
        cur_nb = nxt_nb[order]
    totals = np.empty(cur.shape[0])
    for i in range(cur.shape[0]):
        totals[i] = _lae(cur_b[i], cur_nb[i])
    return cur, totals, parent[:n_nodes], token[:n_nodes]


def _plain_prefix_search(scores, blank, beam, token_beam, score_beam):
    """The compiled search; returns [(token ids, log p)] of the final beam, best first."""
    nodes, totals, parent, token = _prefix_search_kernel(
        np.ascontiguousarray(scores, np.float32), int(blank), int(beam), float(token_beam),
        float(score_beam))
    out = []
    for nid, total in zip(nodes.tolist(), totals.tolist()):
        toks = []
        while nid > 0:
            toks.append(int(token[nid]))
            nid = int(parent[nid])
        out.append((toks[::-1], total))
    return out
