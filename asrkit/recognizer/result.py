"""What a Recognizer returns: JSON-ready results of transcription and alignment."""

from __future__ import annotations

import dataclasses

from asrkit.decoders.ctm import WordTiming

__all__ = ["AlignedWord", "Alignment", "Result", "WordTiming"]


@dataclasses.dataclass
class Result:
    """One transcribed recording.

    text: the words joined by spaces; words: ``WordTiming`` (word, start and duration in
    seconds from the start of the audio, confidence in [0, 1]: the n-best word posterior);
    duration: seconds of audio.
    """

    text: str
    words: list[WordTiming]
    duration: float

    def as_dict(self) -> dict:
        """``{"text", "words": [{"word", "start", "duration", "confidence"}], "duration"}``."""
        return {"text": self.text, "words": [w.as_dict() for w in self.words],
                "duration": round(self.duration, 3)}


@dataclasses.dataclass
class AlignedWord:
    """One word of a forced alignment: start and duration in seconds."""

    word: str
    start: float
    duration: float

    def as_dict(self) -> dict:
        """JSON-ready dict (times rounded to milliseconds)."""
        return {"word": self.word, "start": round(self.start, 3),
                "duration": round(self.duration, 3)}


@dataclasses.dataclass
class Alignment:
    """A transcript aligned to audio: its words in order with their times, and the mean
    log-probability per output frame of the best CTC (or transducer) path (a quality score: low
    values mean the transcript fits the audio badly)."""

    words: list[AlignedWord]
    log_prob_per_frame: float
    duration: float

    def as_dict(self) -> dict:
        """JSON-ready dict."""
        return {"words": [w.as_dict() for w in self.words],
                "log_prob_per_frame": round(self.log_prob_per_frame, 4),
                "duration": round(self.duration, 3)}

    def ctm_lines(self, utt: str, channel: int = 1) -> list[str]:
        """NIST CTM lines ``utt channel start duration word score`` (score: the per-frame
        log-probability of the path, the same on every word)."""
        return [f"{utt} {channel} {w.start:.3f} {w.duration:.3f} {w.word} "
                f"{self.log_prob_per_frame:.4f}" for w in self.words]
