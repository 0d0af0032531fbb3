"""Transducer (RNN-T) decoders: greedy search and icefall's modified beam search, with n-best
lists, word times and n-gram shallow fusion.

Both read the encoder output projected to the joiner dimension (``enc [T, H]``), a prediction
network step object and the joiner's output layer (``asrkit.kernels.transducer``):

- ``transducer_greedy``: the joiner's arg-max at each frame while it is not the blank, at most
  ``max_symbols`` labels per frame (icefall's ``greedy_search``);
- ``transducer_beam_search``: icefall's ``modified_beam_search``: at most one label per frame;
  each frame, every hypothesis is extended by the blank (same labels) and by its ``beam`` best
  labels, hypotheses that spell the same labels are merged (their probabilities added), and the
  ``beam`` best survive. With an LM (``begin_state()`` and ``score_word(state, word) -> (log10
  p, next state)``, e.g. ``asrkit.lm.NgramLM``) a word's score is added when the word is
  complete, as the CTC prefix search does (``asrkit.decoders.ctc``, whose prefix bookkeeping this
  reuses): ``score = log p_transducer + lm_weight * ln p_lm + word_bonus * words``; hotwords
  (a ``ContextGraph`` over tokens) add their boosts to the same score, as in that search.

Word times come from the frames where each word's tokens are emitted: a word starts at the frame
of its first token and lasts until the frame of its last one.

Both searches are resumable (a stream's search, ``asrkit.decoders.online.OnlineTransducerDecoder``):
``TransducerGreedySearch`` and ``TransducerBeamSearch`` take encoder frames as they come
(``advance``), keep their hypotheses (the prediction network's state, the LM state, the hotword
context state) between calls, give the best hypothesis so far (``best``) and, at ``finish``,
the offline search's result: the two offline functions are these classes fed everything.
"""

from __future__ import annotations

import dataclasses
import heapq

import numpy as np

from asrkit.decoders.ctc import LN10, _LmScorer, _logaddexp, _Spelling
from asrkit.decoders.ctm import WordTiming, nbest_confidences, word_timings
from asrkit.decoders.options import count, finite
from asrkit.kernels.transducer import GreedySearch, joiner_logits, log_softmax

SP_SPACE = "\u2581"


@dataclasses.dataclass
class TransducerHypothesis:
    """One n-best entry: token ids, the frame each was emitted at, words (when the token
    strings are given) with their first and last frames, and scores (natural log):
    ``score = acoustic + lm``."""

    tokens: list[int]
    frames: list[int]
    words: list[str]
    word_frames: list[tuple[int, int]]
    score: float
    acoustic: float
    lm: float


def words_of(token_ids, frames, tokens, unit: str = "word", word_delimiter: str = "|"):
    """``(words, [(first frame, last frame)])`` spelled by ``token_ids`` emitted at ``frames``
    (``unit``: ``"word"``, ``"char"`` with ``word_delimiter``, or ``"bpe"``); no words without
    the token strings."""
    if tokens is None:
        return [], []
    words, spans = [], []
    partial, first, last = "", -1, -1

    def close():
        nonlocal partial
        if partial:
            words.append(partial)
            spans.append((first, last))
        partial = ""

    for tok, t in zip(token_ids, frames):
        sym = tokens[tok]
        if unit == "word":
            words.append(sym)
            spans.append((t, t))
        elif unit == "char" and sym == word_delimiter:
            close()
        elif unit == "bpe" and sym.startswith(SP_SPACE):
            close()
            partial, first, last = sym[len(SP_SPACE):], t, t
        else:
            if not partial:
                first = t
            partial, last = partial + sym, t
    close()
    return words, spans


def _check_inputs(enc, weight, length):
    enc = np.asarray(enc, np.float32)
    H = "H" if weight is None else weight.shape[1]  # (an exported joiner checks its own)
    if enc.ndim != 2 or (weight is not None and enc.shape[1] != H):
        raise ValueError(f"enc must be [T, {H}], got shape {list(enc.shape)}")
    if not np.all(np.isfinite(enc)):
        raise ValueError("the encoder output holds NaN or infinite values")
    T = enc.shape[0] if length is None else count("length", length, 0)
    if T > enc.shape[0]:
        raise ValueError(f"length {T} is beyond the {enc.shape[0]} frames of enc")
    return enc, T


