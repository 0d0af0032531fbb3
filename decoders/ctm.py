"""Word times and confidences: CTM files (NIST's ``utt channel start duration word [conf]``).

Times come from the frames of each word on the best path (``DecodeResult.word_frames``) and the
feature frame shift times the model's subsampling factor. Confidences are n-best posteriors:
each hypothesis gets ``p(h) = softmax(-cost(h))`` over the n-best list, and a best-path word's
confidence is the total probability of the hypotheses that have the same word at the same position
(after a Levenshtein alignment to the best path), as ROVER-style systems compute them.
"""

from __future__ import annotations

import dataclasses
import math

from asrkit.decoders.scoring import align


@dataclasses.dataclass
class WordTiming:
    """One recognised word: its label, start and duration in seconds, and confidence in [0, 1]."""

    word: str
    start: float
    duration: float
    confidence: float = 1.0

    def as_dict(self) -> dict:
        """JSON-ready dict."""
        return {"word": self.word, "start": round(self.start, 3),
                "duration": round(self.duration, 3), "confidence": round(self.confidence, 4)}


def nbest_confidences(nbest: list[tuple[list[str], float]], scale: float = 1.0) -> list[float]:
    """Per-word confidences of ``nbest[0]``'s words from an n-best list of (words, cost)."""
    if not nbest:
        return []
    best_cost = min(c for _, c in nbest)
    weights = [math.exp(-scale * (c - best_cost)) for _, c in nbest]
    total = sum(weights)
    best_words = nbest[0][0]
    conf = [0.0] * len(best_words)
    for (words, _), w in zip(nbest, weights):
        a = align(best_words, words)
        i = 0
        for ref, op in zip(a.ref, a.ops):
            if ref is None:
                continue
            if op == "C":
                conf[i] += w / total
            i += 1
    return conf


def word_timings(words: list[str], word_frames, frame_shift: float,
                 confidences: list[float] | None = None) -> list[WordTiming]:
    """Timings from ``word_frames`` (int [n, 2]: first and last frame of each word) in seconds."""
    out = []
    for i, w in enumerate(words):
        first, last = int(word_frames[i][0]), int(word_frames[i][1])
        c = 1.0 if confidences is None else confidences[i]
        out.append(WordTiming(w, first * frame_shift, (last - first + 1) * frame_shift, c))
    return out


def ctm_lines(utt: str, timings: list[WordTiming], channel: int = 1) -> list[str]:
    """CTM lines for one utterance: ``utt channel start duration word confidence``."""
    return [f"{utt} {channel} {t.start:.3f} {t.duration:.3f} {t.word} {t.confidence:.4f}"
            for t in timings]
