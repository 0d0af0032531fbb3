"""Conversion to and from pynini (OpenFst's Python wrapper), used by the tests to compare
against OpenFst and by users who mix the two. pynini is imported only inside these functions."""

from __future__ import annotations

import numpy as np

from asrkit.decoders.fst.fst import Fst
from asrkit.decoders.fst.semiring import PYNINI_ARC_TYPE, TROPICAL


def to_pynini(fst: Fst):
    """Return a ``pynini.Fst`` (arc type "standard" or "log") with the same states and arcs."""
    import pynini

    arc_type = PYNINI_ARC_TYPE[fst.semiring]
    weight_type = "tropical" if fst.semiring == TROPICAL else "log"
    out = pynini.Fst(arc_type=arc_type)
    out.add_states(fst.num_states)
    if fst.start >= 0:
        out.set_start(fst.start)
    one = pynini.Weight.one(weight_type)
    cache: dict[float, object] = {0.0: one}

    def weight(w: float):
        pw = cache.get(w)
        if pw is None:
            pw = cache[w] = pynini.Weight(weight_type, w)
        return pw

    for s, d, i, o, w in zip(fst.src.tolist(), fst.dst.tolist(), fst.ilabel.tolist(),
                             fst.olabel.tolist(), fst.weight.tolist(), strict=True):
        out.add_arc(s, pynini.Arc(i, o, weight(w), d))
    for s in np.flatnonzero(np.isfinite(fst.final)).tolist():
        out.set_final(s, weight(float(fst.final[s])))
    return out


def _weight_value(w) -> float:
    try:
        return float(w)
    except ValueError:
        return np.inf if str(w) in ("Infinity", "inf") else float(str(w))


def from_pynini(pfst, dtype=np.float64) -> Fst:
    """Convert a ``pynini.Fst`` with tropical ("standard") or log arcs to an Fst."""
    arc_type = pfst.arc_type()
    semiring = {"standard": "tropical", "log": "log"}.get(arc_type)
    if semiring is None:
        raise ValueError(f"arc type {arc_type!r} is not supported (standard or log)")
    n = pfst.num_states()
    final = np.full(n, np.inf)
    src, dst, il, ol, wt = [], [], [], [], []
    for s in range(n):
        final[s] = _weight_value(pfst.final(s))
        for arc in pfst.arcs(s):
            src.append(s)
            dst.append(arc.nextstate)
            il.append(arc.ilabel)
            ol.append(arc.olabel)
            wt.append(_weight_value(arc.weight))
    start = pfst.start()
    return Fst(n, start if start >= 0 else -1, final, src, dst, il, ol,
               np.array(wt, np.float64), semiring, dtype=dtype)