def _trailing(T: int, frames) -> int:
    """Frames after the last emission (all ``T`` when nothing was emitted)."""
    return T - 1 - frames[-1] if frames else T


class TransducerGreedySearch:
    """Resumable greedy search (see the module docstring; ``transducer_greedy``'s arguments):
    ``advance(enc [n, H])``, ``best()``, ``finish()``; frames count from the first fed.
    start: ``(state, out)`` of the prediction network to begin from (``predictor_state()``
    of an earlier search; default its start symbol). joiner: a function ``(enc [N, H], pred
    [N, H]) -> logits float32 [N, V]`` run instead of ``joiner_logits`` over weight and bias
    (an exported joiner, ``asrkit.export.OnnxTransducer.joiner``; weight and bias may then be
    None)."""

    def __init__(self, predictor, weight, bias, blank: int = 0, max_symbols: int = 3,
                 tokens=None, unit: str = "word", word_delimiter: str = "|", start=None,
                 joiner=None):
        self.weight, self.bias = weight, bias
        self.tokens, self.unit, self.delim = tokens, unit, word_delimiter
        one = None if joiner is None else (lambda e, o: joiner(e[None], o[None])[0])
        self.search = GreedySearch(predictor, weight, bias, blank,
                                   count("max_symbols", max_symbols), one)
        if start is not None:
            self.search.state, self.search.out = start

    def predictor_state(self):
        """``(state, out)`` of the prediction network after the labels emitted so far (a
        later search's ``start``: a stream's next segment goes on from the last labels)."""
        return self.search.state, self.search.out

    @property
    def T(self) -> int:
        """Frames searched so far."""
        return self.search.T

    def advance(self, enc, length: int | None = None) -> None:
        """Search the next frames ``enc`` float32 ``[n, H]`` (its first ``length``)."""
        enc, n = _check_inputs(enc, self.weight, length)
        self.search.advance(enc, n)

    def best(self) -> TransducerHypothesis:
        """The hypothesis so far (its score is the path's log-probability)."""
        s = self.search
        words, spans = words_of(s.tokens, s.frames, self.tokens, self.unit, self.delim)
        return TransducerHypothesis(list(s.tokens), list(s.frames), words, spans, s.log_prob,
                                    s.log_prob, 0.0)

    def finish(self, nbest: int = 1) -> list[TransducerHypothesis]:
        """``[best()]``: greedy search has one hypothesis."""
        return [self.best()]

    def trailing_frames(self) -> int:
        """Frames since the last emitted label (all of them before any)."""
        return _trailing(self.T, self.search.frames)


def transducer_greedy(enc, predictor, weight, bias, blank: int = 0, max_symbols: int = 3,
                      tokens=None, unit: str = "word", word_delimiter: str = "|",
                      length: int | None = None) -> TransducerHypothesis:
    """Greedy search (see the module docstring) over ``enc`` float32 ``[T, H]``; returns the
    hypothesis (its score is the path's log-probability)."""
    search = TransducerGreedySearch(predictor, weight, bias, blank, max_symbols, tokens, unit,
                                    word_delimiter)
    search.advance(enc, length)
    return search.best()


@dataclasses.dataclass
class _Hyp:
    acoustic: float
    state: object
    out: np.ndarray
    frames: tuple


