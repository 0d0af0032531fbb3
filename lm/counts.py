"""Streamed n-gram counting over text files of any size.

Text is read in chunks of lines; each line is one sentence, split on whitespace (tabs, CR,
repeated and trailing blanks are all separators; empty lines are skipped), and padded with
``<s>`` ... ``</s>``. Words become int32 ids through one dict of word types (never a dict of
n-grams): each chunk's n-gram windows are hashed to 64-bit keys (``hashing``), sorted and
reduced with numpy, and the sorted chunk tables are merged by a linear numba merge
(``merge_runs``), so memory grows with the number of distinct n-grams (about twice their
tables), not with the text. Vocabulary limits map dropped words to ``<unk>`` after counting,
which is exact because counts add up under the mapping.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import os
from collections.abc import Iterable, Iterator

import numpy as np
from numba import njit
from numpy.lib.stride_tricks import sliding_window_view

from asrkit.lm.hashing import HashCollisionError, ngram_hashes
from asrkit.lm.vocab import BOS_ID, EOS_ID, SPECIALS, select_vocab
from asrkit.utils import progress
from asrkit.utils.textfile import decode_lines


@dataclasses.dataclass
class NgramCounts:
    """Raw n-gram counts of a text.

    ``words[n-1]`` int32 ``[M_n, n]`` and ``counts[n-1]`` int64 ``[M_n]`` list every n-gram seen
    (orders >= 2 sorted by ``hashes[n-1]``, uint64); unigrams list the whole vocabulary in id
    order, with zero counts for words never seen (``<unk>``, ``<s>`` when nothing is counted).
    """

    vocab: list[str]
    words: list[np.ndarray]
    counts: list[np.ndarray]
    hashes: list[np.ndarray]
    sentences: int = 0
    tokens: int = 0  # words of the text, without <s> and </s>

    @property
    def order(self) -> int:
        """Highest order counted."""
        return len(self.words)


class TextFormatError(ValueError):
    """Bad training text; the message names the file and line."""


def reduce_sorted(hashes: np.ndarray, words: np.ndarray,
                  counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sort n-grams by hash and add the counts of repeats.

    Takes uint64 ``[M]``, int32 ``[M, n]``, int64 ``[M]``; returns the same with unique,
    sorted hashes. Raises ``HashCollisionError`` if two different n-grams share a hash.
    """
    perm = np.argsort(hashes, kind="stable")
    hashes, words, counts = hashes[perm], words[perm], counts[perm]
    first = np.ones(len(hashes), dtype=bool)
    first[1:] = hashes[1:] != hashes[:-1]
    repeats = np.flatnonzero(~first)
    if len(repeats) and np.any(words[repeats] != words[repeats - 1]):
        i = int(repeats[np.flatnonzero(np.any(words[repeats] != words[repeats - 1], axis=1))[0]])
        raise HashCollisionError(f"64-bit hash collision between n-grams {words[i - 1].tolist()} "
                                 f"and {words[i].tolist()}")
    starts = np.flatnonzero(first)
    return hashes[starts], words[starts], np.add.reduceat(counts, starts) if len(starts) else counts


@njit(cache=True)
def merge_runs(h1, w1, c1, h2, w2, c2):
    """Merge two count tables sorted by unique hash (uint64 ``[M]``, int32 ``[M, n]``, int64
    ``[M]``) in one linear pass, adding the counts of n-grams in both.

    Returns ``(hashes, words, counts, collision)``; ``collision`` is the row (in the output) of
    an n-gram whose hash matched a different n-gram, or -1.
    """
    n1, n2 = len(h1), len(h2)
    m = w1.shape[1]
    h = np.empty(n1 + n2, dtype=np.uint64)
    w = np.empty((n1 + n2, m), dtype=np.int32)
    c = np.empty(n1 + n2, dtype=np.int64)
    i = j = k = 0
    collision = -1
    while i < n1 or j < n2:
        if j >= n2 or (i < n1 and h1[i] < h2[j]):
            h[k] = h1[i]
            w[k] = w1[i]
            c[k] = c1[i]
            i += 1
        elif i >= n1 or h2[j] < h1[i]:
            h[k] = h2[j]
            w[k] = w2[j]
            c[k] = c2[j]
            j += 1
        else:
            for x in range(m):
                if w1[i, x] != w2[j, x]:
                    collision = k
            h[k] = h1[i]
            w[k] = w1[i]
            c[k] = c1[i] + c2[j]
            i += 1
            j += 1
        k += 1
    return h[:k].copy(), w[:k].copy(), c[:k].copy(), collision


