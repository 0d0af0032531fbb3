"""``NgramLM``: a back-off n-gram language model for querying (scores, states, perplexity).

Probabilities are log10, as in ARPA files and KenLM. Word ids are positions in ``lm.vocab``
(the order of the ARPA unigram section). Words missing from the vocabulary score as ``<unk>``;
an ARPA file without ``<unk>`` gets one with log10 p = -100, as KenLM does.

The stateful API is the one decoders need (KenLM's ``BeginSentenceWrite`` / ``BaseScore``)::

    state = lm.begin_state()                  # after <s>
    logp, state = lm.score_word(state, "the")
    logp, state = lm.score_word(state, "</s>")

A state is a tuple of word ids (most recent last, at most ``order - 1`` of them): the longest
suffix of the history that the model lists, so equal states score every continuation alike.

Decoders that score many hypotheses at once use the batch API: ``score_words(states, words)``
and ``score_ids(states, word_ids)`` score all pairs in one compiled call. There a state may
also be a row of an int32 ``[N, order]`` array (its length, then its words, zero-padded;
``state_rows`` / ``state_tuples`` convert), which needs no Python object per state at all::

    rows = lm.state_rows([lm.begin_state()] * 3)
    logp, rows = lm.score_words(rows, ["the", "a", "cat"])   # float64 [3], int32 [3, order]
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator

import numpy as np

from asrkit.lm import query
from asrkit.lm.hashing import check_sorted_unique, ngram_hashes
from asrkit.lm.vocab import BOS, EOS, UNK

State = tuple  # tuple[int, ...]: context word ids, most recent last
_PAD4 = (0, 0, 0, 0)  # pads a state to the four context words of query.score_at


class NgramLM:
    """A back-off n-gram model held as flat, hash-sorted numpy arrays.

    Build one with ``NgramLM.load`` / ``from_arpa`` / ``from_binary``, ``asrkit.lm.train``, or
    ``NgramLM.from_tables``. ``order`` is the highest n-gram order and ``vocab`` the list of
    words (ids are positions).
    """

    def __init__(self, vocab: list[str], keys: np.ndarray, prob: np.ndarray, bow: np.ndarray,
                 offsets: np.ndarray, words: list[np.ndarray], ranks: list[np.ndarray],
                 source: str = "", index: tuple[np.ndarray, np.ndarray] | None = None):
        """Wrap prepared arrays (use the ``from_*`` constructors instead).

        ``keys`` uint64 ``[T]``, ``prob``/``bow`` float32 ``[T]`` (log10), ``offsets`` int64
        ``[order + 1]``; ``words[n-1]`` int32 ``[M_n, n]`` (rows as in the flat arrays) and
        ``ranks[n-1]`` int64 ``[M_n]`` (row of the i-th n-gram in ARPA order); ``index`` the
        hash index ``query.build_index`` makes (built here when not given).
        """
        self.vocab = vocab
        self.order = len(offsets) - 1
        self._keys, self._prob, self._bow = keys, prob, bow
        self._offsets = np.asarray(offsets, dtype=np.int64)
        if index is None:
            index = query.build_index(np.asarray(keys), np.asarray(prob), np.asarray(bow),
                                      self._offsets)
        self._table, self._slots = index
        width = max(self.order - 1, 1)
        self._ctx_buf = np.zeros(width, dtype=np.int32)  # scratch of score_id (not re-entrant)
        self._out_buf = np.zeros(width, dtype=np.int32)
        # the arrays every query kernel takes first
        v = int(self._offsets[1])
        self._q = (self._table, self._prob[:v], self._bow[:v], self._slots)
        # the same arrays by address, for the per-word kernels (self._q keeps them alive)
        self._q = tuple(np.ascontiguousarray(a) for a in self._q)
        self._header = query.model_header(*self._q)
        self._h = int(self._header.ctypes.data)
        self._v = v
        self._words = words
        self._ranks = ranks
        self.source = source
        self.meta: dict = {}  # how the model was made (smoothing, discounts), when known
        self._ids: dict[str, int] | None = None
        self._ids_brk: dict[str, int] | None = None
        self.unk_id = self._require(UNK)
        self.bos_id = self._optional(BOS)
        self.eos_id = self._optional(EOS)

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_tables(cls, vocab: list[str], tables: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
                    arpa_order: bool = True, source: str = "") -> NgramLM:
        """Build a model from per-order tables.

        ``tables[n-1] = (words int [M_n, n], log10 prob float [M_n], log10 bow float [M_n])``.
        Unigrams must list every vocabulary word in id order (``words[:, 0] == arange(V)``).
        With ``arpa_order`` the given row order is the ARPA order (``iter_ngrams``); otherwise
        n-grams are listed sorted by word ids.
        """
        if not tables:
            raise ValueError("a model needs at least unigrams")
        uni_words = np.asarray(tables[0][0]).reshape(-1)
        if len(uni_words) != len(vocab) or not np.array_equal(uni_words, np.arange(len(vocab))):
            raise ValueError("unigrams must list every vocabulary word, in id order")
        keys_parts, prob_parts, bow_parts, words_out, ranks = [], [], [], [], []
        offsets = [0]
        for n, (words, prob, bow) in enumerate(tables, start=1):
            words = np.ascontiguousarray(words, dtype=np.int32).reshape(-1, n)
            prob = np.asarray(prob, dtype=np.float32)
            bow = np.asarray(bow, dtype=np.float32)
            keys = ngram_hashes(words)
            if n == 1:
                perm = np.arange(len(words))
            else:
                perm = np.argsort(keys, kind="stable")
                keys, words, prob, bow = keys[perm], words[perm], prob[perm], bow[perm]
                check_sorted_unique(keys, words, f"{n}-grams of {source or 'the model'}")
            if arpa_order:  # rank[i] = row now holding the i-th input n-gram
                rank = np.empty(len(perm), dtype=np.int64)
                rank[perm] = np.arange(len(perm))
            else:
                rank = np.lexsort(words.T[::-1]) if n > 1 else perm
            keys_parts.append(keys)
            prob_parts.append(prob)
            bow_parts.append(bow)
            words_out.append(words)
            ranks.append(np.asarray(rank, dtype=np.int64))
            offsets.append(offsets[-1] + len(words))
        return cls(list(vocab), np.concatenate(keys_parts), np.concatenate(prob_parts),
                   np.concatenate(bow_parts), np.asarray(offsets, dtype=np.int64), words_out,
                   ranks, source=source)

    @classmethod
    def from_arpa(cls, path: str | os.PathLike) -> NgramLM:
        """Read an ARPA file (plain or gzip); errors name the line at fault."""
        from asrkit.lm.arpa import read_arpa

        return read_arpa(path)

    @classmethod
    def from_binary(cls, path: str | os.PathLike, verify: bool = True) -> NgramLM:
        """Memory-map a model written by ``save_binary``; ``verify=False`` skips the checks
        that read the whole file (checksums, word ids, values: see ``asrkit.lm.binary``)."""
        from asrkit.lm.binary import load_binary

        return load_binary(path, verify=verify)

    @classmethod
    def load(cls, path: str | os.PathLike) -> NgramLM:
        """Load ARPA (plain or gzip) or asrkit binary, detected from the file's first bytes."""
        from asrkit.lm.binary import is_binary

        if is_binary(path):
            return cls.from_binary(path)
        return cls.from_arpa(path)

    def write_arpa(self, path: str | os.PathLike) -> None:
        """Write the model as an ARPA file (atomically) that KenLM and SRILM read."""
        from asrkit.lm.arpa import write_arpa

        write_arpa(self, path)

    def save_binary(self, path: str | os.PathLike) -> None:
        """Write the memory-mappable binary form (atomically); ``NgramLM.load`` reads it."""
        from asrkit.lm.binary import save_binary

        save_binary(self, path)

    # -- vocabulary ---------------------------------------------------------------------------

    @property
    def word_ids(self) -> dict[str, int]:
        """Mapping word -> id (built on first use)."""
        if self._ids is None:
            self._ids = {w: i for i, w in enumerate(self.vocab)}
        return self._ids

    def _require(self, word: str) -> int:
        i = self.word_ids.get(word)
        if i is None:
            raise ValueError(f"{self.source or 'model'}: vocabulary has no {word}")
        return i

    def _optional(self, word: str) -> int:
        return self.word_ids.get(word, -1)

    def word_id(self, word: str) -> int:
        """Id of ``word``; the id of ``<unk>`` for words outside the vocabulary."""
        return self.word_ids.get(word, self.unk_id)

    def __contains__(self, word: str) -> bool:
        return word in self.word_ids

    @property
    def counts(self) -> list[int]:
        """Number of listed n-grams per order, ``[n1, n2, ...]``."""
        return [int(b - a) for a, b in zip(self._offsets[:-1], self._offsets[1:])]

    # -- stateful scoring ---------------------------------------------------------------------

    def begin_state(self) -> State:
        """The state after ``<s>`` (the null state when the model has no ``<s>``)."""
        if self.order < 2 or self.bos_id < 0:
            return ()
        return (self.bos_id,)

    def null_state(self) -> State:
        """The empty context (what KenLM calls the null context state)."""
        return ()

    def score_id(self, state: State, word_id: int) -> tuple[float, State]:
        """``(log10 p(word | state), next_state)`` for a word given by id.

        Not memoised: a memo cost as much as the compiled lookup it saves (decoders keep their
        own caches, or score many words at once with ``score_ids``).
        """
        n = len(state)
        if not 0 <= word_id < self._v:
            raise ValueError(f"word id {word_id} outside the vocabulary (0..{self._v - 1})")
        if n <= 4:  # every state of a model up to order 5: integers only, no arrays
            p = state + _PAD4
            lp, m = query.score_at(self._h, n, p[0], p[1], p[2], p[3], word_id)
        else:
            ctx = self._ctx_buf if n <= len(self._ctx_buf) else np.zeros(n, np.int32)
            ctx[:n] = state
            lp, m, _ = query.score_word(*self._q, ctx, n, int(word_id), self._out_buf)
        return lp, (state + (word_id,))[n + 1 - m:] if m else ()

    def score_word(self, state: State, word: str) -> tuple[float, State]:
        """``(log10 p(word | state), next_state)``; an unknown word scores as ``<unk>``."""
        return self.score_id(state, self.word_ids.get(word, self.unk_id))

    # -- many states at once -------------------------------------------------------------------

    def state_rows(self, states) -> np.ndarray:
        """State tuples as rows of an int32 ``[N, order]`` array (length, then the words,
        zero-padded): the state form of ``score_ids`` that needs no Python object per state."""
        width = self.order - 1
        n = len(states)
        rows = np.zeros((n, self.order), dtype=np.int32)
        if n and width:
            lengths = np.fromiter(map(len, states), dtype=np.int32, count=n)
            if lengths.max() > width:
                raise ValueError(f"a state of an order-{self.order} model has at most {width} "
                                 f"words, got {int(lengths.max())}")
            pad = (0,) * width
            rows[:, 0] = lengths
            rows[:, 1:] = np.array([s + pad[len(s):] for s in states], dtype=np.int32)
        return rows

    def state_tuples(self, rows: np.ndarray) -> list[State]:
        """State rows (int32 ``[N, order]``, see ``state_rows``) as state tuples."""
        return [tuple(r[1: 1 + r[0]]) for r in np.asarray(rows).tolist()]

    def score_ids(self, states, word_ids) -> tuple[np.ndarray, object]:
        """Score ``word_ids[i]`` after ``states[i]`` for all ``i`` in one compiled call.

        ``states``: int32 ``[N, order]`` state rows (``state_rows``) or a sequence of state
        tuples; ``word_ids``: int ``[N]``. Returns ``(log10 p float64 [N], next states)``, the
        next states in the form given (rows, or a list of tuples). Not memoised.
        """
        ids = np.ascontiguousarray(word_ids, dtype=np.int32).reshape(-1)
        as_rows = isinstance(states, np.ndarray)
        rows = (np.ascontiguousarray(states, dtype=np.int32) if as_rows
                else self.state_rows(states))
        width = self.order
        if rows.ndim != 2 or rows.shape[1] != width or rows.shape[0] != ids.size:
            raise ValueError(f"{ids.size} words need state rows of shape ({ids.size}, {width}),"
                             f" got {rows.shape}")
        if ids.size and (ids.min() < 0 or ids.max() >= self._v):
            raise ValueError(f"word ids outside the vocabulary (0..{self._v - 1})")
        if ids.size and (rows[:, 0].min() < 0 or rows[:, 0].max() > width - 1):
            raise ValueError(f"state row lengths must be within 0..{width - 1}")
        logp = np.empty(ids.size, dtype=np.float64)
        out = np.empty_like(rows)
        query.score_rows(self._h, rows, ids, logp, out)
        if as_rows:
            return logp, out
        m = out[:, 0].tolist()
        return logp, [(s + (w,))[len(s) + 1 - k:] if k else ()
                      for s, w, k in zip(states, ids.tolist(), m)]

    def score_words(self, states, words) -> tuple[np.ndarray, object]:
        """``score_ids`` with words given as strings (unknown words score as ``<unk>``)."""
        get, unk = self.word_ids.get, self.unk_id
        ids = np.fromiter(map(get, words, itertools.repeat(unk)), dtype=np.int32,
                          count=len(words))
        return self.score_ids(states, ids)

    # -- sentences ----------------------------------------------------------------------------

    _SENTENCE_BREAK = "\ue000asrkit-sentence-break\ue000"  # private-use chars: no whitespace

    def _ids_of(self, sentences: Iterable[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Word ids (int32, back to back), sentence starts (int64 [n+1]) and the OOV mask.

        The sentences are joined around a break token and split once, so the per-word work
        happens in C (``str.split``, ``map(dict.get)``) rather than in a Python loop.
        """
        sentences = sentences if isinstance(sentences, list) else list(sentences)
        brk = self._SENTENCE_BREAK
        text = f" {brk} ".join(sentences)
        if text.count(brk) != max(len(sentences) - 1, 0):  # the break occurs in the text
            split = [s.split() for s in sentences]
            starts = np.zeros(len(split) + 1, dtype=np.int64)
            np.cumsum([len(t) for t in split], out=starts[1:])
            toks = itertools.chain.from_iterable(split)
            ids = np.fromiter(map(self.word_ids.get, toks, itertools.repeat(self.unk_id)),
                              dtype=np.int32, count=int(starts[-1]))
            return ids, starts, ids == self.unk_id
        if self._ids_brk is None:
            self._ids_brk = {**self.word_ids, brk: -1}
        toks = text.split()
        ids = np.fromiter(map(self._ids_brk.get, toks, itertools.repeat(self.unk_id)),
                          dtype=np.int32, count=len(toks))
        breaks = np.flatnonzero(ids == -1)
        bounds = np.concatenate([[-1], breaks, [len(ids)]])
        starts = np.zeros(len(sentences) + 1, dtype=np.int64)
        np.cumsum(np.diff(bounds) - 1, out=starts[1:])
        ids = ids[ids != -1] if len(breaks) else ids
        return ids, starts, ids == self.unk_id

    def _score_flat(self, ids, starts, bos: bool, eos: bool):
        n = len(starts) - 1
        word_logp = np.zeros(len(ids) + (n if eos else 0), dtype=np.float64)
        if eos and self.eos_id < 0:
            raise ValueError(f"{self.source or 'model'}: vocabulary has no </s>")
        totals = query.score_sentences(*self._q, ids, starts, self.bos_id, self.eos_id,
                                       bool(bos and self.bos_id >= 0), bool(eos), word_logp)
        return totals, word_logp

    def score(self, sentence: str, bos: bool = True, eos: bool = True) -> float:
        """Total log10 probability of a whitespace-separated sentence, as KenLM's ``score``."""
        words = sentence.split()
        ids = np.fromiter(map(self.word_ids.get, words, itertools.repeat(self.unk_id)),
                          dtype=np.int32, count=len(words))
        if eos and self.eos_id < 0:
            raise ValueError(f"{self.source or 'model'}: vocabulary has no </s>")
        return query.score_sentence_at(self._h, ids, self.bos_id if bos else -1,
                                       self.eos_id if eos else -1)

    def score_sentences(self, sentences: Iterable[str], bos: bool = True,
                        eos: bool = True) -> np.ndarray:
        """Totals (float64 ``[n]``, log10) of many sentences in one compiled call."""
        ids, starts, _ = self._ids_of(sentences)
        return self._score_flat(ids, starts, bos, eos)[0]

    def full_scores(self, sentence: str, bos: bool = True,
                    eos: bool = True) -> Iterator[tuple[float, int, bool]]:
        """Per word ``(log10 p, length of the n-gram matched, is OOV)``, as KenLM's."""
        state = self.begin_state() if bos else self.null_state()
        words = sentence.split() + ([EOS] if eos else [])
        width = max(self.order - 1, 1)
        ctx = np.zeros(width, dtype=np.int32)
        out = np.zeros(width, dtype=np.int32)
        ctx[: len(state)] = state
        nctx = len(state)
        for w in words:
            i = self.word_ids.get(w)
            lp, nctx, length = query.score_word(*self._q, ctx, nctx,
                                                self.unk_id if i is None else i, out)
            ctx[:nctx] = out[:nctx]
            yield float(lp), int(length), i is None or i == self.unk_id

    def perplexity(self, sentences: str | Iterable[str]) -> float:
        """Perplexity over sentences, as SRILM ``-ppl`` (OOVs skipped, ``</s>`` counted).

        A single string is one sentence. See ``asrkit.lm.perplexity.evaluate`` for all figures.
        """
        from asrkit.lm.perplexity import evaluate

        if isinstance(sentences, str):
            sentences = [sentences]
        return evaluate(self, sentences).ppl

    # -- listing ------------------------------------------------------------------------------

    def iter_ngrams(self, n: int) -> Iterator[tuple[tuple[str, ...], float, float]]:
        """Yield ``(words, log10 prob, log10 backoff)`` for every listed n-gram of order ``n``.

        In ARPA order; the backoff is 0.0 when the n-gram has none.
        """
        if not 1 <= n <= self.order:
            raise ValueError(f"order {n} outside 1..{self.order}")
        lo = int(self._offsets[n - 1])
        words, rank, vocab = self._words[n - 1], self._ranks[n - 1], self.vocab
        prob = np.asarray(self._prob[lo: int(self._offsets[n])], dtype=np.float64)
        bow = np.asarray(self._bow[lo: int(self._offsets[n])], dtype=np.float64)
        for r in rank.tolist():
            yield (tuple(vocab[i] for i in words[r].tolist()), float(prob[r]), float(bow[r]))

    def ngram_arrays(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Order-``n`` tables in ARPA order: words int32 ``[M, n]``, log10 prob and backoff
        float32 ``[M]``."""
        lo, hi = int(self._offsets[n - 1]), int(self._offsets[n])
        rank = self._ranks[n - 1]
        return (np.asarray(self._words[n - 1])[rank], np.asarray(self._prob[lo:hi])[rank],
                np.asarray(self._bow[lo:hi])[rank])

    def __repr__(self) -> str:
        counts = ", ".join(f"{n}-grams={c}" for n, c in enumerate(self.counts, start=1))
        return f"NgramLM(order={self.order}, vocab={len(self.vocab)}, {counts})"
