"""The neural LM's vocabulary, with the conventions of ``asrkit.lm``.

Ids: ``<unk>`` = 0, ``<s>`` = 1, ``</s>`` = 2, then the words of the training text in order of
first appearance (KenLM's ``lmplz`` order), limited by a vocabulary file (SRILM ``-vocab``
style, first field per line) and/or to the K most frequent words; every other word maps to
``<unk>``. ``<s>`` is only ever an input: the model never predicts it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import numpy as np

from asrkit.lm.vocab import BOS, BOS_ID, EOS, EOS_ID, SPECIALS, UNK, UNK_ID, select_vocab


class TextFormatError(ValueError):
    """Bad text input; the message names the file and line."""


class Vocabulary:
    """Word <-> id mapping; ``words[i]`` is the word of id ``i`` (specials first)."""

    def __init__(self, words: list[str]):
        words = list(words)
        if tuple(words[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"a vocabulary starts with {' '.join(SPECIALS)}; got "
                             f"{' '.join(words[:3])}")
        if len(set(words)) != len(words):
            dup = next(w for i, w in enumerate(words) if w in words[:i])
            raise ValueError(f"word {dup!r} is listed twice in the vocabulary")
        self.words = words
        self.ids = {w: i for i, w in enumerate(words)}

    unk_id, bos_id, eos_id = UNK_ID, BOS_ID, EOS_ID

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: str) -> bool:
        return word in self.ids

    def __eq__(self, other) -> bool:
        return isinstance(other, Vocabulary) and self.words == other.words

    def word_id(self, word: str) -> int:
        """Id of ``word``; ``<unk>``'s id for words outside the vocabulary."""
        return self.ids.get(word, UNK_ID)

    def encode(self, words: Iterable[str]) -> np.ndarray:
        """Ids (int32 ``[n]``) of a list of words; unknown words become ``<unk>``."""
        get = self.ids.get
        return np.array([get(w, UNK_ID) for w in words], dtype=np.int32)

    def is_oov(self, word: str) -> bool:
        """True for words scored as ``<unk>`` (unknown ones and literal ``<unk>``)."""
        return self.ids.get(word, UNK_ID) == UNK_ID

    @classmethod
    def from_sentences(cls, sentences: Iterable[list[str]], vocab_file: str | None = None,
                       top_k: int | None = None) -> Vocabulary:
        """Build the vocabulary of tokenised ``sentences`` (lists of words).

        ``vocab_file`` keeps only the words it lists (and adds those never seen); ``top_k``
        keeps the K most frequent words besides the specials (ties: first appearance), as
        ``asrkit lm train --vocab/--vocab-size``.
        """
        ids: dict[str, int] = {w: i for i, w in enumerate(SPECIALS)}
        counts: list[int] = [0, 0, 0]
        for words in sentences:
            for w in words:
                i = ids.setdefault(w, len(ids))
                if i == len(counts):
                    counts.append(0)
                counts[i] += 1
        words = list(ids)
        chosen, _ = select_vocab(words, np.asarray(counts, dtype=np.int64), vocab_file, top_k)
        return cls(chosen)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> Vocabulary:
        """A closed vocabulary from a file (first field per line); specials are added first."""
        from asrkit.lm.vocab import read_vocab_file

        listed = read_vocab_file(path)
        return cls(list(SPECIALS) + [w for w in listed if w not in SPECIALS])


def read_sentences(path: str | os.PathLike) -> list[list[str]]:
    """Tokenised sentences of a text file, one per line (empty lines skipped).

    Literal ``<s>`` and ``</s>`` inside a sentence are errors naming the file and line.
    """
    out = []
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                words = raw.decode("utf-8").split()
            except UnicodeDecodeError as e:
                raise TextFormatError(f"{path}:{lineno}: not UTF-8: {e.reason} at byte "
                                      f"{e.start} of the line") from None
            if not words:
                continue
            if BOS in words or EOS in words:
                raise TextFormatError(f"{path}:{lineno}: sentences may not contain {BOS} or "
                                      f"{EOS} (they are added around each line)")
            out.append(words)
    return out


__all__ = ["BOS", "EOS", "UNK", "TextFormatError", "Vocabulary", "read_sentences"]