def _merge_two(a, b):
    h, w, c, collision = merge_runs(*a, *b)
    if collision >= 0:
        raise HashCollisionError(f"64-bit hash collision involving the n-gram "
                                 f"{w[collision].tolist()}")
    return h, w, c


class _Table:
    """One order's counts as sorted runs (hash, words, counts), merged like a binary counter:
    a run is merged into its predecessor once it is at least half as big, so every n-gram is
    merged O(log chunks) times and memory stays about twice the distinct n-grams."""

    def __init__(self, n: int):
        self.n = n
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, hashes, words, counts):
        self.parts.append((hashes, words, counts))
        while len(self.parts) > 1 and 2 * len(self.parts[-1][0]) >= len(self.parts[-2][0]):
            b = self.parts.pop()
            self.parts[-1] = _merge_two(self.parts[-1], b)

    def result(self):
        if not self.parts:
            return (np.zeros(0, np.uint64), np.zeros((0, self.n), np.int32),
                    np.zeros(0, np.int64))
        while len(self.parts) > 1:
            b = self.parts.pop()
            self.parts[-1] = _merge_two(self.parts[-1], b)
        return self.parts[0]


def _line_chunks(source, name: str, chunk_bytes: int) -> Iterator[tuple[int, list[str]]]:
    """Yield ``(number of the chunk's first line, lines)`` from a path or an iterable."""
    if isinstance(source, (str, os.PathLike)):
        size = os.path.getsize(source)
        bar = progress(total=size, desc=f"counting {os.path.basename(name)}", unit="B")
        lineno = 1
        with open(source, "rb") as f:
            while True:
                raw = f.readlines(chunk_bytes)
                if not raw:
                    break
                try:
                    lines = [b.decode("utf-8") for b in raw]
                except UnicodeDecodeError:  # find and name the line
                    lines = list(decode_lines(raw, name, first_line=lineno))
                yield lineno, lines
                lineno += len(lines)
                bar.update(sum(len(b) for b in raw))
        bar.close()
    else:
        lineno, lines, nbytes = 1, [], 0
        for line in source:
            lines.append(line)
            nbytes += len(line)
            if nbytes >= chunk_bytes:
                yield lineno, lines
                lineno += len(lines)
                lines, nbytes = [], 0
        if lines:
            yield lineno, lines


def count_ngrams(source: str | os.PathLike | Iterable[str], order: int,
                 vocab_file: str | None = None, vocab_size: int | None = None,
                 chunk_bytes: int = 1 << 18, name: str | None = None) -> NgramCounts:
    """Count all n-grams of orders 1..``order`` in ``source`` (a path or an iterable of lines).

    ``vocab_file`` / ``vocab_size`` limit the vocabulary (other words become ``<unk>``). A line
    holding ``<s>`` or ``</s>`` is an error naming the file and line. Returns ``NgramCounts``.
    """
    if order < 1:
        raise ValueError(f"order must be at least 1, got {order}")
    # each chunk is split into many small lists that never form cycles: keep the cyclic GC
    # from rescanning them
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _count(source, order, vocab_file, vocab_size, chunk_bytes, name)
    finally:
        if was_enabled:
            gc.enable()


