#!/usr/bin/env python3
"""Split the total costs of ``asrkit decode``'s n-best lists into acoustic and LM parts.

``asrkit decode`` writes ``nbest.txt`` lines ``utt-N cost word ...`` where ``cost`` is the
path's total: acoustic cost plus graph cost, the graph cost being the decoding LM's
``-ln P(sentence)`` (TLG's G holds ``-ln(10) * log10 p``; with a lexicon without pronunciation
probabilities, as this recipe's, nothing else is on the path). This script subtracts the LM
cost, scored again with the same LM, and writes the ``utt-N ac_cost lm_cost word ...`` lines
that ``asrkit nnlm rescore`` reads (Kaldi's ``nbest-to-linear`` convention), so a bigger LM
(SLR11's 4-gram) can replace the decoding 3-gram.

The split is exact when the search's best path through G is the n-gram's own path; where G's
backoff arcs gave a cheaper path it is off by that difference, as for Kaldi's LM-rescoring with
``lmrescore.sh``. ``--graph-lm-scale`` is the LM scale the graph was built/decoded with.

Usage: nbest_costs.py LM NBEST_IN NBEST_OUT [--graph-lm-scale 1.0]
"""

from __future__ import annotations

import argparse
import math
import sys

LN10 = math.log(10.0)


def split_costs(lines, lm, lm_scale: float = 1.0, where: str = "<nbest>") -> list[str]:
    """``utt-N cost words`` lines -> ``utt-N ac_cost lm_cost words`` lines (with newlines).

    ``lm`` has ``score(sentence) -> log10 p`` (asrkit.lm.NgramLM); errors name ``where``:line."""
    out = []
    for lineno, line in enumerate(lines, 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) < 2:
            raise ValueError(f"{where}:{lineno}: expected 'utt-N cost word ...', got {line!r}")
        try:
            total = float(fields[1])
        except ValueError:
            raise ValueError(f"{where}:{lineno}: cost {fields[1]!r} is not a number") from None
        words = " ".join(fields[2:])
        lm_cost = -LN10 * lm.score(words)
        ac_cost = total - lm_scale * lm_cost
        out.append(f"{fields[0]} {ac_cost:.4f} {lm_cost:.4f} {words}".rstrip() + "\n")
    return out


def main(argv=None) -> int:
    from asrkit.lm import NgramLM
    from asrkit.utils import atomic_write_text

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("lm", help="the LM the decoding graph was built from (ARPA or binary)")
    p.add_argument("nbest_in", help="asrkit decode's nbest.txt")
    p.add_argument("nbest_out")
    p.add_argument("--graph-lm-scale", type=float, default=1.0)
    args = p.parse_args(argv)
    try:
        lm = NgramLM.load(args.lm)
        with open(args.nbest_in, encoding="utf-8") as f:
            lines = split_costs(f, lm, args.graph_lm_scale, where=args.nbest_in)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    atomic_write_text(args.nbest_out, "".join(lines))
    print(f"{args.nbest_out}: {len(lines)} hypotheses")
    return 0


if __name__ == "__main__":
    sys.exit(main())
