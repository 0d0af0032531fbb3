"""64-bit hashes of n-grams, the keys of every lookup table in ``asrkit.lm``.

An n-gram ``(u1, ..., uk)`` is hashed from its last word leftwards,
``h = mix(...mix(mix(0, uk), u_{k-1})..., u1)``, so a decoder that extends a history one word to
the left (``w``, then ``(c_m, w)``, then ``(c_{m-1}, c_m, w)``) updates the hash in O(1) per step,
as KenLM's probing model does. Tables are per order, so equal hashes of different orders never
meet. The mixer is SplitMix64's finaliser; a collision among the n-grams of one order has
probability about ``M**2 / 2**65`` (3e-4 for 1e8 n-grams) and is detected when tables are built.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)


@njit(cache=True, inline="always")
def mix(h, word):
    """Return the hash (uint64) of the n-gram ``word`` + (the n-gram whose hash is ``h``).

    ``h`` is uint64 (0 for the empty n-gram) and ``word`` an integer word id.
    """
    x = h ^ (np.uint64(word) + _GOLDEN)
    x = (x ^ (x >> _S30)) * _M1
    x = (x ^ (x >> _S27)) * _M2
    return x ^ (x >> _S31)


@njit(cache=True)
def hash_rows(words):
    """Hash each row of ``words`` (int32 ``[M, k]``, one n-gram a row); returns uint64 ``[M]``."""
    m, k = words.shape
    out = np.empty(m, dtype=np.uint64)
    for i in range(m):
        h = np.uint64(0)
        for j in range(k - 1, -1, -1):
            h = mix(h, words[i, j])
        out[i] = h
    return out


def ngram_hashes(words: np.ndarray) -> np.ndarray:
    """Hashes of n-grams given as int ``[M, k]`` (k >= 1) word-id rows; returns uint64 ``[M]``."""
    words = np.ascontiguousarray(words, dtype=np.int32)
    if words.ndim != 2:
        raise ValueError(f"expected a 2-D [M, k] array of word ids, got shape {words.shape}")
    if words.shape[1] == 0:
        return np.zeros(words.shape[0], dtype=np.uint64)
    return hash_rows(words)


class HashCollisionError(ValueError):
    """Two different n-grams of one order hashed to the same 64-bit key (astronomically rare)."""


class DuplicateNgramError(ValueError):
    """An n-gram listed twice; ``words`` holds its word ids."""

    def __init__(self, message: str, words: list[int]):
        super().__init__(message)
        self.words = words


def check_sorted_unique(hashes: np.ndarray, words: np.ndarray, what: str) -> None:
    """Raise if sorted ``hashes`` (uint64 ``[M]``) repeat: a duplicate n-gram or a collision.

    ``words`` (int32 ``[M, k]``) are the n-grams in the same order; ``what`` names the table in
    the message.
    """
    if len(hashes) < 2:
        return
    dup = np.flatnonzero(hashes[1:] == hashes[:-1])
    if len(dup) == 0:
        return
    i = int(dup[0])
    if np.array_equal(words[i], words[i + 1]):
        raise DuplicateNgramError(f"{what}: n-gram {words[i].tolist()} is listed twice",
                                  words[i].tolist())
    raise HashCollisionError(f"{what}: 64-bit hash collision between n-grams "
                             f"{words[i].tolist()} and {words[i + 1].tolist()}")
