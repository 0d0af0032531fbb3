"""Perplexity of a model on text, reported as SRILM's ``ngram -ppl`` does.

Words outside the vocabulary (and literal ``<unk>``) are OOVs: they are skipped in the log
probability and the word counts, but stay in the history as ``<unk>``. ``</s>`` is counted once
per sentence. ``ppl = 10 ** (-logprob / (words - oovs + sentences))`` and ``ppl1`` leaves out
the ``</s>`` events. ``ppl_with_oovs`` is KenLM's "perplexity including OOVs" (``<unk>``'s
probability counted).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterable

import numpy as np


@dataclasses.dataclass
class PerplexityStats:
    """Totals over a text: counts, log10 probability and perplexities."""

    sentences: int = 0
    words: int = 0
    oovs: int = 0
    logprob: float = 0.0  # log10, OOVs excluded
    logprob_with_oovs: float = 0.0  # log10, OOVs scored as <unk>

    @property
    def ppl(self) -> float:
        """Perplexity per word and ``</s>``, OOVs excluded (SRILM ``ppl``)."""
        n = self.words - self.oovs + self.sentences
        return 10.0 ** (-self.logprob / n) if n > 0 else math.nan

    @property
    def ppl1(self) -> float:
        """Perplexity per word without ``</s>`` (SRILM ``ppl1``)."""
        n = self.words - self.oovs
        return 10.0 ** (-self.logprob / n) if n > 0 else math.nan

    @property
    def ppl_with_oovs(self) -> float:
        """Perplexity counting OOVs as ``<unk>`` (KenLM's "including OOVs")."""
        n = self.words + self.sentences
        return 10.0 ** (-self.logprob_with_oovs / n) if n > 0 else math.nan

    def as_dict(self) -> dict:
        """JSON-ready dict with the counts and all perplexities."""
        d = dataclasses.asdict(self)
        d.update(ppl=self.ppl, ppl1=self.ppl1, ppl_with_oovs=self.ppl_with_oovs)
        return d

    def summary(self, name: str = "") -> str:
        """SRILM-style two-line summary."""
        head = f"file {name}: " if name else ""
        return (f"{head}{self.sentences} sentences, {self.words} words, {self.oovs} OOVs\n"
                f"0 zeroprobs, logprob= {self.logprob:.6g} ppl= {self.ppl:.6g} "
                f"ppl1= {self.ppl1:.6g}")


def evaluate(lm, sentences: Iterable[str], batch: int = 8192) -> PerplexityStats:
    """Score every sentence (empty ones are skipped) and return the totals.

    ``lm`` is an ``NgramLM``; ``sentences`` any iterable of whitespace-separated strings
    (e.g. an open text file), consumed in batches so files of any size fit in memory.
    """
    stats = PerplexityStats()
    it = iter(sentences)
    while True:
        raw = list(itertools.islice(it, batch))
        if not raw:
            break
        chunk = [s for s in raw if s.split()]
        if not chunk:
            continue
        ids, starts, oov = lm._ids_of(chunk)
        _, word_logp = lm._score_flat(ids, starts, True, True)
        # word_logp holds each sentence's words then its </s>; mark OOVs in that layout
        n = len(starts) - 1
        lens = np.diff(starts)
        oov_full = np.zeros(len(word_logp), dtype=bool)
        pos = np.arange(len(ids)) + np.repeat(np.arange(n), lens)
        oov_full[pos] = oov
        stats.sentences += n
        stats.words += len(ids)
        stats.oovs += int(oov.sum())
        stats.logprob += float(word_logp[~oov_full].sum())
        stats.logprob_with_oovs += float(word_logp.sum())
    return stats
