"""N-best rescoring with a neural (or any) LM, and the n-best text format.

Costs are natural-log costs (``-ln p``), as in Kaldi lattices: each hypothesis carries an
acoustic cost and a graph/LM cost. Rescoring replaces the LM part::

    old   = -ln 10 * ngram_lm.score(words)   if an n-gram LM is given, else the n-best's lm_cost
    nn    = -ln 10 * lm.score(words)          (<s> ... </s>)
    loglinear: new = (1 - w) * old + w * nn   (Kaldi's rnnlm/lmrescore_nbest.sh; w = nn_weight)
    linear:    new = -sum_i ln(w p_nn(word_i | h) + (1 - w) p_ngram(word_i | h))   (needs ngram_lm)
    total = acoustic_scale * ac_cost + lm_weight * new

and the hypotheses of each utterance are sorted by ``total`` (ties keep the input order).
``lm`` is anything with ``score_sentences`` (``LstmLM`` or ``asrkit.lm.NgramLM``).

N-best text format, one hypothesis per line (Kaldi's ``utt-N`` ids, costs as
``lattice-to-nbest`` | ``nbest-to-linear`` give them)::

    utt1-1 1234.5 45.25 the cat sat
    utt1-2 1236.0 43.75 the cat sad

fields: ``<utterance>-<rank>``, acoustic cost, graph/LM cost, then the words (none for an empty
hypothesis). Hypotheses of an utterance are consecutive. Written back the same way, reranked,
with the new LM cost in the third field.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping

import numpy as np

LN10 = math.log(10.0)
MODES = ("loglinear", "linear")


class NbestFormatError(ValueError):
    """A malformed n-best file; the message names the file and line."""


@dataclasses.dataclass
class Hypothesis:
    """One n-best entry; the rescoring fields are None until :func:`rescore_nbest` fills them."""

    words: list[str]
    ac_cost: float               # acoustic cost (-ln p; asrkit decode: times its acoustic scale)
    lm_cost: float               # graph/LM cost from the decoder
    rank: int = 0                # position in the input list (0 = decoder's best)
    old_lm_cost: float | None = None
    nn_lm_cost: float | None = None
    new_lm_cost: float | None = None
    total: float | None = None

    def as_dict(self) -> dict:
        """JSON-ready dict (words joined by spaces)."""
        d = dataclasses.asdict(self)
        d["words"] = " ".join(self.words)
        return d


def _as_hypothesis(h, rank: int) -> Hypothesis:
    if isinstance(h, Hypothesis):
        return dataclasses.replace(h, rank=rank)
    words, ac, lm = h
    words = words.split() if isinstance(words, str) else list(words)
    return Hypothesis(words, float(ac), float(lm), rank)


def _word_log10(model, sentences: list[str]) -> list[np.ndarray]:
    """Per sentence, log10 p of each word then ``</s>`` (LstmLM batched, NgramLM per word)."""
    if hasattr(model, "word_scores"):
        return model.word_scores(sentences)
    return [np.array([lp for lp, _, _ in model.full_scores(s)]) for s in sentences]


def rescore_nbest(nbest, lm, lm_weight: float = 1.0, ngram_lm=None,
                  interpolation: str = "loglinear", nn_weight: float = 0.5,
                  acoustic_scale: float = 1.0):
    """Rescore and rerank n-best lists.

    nbest: ``{utt: [(words, ac_cost, lm_cost), ...]}`` or a list of such lists (words a string
    or a list; Hypothesis objects are accepted too). lm: the new LM (``LstmLM`` or ``NgramLM``);
    ngram_lm: the old LM whose scores replace the n-best's lm_cost; interpolation: 'loglinear'
    or 'linear' (per-word probabilities, needs ngram_lm); nn_weight: the new LM's weight in the
    interpolation (1.0 = the new LM alone). Returns the same container of lists of
    :class:`Hypothesis`, each sorted by total cost, best first.
    """
    if interpolation not in MODES:
        raise ValueError(f"interpolation must be one of {MODES}, got {interpolation!r}")
    if not 0.0 <= nn_weight <= 1.0:
        raise ValueError(f"nn_weight must be in [0, 1], got {nn_weight}")
    for name, value in (("lm_weight", lm_weight), ("acoustic_scale", acoustic_scale)):
        if not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value}")
    if interpolation == "linear" and ngram_lm is None and nn_weight < 1.0:
        raise ValueError("linear interpolation needs per-word n-gram probabilities: pass "
                         "ngram_lm (the n-best's lm_cost is a sentence total)")
    keyed = isinstance(nbest, Mapping)
    lists = list(nbest.values()) if keyed else list(nbest)
    hyps = [[_as_hypothesis(h, r) for r, h in enumerate(lst)] for lst in lists]
    flat = [h for lst in hyps for h in lst]
    texts = sorted({" ".join(h.words) for h in flat})
    index = {t: k for k, t in enumerate(texts)}
    if interpolation == "linear" and nn_weight < 1.0:
        nn_w = _word_log10(lm, texts)
        ng_w = _word_log10(ngram_lm, texts)
        nn = np.array([-LN10 * float(w.sum()) for w in nn_w])
        old = np.array([-LN10 * float(w.sum()) for w in ng_w])
        mixed = np.array([-float(np.sum(np.log(nn_weight * 10.0 ** a
                                                + (1.0 - nn_weight) * 10.0 ** b)))
                          for a, b in zip(nn_w, ng_w)])
    else:
        nn = -LN10 * np.asarray(lm.score_sentences(texts), dtype=np.float64)
        old = (-LN10 * np.asarray(ngram_lm.score_sentences(texts), dtype=np.float64)
               if ngram_lm is not None else None)
        mixed = None
    for h in flat:
        k = index[" ".join(h.words)]
        h.nn_lm_cost = float(nn[k])
        h.old_lm_cost = float(old[k]) if old is not None else h.lm_cost
        if mixed is not None:
            h.new_lm_cost = float(mixed[k])
        else:
            h.new_lm_cost = (1.0 - nn_weight) * h.old_lm_cost + nn_weight * h.nn_lm_cost
        h.total = acoustic_scale * h.ac_cost + lm_weight * h.new_lm_cost
    ranked = [sorted(lst, key=lambda h: (h.total, h.rank)) for lst in hyps]
    return dict(zip(nbest.keys(), ranked)) if keyed else ranked


def _split_id(hyp_id: str) -> str | None:
    utt, sep, n = hyp_id.rpartition("-")
    return utt if sep and utt and n.isdigit() else None


def read_nbest(path: str | os.PathLike) -> dict[str, list[Hypothesis]]:
    """Read the n-best text format; returns ``{utt: [Hypothesis, ...]}`` in file order."""
    out: dict[str, list[Hypothesis]] = {}
    last = None
    try:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, start=1):
                fields = line.split()
                if not fields:
                    continue
                where = f"{path}:{lineno}"
                if len(fields) < 3:
                    raise NbestFormatError(f"{where}: expected '<utt>-<n> ac_cost lm_cost "
                                           f"words...', got {line.strip()!r}")
                utt = _split_id(fields[0])
                if utt is None:
                    raise NbestFormatError(f"{where}: hypothesis id {fields[0]!r} does not end "
                                           "in -<number> (Kaldi's utt-N)")
                try:
                    ac, lm = float(fields[1]), float(fields[2])
                except ValueError:
                    raise NbestFormatError(f"{where}: costs {fields[1]!r} {fields[2]!r} are not "
                                           "numbers") from None
                if not (math.isfinite(ac) and math.isfinite(lm)):
                    raise NbestFormatError(f"{where}: costs must be finite")
                if utt in out and utt != last:
                    raise NbestFormatError(f"{where}: hypotheses of utterance {utt!r} are not "
                                           "consecutive")
                lst = out.setdefault(utt, [])
                lst.append(Hypothesis(fields[3:], ac, lm, len(lst)))
                last = utt
    except UnicodeDecodeError as e:
        raise NbestFormatError(f"{path}: not UTF-8: {e}") from None
    return out


def format_nbest(results: Mapping[str, list[Hypothesis]]) -> str:
    """The n-best text of reranked ``results``: ids renumbered from 1 in the new order, the new
    LM cost (when rescored) in the third field."""
    lines = []
    for utt, hyps in results.items():
        for n, h in enumerate(hyps, start=1):
            lm = h.new_lm_cost if h.new_lm_cost is not None else h.lm_cost
            lines.append(" ".join([f"{utt}-{n}", f"{h.ac_cost:.8g}", f"{lm:.8g}", *h.words]))
    return "".join(line + "\n" for line in lines)


def write_nbest(path: str | os.PathLike, results: Mapping[str, list[Hypothesis]]) -> None:
    """Write :func:`format_nbest` to ``path`` atomically."""
    from asrkit.utils import atomic_write_text

    atomic_write_text(path, format_nbest(results))
