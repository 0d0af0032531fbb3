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
    ctx_state: int = 0  # hotword context state (its scores are in lm_score)


class _LmScorer:
    """Weighted LM scores of words ending hypotheses, memoised per ``(state, word)``.

    During a frame the search only ``defer``s the words that new prefixes end; ``flush`` then
    scores all of them in one batch (``lm.score_words``, one compiled call, where the LM has
    it) before the beam is pruned. Fewer than ``BATCH_MIN`` words are scored one by one: a
    batch call costs more than a few ``score_word`` calls (which the LM memoises)."""

    BATCH_MIN = 8

    def __init__(self, lm, lm_weight: float, word_bonus: float):
        self.lm, self.w, self.bonus = lm, lm_weight, word_bonus
        self.cache: dict = {}
        self.pending: dict = {}  # (state, word) -> nodes waiting for its score
        self.batch = getattr(lm, "score_words", None)

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

    def defer(self, node: _Node, word: str) -> None:
        """Add ``word``'s score to ``node.lm_score`` and set ``node.lm_state`` (from
        ``node.lm_state``) now when known, else at the next ``flush``."""
        key = (node.lm_state, word)
        hit = self.cache.get(key) if self.lm is not None else (self.bonus, None)
        if hit is None:
            waiting = self.pending.get(key)
            if waiting is None:
                self.pending[key] = [node]
            else:
                waiting.append(node)
            return
        node.lm_score += hit[0]
        node.lm_state = hit[1]

    def flush(self) -> None:
        """Score every deferred word (one batch call) and update the waiting nodes."""
        if not self.pending:
            return
        keys = list(self.pending)
        if self.batch is not None and len(keys) >= self.BATCH_MIN:
            logp, nxt = self.batch([k[0] for k in keys], [k[1] for k in keys])
            scored = zip(logp.tolist(), nxt)
        else:
            scored = (self.lm.score_word(state, word) for state, word in keys)
        for key, (log10p, state) in zip(keys, scored):
            hit = self.cache[key] = (self.w * log10p * LN10 + self.bonus, state)
            for node in self.pending[key]:
                node.lm_score += hit[0]
                node.lm_state = state
        self.pending.clear()


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

    def __init__(self, tokens, unit, word_delimiter, scorer: _LmScorer, lexicon, context=None):
        self.tokens, self.unit, self.delim = tokens, unit, word_delimiter
        self.scorer, self.lexicon, self.context = scorer, lexicon, context
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
                if self.context is not None:  # labels are token ids + 1 (0 is no label)
                    node.ctx_state, boost = self.context.step(self.nodes[nid].ctx_state,
                                                              tok + 1)
                    node.lm_score += boost
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
        """``node`` ends ``word``: its LM score is added now or at ``scorer.flush()``."""
        self.scorer.defer(node, word)
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
                           score_beam: float = math.inf, context=None) -> list[Hypothesis]:
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
        context: hotwords, a ``ContextGraph`` over token ids + 1
            (``asrkit.decoders.context_graph.hotword_token_phrases``); its scores count in
            ``Hypothesis.lm``.
    Returns:
        Up to ``nbest`` hypotheses, best first (end-of-sentence LM score included).
    """
    search = CtcPrefixSearch(tokens, blank, beam, token_beam, lm, lm_weight, word_bonus, unit,
                             word_delimiter, lexicon, score_beam, context)
    nbest = count("nbest", nbest)
    scores = _valid_scores(log_probs, search.blank, length)
    search.advance(scores)
    return search.finish(nbest)


class CtcPrefixSearch:
    """The CTC prefix beam search of ``ctc_prefix_beam_search`` (same options but ``nbest``
    and ``length``), fed scores in blocks of frames: ``advance(scores [n, C])``, ``best()`` for
    the best hypothesis so far (a partial result: no end-of-sentence score, a word being
    spelled not yet scored), ``finish(nbest)`` for the final hypotheses. Fed an utterance's
    frames in any blocks, ``finish`` equals ``ctc_prefix_beam_search`` on all of them."""

    def __init__(self, tokens: Sequence[str] | None = None, blank: int = 0, beam: int = 16,
                 token_beam: float = 12.0, lm=None, lm_weight: float = 0.5,
                 word_bonus: float = 0.0, unit: str = "word", word_delimiter: str = "|",
                 lexicon: Lexicon | Iterable[str] | None = None, score_beam: float = math.inf,
                 context=None):
        if (lm is not None or lexicon is not None) and tokens is None:
            raise ValueError("LM fusion and lexicon constraints need the token strings "
                             "(tokens=...)")
        if unit not in ("word", "char", "bpe"):
            raise ValueError(f"unit must be 'word', 'char' or 'bpe', got {unit!r}")
        self.blank = count("blank", blank, 0)
        self.beam = count("beam", beam)
        self.token_beam = finite("token_beam", token_beam, 0.0, allow_inf=True)
        self.score_beam = finite("score_beam", score_beam, 0.0, strict=True, allow_inf=True)
        lm_weight, word_bonus = finite("lm_weight", lm_weight), finite("word_bonus", word_bonus)
        if lexicon is not None and not isinstance(lexicon, Lexicon):
            lexicon = Lexicon(lexicon)
        self.tokens, self.unit, self.word_delimiter = tokens, unit, word_delimiter
        self.lm, self.lm_weight, self.word_bonus = lm, lm_weight, word_bonus
        self.lexicon, self.context = lexicon, context
        self.T = 0
        self.num_tokens = None
        self.compiled = (lm is None and lexicon is None and context is None
                         and (tokens is None or word_bonus == 0.0))
        if self.compiled:
            self.state = _new_prefix_state()
        else:
            self.spell = _Spelling(tokens, unit, word_delimiter,
                                   _LmScorer(lm, lm_weight, word_bonus), lexicon, context)
            self.beams: dict[int, list[float]] = {0: [0.0, NEG_INF]}  # prefix -> [p_b, p_nb]

    def advance(self, log_probs) -> None:
        """Search more frames ``[n, C]`` (array or decodable); ValueError for NaN/+inf scores,
        a blank id beyond the scores or a change of width."""
        scores = _valid_scores(log_probs, self.blank, None)
        if self.num_tokens is None:
            if self.tokens is not None and len(self.tokens) != scores.shape[1]:
                raise ValueError(f"{len(self.tokens)} token strings for scores of "
                                 f"{scores.shape[1]} tokens")
            self.num_tokens = scores.shape[1]
        elif scores.shape[1] != self.num_tokens:
            raise ValueError(f"scores of {scores.shape[1]} tokens after {self.num_tokens}")
        self.T += scores.shape[0]
        if not scores.shape[0]:
            return
        if self.compiled:
            self.state = _prefix_search_kernel(
                np.ascontiguousarray(scores, np.float32), self.blank, self.beam,
                float(self.token_beam), float(self.score_beam), *self.state)
            return
        for t in range(scores.shape[0]):
            self._frame(scores[t])

    def _frame(self, frame: np.ndarray) -> None:
        cand = np.flatnonzero(frame >= frame.max() - self.token_beam)
        nxt = self._extend_all(list(zip(cand.tolist(), frame[cand].tolist())))
        if not nxt and len(cand) < len(frame):
            # the lexicon forbade every likely token: fall back to all of them (blank included)
            nxt = self._extend_all(list(enumerate(frame.tolist())))
        nodes = self.spell.nodes
        self.beams = _prune(nxt, self.beam, self.score_beam,
                            lambda n, e: _logaddexp(e[0], e[1]) + nodes[n].lm_score)

    def _extend_all(self, candidates: list[tuple[int, float]]) -> dict[int, list[float]]:
        """Every beam entry extended by every candidate (token, log p): the next entries."""
        spell, blank = self.spell, self.blank
        nodes, children = spell.nodes, spell.children
        nxt: dict[int, list[float]] = {}
        for nid, (p_b, p_nb) in self.beams.items():
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
        spell.scorer.flush()  # the LM scores of the words the new prefixes end, in one batch
        return nxt

    def best(self) -> Hypothesis:
        """The best hypothesis so far (scores as during the search: no end-of-sentence LM
        score, a word being spelled unscored, an unfinished hotword match still boosted)."""
        if self.compiled:
            return _finish_plain(self._plain(), self.tokens, self.unit, self.word_delimiter,
                                 self.word_bonus, 1)[0]
        nodes = self.spell.nodes
        nid, (p_b, p_nb) = max(self.beams.items(), key=lambda kv: _logaddexp(*kv[1])
                               + nodes[kv[0]].lm_score)
        node = nodes[nid]
        total = _logaddexp(p_b, p_nb)
        words = list(node.words) + ([node.partial] if self.unit != "word" and node.partial
                                    else [])
        return Hypothesis(self.spell.token_ids(nid), words, total + node.lm_score, total,
                          node.lm_score)

    def _plain(self):
        """The compiled search's beam as [(token ids, log p)]."""
        cur, cur_b, cur_nb, parent, token = self.state[5], self.state[6], self.state[7], \
            self.state[0], self.state[1]
        out = []
        for i, nid in enumerate(cur.tolist()):
            total = _logaddexp(float(cur_b[i]), float(cur_nb[i]))
            toks = []
            while nid > 0:
                toks.append(int(token[nid]))
                nid = int(parent[nid])
            out.append((toks[::-1], total))
        return out

    def finish(self, nbest: int = 1) -> list[Hypothesis]:
        """Up to ``nbest`` hypotheses over the frames so far, best first (end-of-sentence LM
        score and the last word's scores included, an unfinished hotword match taken back)."""
        nbest = count("nbest", nbest)
        if self.compiled:
            return _finish_plain(self._plain(), self.tokens, self.unit, self.word_delimiter,
                                 self.word_bonus, nbest)
        nodes, lexicon, unit, lm = self.spell.nodes, self.lexicon, self.unit, self.lm
        finals = []
        ends_in_word = {nid for nid in self.beams if lexicon is not None and unit != "word"
                        and nodes[nid].partial and nodes[nid].partial not in lexicon.words}
        if len(ends_in_word) == len(self.beams):
            ends_in_word = set()  # nothing ends cleanly: keep the spellings rather than nothing
        for nid, (p_b, p_nb) in self.beams.items():
            if nid in ends_in_word:
                continue
            node = nodes[nid]
            total = _logaddexp(p_b, p_nb)
            lm_score, words, state = node.lm_score, node.words, node.lm_state
            if unit != "word" and node.partial:
                add, state = self.spell.scorer.add_word(state, node.partial)
                lm_score, words = lm_score + add, words + (node.partial,)
            if lm is not None:
                log10p, _ = lm.score_word(state, "</s>")
                lm_score += self.lm_weight * log10p * LN10
            if self.context is not None:
                lm_score += self.context.final_score(node.ctx_state)
            finals.append(Hypothesis(self.spell.token_ids(nid), list(words), total + lm_score,
                                     total, lm_score))
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
def _new_prefix_state():
    """The compiled search's state before the first frame (``_prefix_search_kernel``)."""
    cap = 1024
    parent = np.empty(cap, np.int32)
    token = np.empty(cap, np.int32)
    parent[0] = -1
    token[0] = -1
    children = numba.typed.Dict.empty(numba.types.int64, numba.types.int64)
    slot = np.full(cap, -1, np.int64)  # node -> index in the next frame's entries
    return (parent, token, 1, children, slot, np.zeros(1, np.int64), np.zeros(1, np.float64),
            np.full(1, -np.inf))


@numba.njit(cache=True)
def _prefix_search_kernel(scores, blank, beam, token_beam, score_beam, parent, token, n_nodes,
                          children, slot, cur, cur_b, cur_nb):
    """Prefix beam search without LM over ``scores`` float32 [T, C], continuing from the
    state ``_new_prefix_state`` made or a previous call returned: prefixes are interned nodes
    (parent int32, token int32; node 0 = empty prefix; ``children`` maps node * C + token to
    a node) and the beam is ``cur`` (node ids) with their blank and non-blank
    log-probabilities. Returns the new state."""
    T, C = scores.shape
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
    return parent, token, n_nodes, children, slot, cur, cur_b, cur_nb
