"""Tuning the word insertion penalty on a dev set from one search's n-best lists.

Kaldi's scoring scripts pick the penalty (and LM weight) that give the lowest dev WER by
rescoring lattices, not by searching again. Here each utterance's n-best list carries its
acoustic and graph cost (the graph cost includes the penalty the search used, ``searched``
per word), so the total under another penalty ``p`` is
``ac + graph + (p - searched) * len(words)`` and the best entry is picked again. The n-best
came from a search at ``searched``; entries the lattice beam pruned are not recovered, so a
range centred on the searched value is the right use.
"""

from __future__ import annotations

import dataclasses

from asrkit.decoders.scoring import ScoreReport, score_texts

NbestList = list[tuple[list[str], float, float]]   # (words, ac_cost, graph_cost), best first


@dataclasses.dataclass
class PenaltyTuning:
    """The outcome: ``best`` penalty, its hypotheses and report, and WER per tried value."""

    best: float
    hyps: dict[str, str]
    report: ScoreReport
    curve: list[tuple[float, float]]   # (penalty, error rate %)


def penalty_values(spec: str) -> list[float]:
    """``"LO:HI:STEP"`` -> the values LO, LO+STEP, ... <= HI (at most 1000); ValueError if
    malformed, not finite, or empty."""
    import math

    parts = spec.split(":")
    try:
        lo, hi, step = (float(v) for v in parts)
    except ValueError:
        raise ValueError(f"expected LO:HI:STEP (e.g. -4:0:1), got {spec!r}") from None
    if not all(math.isfinite(v) for v in (lo, hi, step)) or step <= 0 or hi < lo:
        raise ValueError(f"{spec!r}: need finite LO <= HI and STEP > 0")
    n = int(math.floor((hi - lo) / step + 1e-9)) + 1
    if n > 1000:
        raise ValueError(f"{spec!r}: {n} values (at most 1000)")
    return [round(lo + i * step, 10) for i in range(n)]


def pick(nbest: NbestList, delta: float) -> list[str]:
    """The entry of ``nbest`` with the lowest cost once each word costs ``delta`` more."""
    return min(nbest, key=lambda e: e[1] + e[2] + delta * len(e[0]))[0]


def tune_penalty(nbests: dict[str, NbestList], refs: dict[str, str], values: list[float],
                 searched: float) -> PenaltyTuning:
    """Rescore every utterance's n-best list under each penalty in ``values`` and score it
    against ``refs`` (utt -> text); returns the best value (the lowest WER; on a tie, the value
    nearest the searched one) with its hypotheses. Utterances without an n-best list count as
    deletions, as in scoring."""
    best = None
    curve = []
    for v in values:
        hyps = {u: " ".join(pick(nb, v - searched)) for u, nb in nbests.items() if nb}
        rep = score_texts(refs, hyps)
        curve.append((v, rep.error_rate))
        key = (rep.error_rate, abs(v - searched))
        if best is None or key < best[0]:
            best = (key, v, hyps, rep)
    if best is None:
        raise ValueError("no penalty values to try")
    _, v, hyps, rep = best
    return PenaltyTuning(v, hyps, rep, curve)