class TransducerBeamSearch:
    """Resumable modified beam search (see the module docstring and
    ``transducer_beam_search``, whose arguments these are): ``advance(enc [n, H])`` searches
    more frames, ``best()`` is the best hypothesis so far (no end-of-sentence LM score, no
    hotword take-back), ``finish(nbest)`` the n-best as the offline search gives it (the
    search may go on after it). Frames count from the first fed. start: ``(state, out)`` of
    the prediction network to begin from (an earlier search's ``predictor_state()``).
    joiner: as ``TransducerGreedySearch``'s (weight and bias may then be None)."""

    def __init__(self, predictor, weight, bias, blank: int = 0, beam: int = 4, tokens=None,
                 unit: str = "word", word_delimiter: str = "|", lm=None,
                 lm_weight: float = 0.5, word_bonus: float = 0.0, context=None, start=None,
                 joiner=None):
        self.beam = count("beam", beam)
        lm_weight, word_bonus = finite("lm_weight", lm_weight), finite("word_bonus", word_bonus)
        if lm is not None and tokens is None:
            raise ValueError("LM fusion needs the token strings (tokens=...)")
        if unit not in ("word", "char", "bpe"):
            raise ValueError(f"unit must be 'word', 'char' or 'bpe', got {unit!r}")
        self.predictor, self.weight, self.bias, self.blank = predictor, weight, bias, int(blank)
        if joiner is None:
            def joiner(e, o):
                return joiner_logits(e, o, weight, bias)
        self.joiner = joiner
        self.lm, self.lm_weight, self.unit, self.context = lm, lm_weight, unit, context
        self.spell = _Spelling(tokens, unit, word_delimiter,
                               _LmScorer(lm, lm_weight, word_bonus), None, context)
        state, out = predictor.start() if start is None else start
        self.hyps = {0: _Hyp(0.0, state, out, ())}  # spelling node -> hypothesis
        self.T = 0
        self._final_node = None  # the node of finish()'s best hypothesis

    def advance(self, enc, length: int | None = None) -> None:
        """Search the next frames ``enc`` float32 ``[n, H]`` (its first ``length``)."""
        enc, n = _check_inputs(enc, self.weight, length)
        for t in range(n):
            self._frame(enc[t], self.T)
            self.T += 1

    def _frame(self, e: np.ndarray, t: int) -> None:
        hyps, spell, blank = self.hyps, self.spell, self.blank
        nids = list(hyps)
        outs = np.stack([hyps[n].out for n in nids])
        logp = log_softmax(self.joiner(np.broadcast_to(e, outs.shape), outs))
        k = min(self.beam, logp.shape[1] - 1)
        cands: dict[int, tuple] = {}  # node -> (acoustic, parent node, label or -1)
        for i, nid in enumerate(nids):
            h = hyps[nid]
            _offer(cands, nid, h.acoustic + float(logp[i, blank]), nid, -1)
            row = logp[i].copy()
            row[blank] = -np.inf
            for v in np.argpartition(-row, k - 1)[:k] if k > 0 else ():
                child = spell.child(nid, int(v))
                if child >= 0:
                    _offer(cands, child, h.acoustic + float(row[v]), nid, int(v))
        spell.scorer.flush()  # the LM scores of the words the new prefixes end, in one batch
        best = heapq.nlargest(self.beam, cands.items(),
                              key=lambda kv: kv[1][0] + spell.nodes[kv[0]].lm_score)
        new = {}
        for nid, (ac, parent, label) in best:
            p = hyps[parent]
            if label < 0:
                new[nid] = _Hyp(ac, p.state, p.out, p.frames)
            else:
                st, o = self.predictor.step(p.state, label)
                new[nid] = _Hyp(ac, st, o, p.frames + (t,))
        self.hyps = new

    def _best_node(self) -> int:
        nodes = self.spell.nodes
        return max(self.hyps, key=lambda n: self.hyps[n].acoustic + nodes[n].lm_score)

    def best(self) -> TransducerHypothesis:
        """The best hypothesis so far, scored without the end-of-input terms."""
        nid = self._best_node()
        h, node, spell = self.hyps[nid], self.spell.nodes[nid], self.spell
        toks = spell.token_ids(nid)
        words, spans = words_of(toks, list(h.frames), spell.tokens, self.unit, spell.delim)
        return TransducerHypothesis(toks, list(h.frames), words, spans,
                                    h.acoustic + node.lm_score, h.acoustic, node.lm_score)

    def finish(self, nbest: int = 1) -> list[TransducerHypothesis]:
        """Up to ``nbest`` hypotheses, best first, with the end-of-sentence LM score and
        the unfinished hotwords' boosts taken back (``transducer_beam_search``'s result)."""
        ranked = _finish(self.hyps, self.spell, self.lm, self.lm_weight, self.unit,
                         count("nbest", nbest), self.context)
        self._final_node = ranked[0][1] if ranked else None
        return [h for h, _ in ranked]

    def predictor_state(self):
        """``(state, out)`` of the prediction network of the best hypothesis (``finish``'s
        when it was called, else ``best``'s): a later search's ``start``."""
        nid = self._final_node if self._final_node is not None else self._best_node()
        h = self.hyps[nid]
        return h.state, h.out

    def trailing_frames(self) -> int:
        """Frames since the best hypothesis last emitted a label (all before any)."""
        return _trailing(self.T, self.hyps[self._best_node()].frames)


