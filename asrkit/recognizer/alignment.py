"""CTC forced alignment of a transcript to a model's log-probabilities: word start and duration.

Each word becomes the model's tokens (through the model folder's lexicon, else the word itself
when it is a token, else its characters when each is one), the Viterbi path through the CTC
lattice is found (``asrkit.kernels.ctc_align``) and each word spans the frames of its tokens.
"""

from __future__ import annotations

import numpy as np

from asrkit.recognizer.options import RecognizerError
from asrkit.recognizer.result import AlignedWord


def word_tokens(word: str, tokens, lexicon: dict) -> list[int]:
    """Token ids of ``word``: its first lexicon pronunciation, else the word itself as a token,
    else its characters. ``tokens``: a TokenTable. RecognizerError when a token is missing."""
    if word in lexicon:
        seq = lexicon[word]
    elif word in tokens:
        seq = (word,)
    else:
        seq = tuple(word)
    missing = [t for t in seq if t not in tokens]
    if missing:
        raise RecognizerError(f"word {word!r}: no tokens for {missing} in the model")
    return [tokens.index(t) for t in seq]


def align_words(log_probs: np.ndarray, words: list[str], tokens, lexicon: dict,
                frame_shift: float) -> tuple[list[AlignedWord], float]:
    """Align ``words`` to ``log_probs`` float32 ``[T, C]``; returns the aligned words (times in
    seconds: frames x ``frame_shift``) and the mean log-probability per frame of the path.
    RecognizerError for an empty transcript, a word without tokens, or a transcript that does
    not fit the frames."""
    from asrkit.kernels import ctc_align, ctc_segments

    if not words:
        raise RecognizerError("empty transcript: nothing to align")
    per_word = [word_tokens(w, tokens, lexicon) for w in words]
    targets = np.array([[t for seq in per_word for t in seq]], np.int32)
    T = log_probs.shape[0]
    path, scores = ctc_align(log_probs[:, None, :], targets, np.array([T], np.int32),
                             np.array([targets.shape[1]], np.int32), blank=tokens.blank,
                             return_scores=True)
    if not np.isfinite(scores[0]):
        raise RecognizerError(f"the transcript ({targets.shape[1]} tokens) does not fit the audio "
                              f"({T} frames)")
    segs = ctc_segments(path[:, 0], blank=tokens.blank)
    out, k = [], 0
    for w, seq in zip(words, per_word):
        first, last = segs[k], segs[k + len(seq) - 1]
        k += len(seq)
        out.append(AlignedWord(w, float(first[1]) * frame_shift,
                               float(last[2] - first[1]) * frame_shift))
    return out, float(scores[0]) / T
