"""Machines for single strings, and scoring a string against a machine."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from asrkit.decoders.fst.fst import Fst
from asrkit.decoders.fst.semiring import TROPICAL


def linear_fst(ilabels: Sequence[int], olabels: Sequence[int] | None = None,
               weight: float = 0.0, semiring: str = TROPICAL, dtype=np.float32) -> Fst:
    """A chain machine for one string pair: ``len(ilabels)`` arcs (olabels default to ilabels,
    and must have the same length; pad with 0 for epsilon), final weight ``weight``."""
    ilabels = list(ilabels)
    olabels = ilabels if olabels is None else list(olabels)
    if len(olabels) != len(ilabels):
        raise ValueError(f"linear_fst: {len(ilabels)} input labels but {len(olabels)} output")
    n = len(ilabels)
    final = np.full(n + 1, np.inf)
    final[n] = weight
    return Fst(n + 1, 0, final, np.arange(n), np.arange(1, n + 1), ilabels, olabels,
               np.zeros(n), semiring, dtype=dtype)


def accept(fst: Fst, ilabels: Sequence[int], semiring: str | None = None) -> float:
    """The total weight with which ``fst`` accepts the input string ``ilabels`` (semiring sum over
    all its paths and outputs; tropical: the best path). +inf when the string is rejected."""
    from asrkit.decoders.fst.composition import compose
    from asrkit.decoders.fst.shortest import total_weight

    lin = linear_fst(ilabels, semiring=fst.semiring, dtype=fst.dtype)
    return total_weight(compose(lin, fst), semiring=semiring)
