"""Vocabulary: special symbols, vocabulary files and top-K selection.

Ids follow KenLM's ``lmplz``: ``<unk>`` = 0, ``<s>`` = 1, ``</s>`` = 2, then words in order of
first appearance in the training text.
"""

from __future__ import annotations

import os

import numpy as np

UNK = "<unk>"
BOS = "<s>"
EOS = "</s>"
SPECIALS = (UNK, BOS, EOS)
UNK_ID, BOS_ID, EOS_ID = 0, 1, 2


def read_vocab_file(path: str | os.PathLike) -> list[str]:
    """Words of a vocabulary file: the first field of each non-empty line (SRILM ``-vocab``
    style; further fields such as counts are ignored). Returns them in file order, deduplicated."""
    from asrkit.utils.textfile import read_lines

    words: dict[str, None] = {}
    for line in read_lines(path):
        fields = line.split()
        if fields:
            words.setdefault(fields[0], None)
    return list(words)


def select_vocab(words: list[str], unigram_counts: np.ndarray, limit_file: str | None = None,
                 top_k: int | None = None) -> tuple[list[str], np.ndarray]:
    """Choose the model vocabulary among the counted ``words`` (ids = positions, specials first).

    ``unigram_counts`` int64 ``[len(words)]`` are the raw counts. ``limit_file`` keeps the words
    it lists (also those never seen, which get only interpolated mass); ``top_k`` keeps the K
    most frequent words (ties broken by first appearance) besides the three specials. Returns
    the new vocabulary and ``old_to_new`` int32 ``[len(words)]`` mapping dropped words to
    ``<unk>``.
    """
    keep = np.ones(len(words), dtype=bool)
    extra: list[str] = []
    if limit_file is not None:
        allowed = read_vocab_file(limit_file)
        allowed_set = set(allowed)
        keep &= np.array([w in allowed_set for w in words], dtype=bool)
        seen = set(words)
        extra = [w for w in allowed if w not in seen and w not in SPECIALS]
    if top_k is not None:
        if top_k < 1:
            raise ValueError(f"vocabulary size must be positive, got {top_k}")
        cand = np.flatnonzero(keep[len(SPECIALS):]) + len(SPECIALS)
        order = cand[np.argsort(-unigram_counts[cand], kind="stable")]
        chosen = np.zeros(len(words), dtype=bool)
        chosen[order[:top_k]] = True
        keep &= chosen
        extra = extra[: max(0, top_k - int(chosen.sum()))]
    keep[: len(SPECIALS)] = True
    old_to_new = np.full(len(words), UNK_ID, dtype=np.int32)
    kept = np.flatnonzero(keep)
    old_to_new[kept] = np.arange(len(kept), dtype=np.int32)
    return [words[i] for i in kept] + extra, old_to_new