def transducer_beam_search(enc, predictor, weight, bias, blank: int = 0, beam: int = 4,
                           nbest: int = 1, tokens=None, unit: str = "word",
                           word_delimiter: str = "|", lm=None, lm_weight: float = 0.5,
                           word_bonus: float = 0.0, length: int | None = None,
                           context=None) -> list[TransducerHypothesis]:
    """Modified beam search (see the module docstring) over ``enc`` float32 ``[T, H]``.

    predictor: a step object (``asrkit.kernels.transducer``); weight [V, H], bias [V]: the
    joiner's output layer; beam: hypotheses kept per frame (and labels tried per hypothesis);
    nbest: how many to return; tokens, unit, word_delimiter: how tokens spell words (needed with
    an LM); lm, lm_weight, word_bonus: shallow fusion; length: frames to read (default T);
    context: hotwords, an ``asrkit.decoders.context_graph.ContextGraph`` over token ids + 1
    (``token_phrases``), as icefall's and sherpa's modified beam search carry it: each emitted
    token scores its context step, an unfinished phrase's boosts are taken back at the end;
    its scores count in ``lm``. Returns up to ``nbest`` hypotheses, best first (end-of-sentence
    LM score included).
    """
    nbest = count("nbest", nbest)
    search = TransducerBeamSearch(predictor, weight, bias, blank, beam, tokens, unit,
                                  word_delimiter, lm, lm_weight, word_bonus, context)
    search.advance(enc, length)
    return search.finish(nbest)


def _offer(cands: dict, nid: int, ac: float, parent: int, label: int) -> None:
    """Add a candidate for prefix ``nid``: a prefix reached twice is one hypothesis whose
    probability is the sum of both; the better path gives its state and frames."""
    old = cands.get(nid)
    if old is None:
        cands[nid] = (ac, parent, label)
    elif ac > old[0]:
        cands[nid] = (_logaddexp(ac, old[0]), parent, label)
    else:
        cands[nid] = (_logaddexp(ac, old[0]),) + old[1:]


def _finish(hyps, spell, lm, lm_weight, unit, nbest, context) -> list[tuple]:
    """``[(TransducerHypothesis, node)]`` of the ``nbest`` best, with the end-of-input terms."""
    out = []
    for nid, h in hyps.items():
        node = spell.nodes[nid]
        lm_score, state = node.lm_score, node.lm_state
        if unit != "word" and node.partial:
            add, state = spell.scorer.add_word(state, node.partial)
            lm_score += add
        if lm is not None:
            log10p, _ = lm.score_word(state, "</s>")
            lm_score += lm_weight * log10p * LN10
        if context is not None:
            lm_score += context.final_score(node.ctx_state)
        toks = spell.token_ids(nid)
        words, spans = words_of(toks, list(h.frames), spell.tokens, unit, spell.delim)
        out.append((TransducerHypothesis(toks, list(h.frames), words, spans,
                                         h.acoustic + lm_score, h.acoustic, lm_score), nid))
    out.sort(key=lambda hn: hn[0].score, reverse=True)
    return out[:nbest]


def hypothesis_timings(nbest: list[TransducerHypothesis], frame_shift: float,
                       start: float = 0.0) -> list[WordTiming]:
    """The best hypothesis' words with times (seconds, shifted by ``start``) and n-best
    confidences (``asrkit.decoders.ctm.nbest_confidences``)."""
    if not nbest:
        return []
    best = nbest[0]
    conf = nbest_confidences([(h.words, -h.score) for h in nbest])
    timings = word_timings(best.words, best.word_frames, frame_shift, conf)
    for w in timings:
        w.start += start
    return timings


__all__ = ["TransducerBeamSearch", "TransducerGreedySearch", "TransducerHypothesis",
           "hypothesis_timings", "transducer_beam_search", "transducer_greedy", "words_of"]