def _count(source, order, vocab_file, vocab_size, chunk_bytes, name) -> NgramCounts:
    name = name or (os.fspath(source) if isinstance(source, (str, os.PathLike)) else "<text>")
    ids: dict[str, int] = {w: i for i, w in enumerate(SPECIALS)}
    unigrams = np.zeros(len(ids), dtype=np.int64)
    tables = [_Table(n) for n in range(2, order + 1)]
    sentences = tokens = 0
    for first_line, lines in _line_chunks(source, name, chunk_bytes):
        split = [line.split() for line in lines]
        lens = [len(t) for t in split]
        linenos = [first_line + k for k, n in enumerate(lens) if n]
        lens = [n for n in lens if n]
        if not lens:
            continue
        toks = list(itertools.chain.from_iterable(split))
        for w in dict.fromkeys(toks):  # new word types, in order of first appearance
            if w not in ids:
                ids[w] = len(ids)
        flat = list(map(ids.__getitem__, toks))
        tok = np.asarray(flat, dtype=np.int32)
        lens_a = np.asarray(lens, dtype=np.int64)
        bad = np.flatnonzero((tok == BOS_ID) | (tok == EOS_ID))
        if len(bad):
            s = int(np.searchsorted(np.cumsum(lens_a), bad[0], side="right"))
            raise TextFormatError(f"{name}:{linenos[s]}: the text contains {SPECIALS[tok[bad[0]]]}"
                                  "; sentence boundaries are added to every line automatically")
        sentences += len(lens)
        tokens += len(tok)
        seq, sent = _pad(tok, lens_a)
        counts1 = np.bincount(seq, minlength=len(ids))
        if len(counts1) > len(unigrams):
            unigrams = np.concatenate([unigrams, np.zeros(len(counts1) - len(unigrams), np.int64)])
        unigrams += counts1
        for table in tables:
            n = table.n
            if len(seq) < n:
                continue
            valid = sent[: len(seq) - n + 1] == sent[n - 1:]
            windows = sliding_window_view(seq, n)[valid]
            h = ngram_hashes(windows)
            uh, first, cnt = np.unique(h, return_index=True, return_counts=True)
            table.add(uh, windows[first], cnt.astype(np.int64))
    vocab = list(ids)
    words = [np.arange(len(vocab), dtype=np.int32).reshape(-1, 1)]
    counts = [unigrams]
    hashes = [ngram_hashes(words[0])]
    for table in tables:
        h, w, c = table.result()
        hashes.append(h)
        words.append(w)
        counts.append(c)
    result = NgramCounts(vocab, words, counts, hashes, sentences, tokens)
    if vocab_file is not None or vocab_size is not None:
        result = _limit_vocab(result, vocab_file, vocab_size)
    return result


def _pad(tok: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sentences back to back with ``<s>``/``</s>`` around each; returns (ids, sentence index)."""
    n = len(lens)
    sizes = lens + 2
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    seq = np.empty(int(sizes.sum()), dtype=np.int32)
    is_word = np.ones(len(seq), dtype=bool)
    is_word[starts] = False
    is_word[starts + lens + 1] = False
    seq[starts] = BOS_ID
    seq[starts + lens + 1] = EOS_ID
    seq[is_word] = tok
    return seq, np.repeat(np.arange(n, dtype=np.int64), sizes)


def _limit_vocab(c: NgramCounts, vocab_file: str | None, vocab_size: int | None) -> NgramCounts:
    vocab, old_to_new = select_vocab(c.vocab, c.counts[0], vocab_file, vocab_size)
    uni = np.bincount(old_to_new, weights=c.counts[0], minlength=len(vocab)).astype(np.int64)
    words = [np.arange(len(vocab), dtype=np.int32).reshape(-1, 1)]
    counts = [uni]
    hashes = [ngram_hashes(words[0])]
    for w, cnt in zip(c.words[1:], c.counts[1:]):
        w = old_to_new[w]
        h, w, cnt = reduce_sorted(ngram_hashes(w), w, cnt)
        words.append(w)
        counts.append(cnt)
        hashes.append(h)
    return NgramCounts(vocab, words, counts, hashes, c.sentences, c.tokens)
