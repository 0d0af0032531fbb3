"""The decodable protocol: what decoders read instead of a network.

A decoder asks a decodable for the score of token ``i`` at frame ``t`` and how many frames are
ready; it never sees the acoustic model or the graph engine (DESIGN.md layering). Scores are
natural-log likelihoods (log-posteriors for CTC models), already multiplied by the acoustic scale.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Decodable(Protocol):
    """Frame-synchronous scores: ``log_likelihood(t, i)`` for ``t < num_frames_ready()``."""

    @property
    def num_tokens(self) -> int:
        """Size of the token inventory (CTC: including the blank)."""
        ...

    def num_frames_ready(self) -> int:
        """Frames that can be read now (grows while streaming)."""
        ...

    def is_last_frame(self, t: int) -> bool:
        """True when ``t`` is the final frame of the utterance."""
        ...

    def log_likelihood(self, t: int, i: int) -> float:
        """Scaled log-likelihood of token ``i`` at frame ``t``."""
        ...

    def frame(self, t: int) -> np.ndarray:
        """All tokens' scaled log-likelihoods at frame ``t``: float32 [num_tokens]."""
        ...


class MatrixDecodable:
    """A decodable over a complete ``[T, C]`` matrix of log-probabilities (e.g. read from an ark).

    ``acoustic_scale`` multiplies every score, as Kaldi's ``--acoustic-scale``.
    """

    def __init__(self, log_probs: np.ndarray, acoustic_scale: float = 1.0):
        log_probs = np.asarray(log_probs)
        if log_probs.ndim != 2:
            raise ValueError(f"log_probs must be [frames, tokens], got shape {log_probs.shape}")
        self.scores = np.ascontiguousarray(log_probs, dtype=np.float32) * np.float32(acoustic_scale)
        check_scores(self.scores)

    @property
    def num_tokens(self) -> int:
        return self.scores.shape[1]

    def num_frames_ready(self) -> int:
        return self.scores.shape[0]

    def is_last_frame(self, t: int) -> bool:
        return t == self.scores.shape[0] - 1

    def log_likelihood(self, t: int, i: int) -> float:
        return float(self.scores[t, i])

    def frame(self, t: int) -> np.ndarray:
        return self.scores[t]


def check_scores(scores: np.ndarray) -> None:
    """Raise ValueError naming the first frame whose scores (float ``[T, C]``) hold NaN or
    +inf: no search result from them would mean anything. -inf (probability 0) is allowed."""
    bad = np.isnan(scores) | (scores == np.inf)
    if bad.any():
        t = int(np.flatnonzero(bad.any(axis=1))[0])
        raise ValueError(f"the scores hold NaN or +inf (first at frame {t} of "
                         f"{scores.shape[0]})")


def as_matrix(decodable_or_array, acoustic_scale: float = 1.0) -> np.ndarray:
    """Return a float32 ``[T, C]`` matrix of scaled scores from a decodable or an array;
    ValueError when they hold NaN or +inf (``check_scores``)."""
    if isinstance(decodable_or_array, np.ndarray):
        return MatrixDecodable(decodable_or_array, acoustic_scale).scores
    d = decodable_or_array
    scores = np.stack([d.frame(t) for t in range(d.num_frames_ready())]) * np.float32(
        acoustic_scale)
    check_scores(scores)
    return scores
