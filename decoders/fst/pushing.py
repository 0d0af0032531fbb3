"""Weight pushing (OpenFst's Push with kPushWeights, i.e. Reweight by shortest distances).

Towards the initial state, with potentials V(s) = the shortest distance from s to the finals:
w'(e) = w(e) + V(dst) - V(src) and final'(s) = final(s) - V(s), so that the weights leaving each
state sum to one (stochastic in the log semiring; best continuation costs 0 in the tropical one).
Towards the final states the forward distances are used the other way round. The total weight
V(start) stays on the start state unless ``remove_total_weight``.
"""

from __future__ import annotations

import numpy as np

from asrkit.decoders.fst.fst import Fst
from asrkit.decoders.fst.shortest import SHORTEST_DELTA, shortest_distance


def apply_start_weight(fst: Fst, c: float) -> Fst:
    """The machine with every path weight increased by ``c`` (times on the left): added to the
    start state's arcs and final weight, or, when arcs enter the start state, on an epsilon arc
    from a new start state (as OpenFst's Reweight)."""
    if c == 0.0 or fst.start < 0:
        return fst
    s0 = fst.start
    if not np.any(fst.dst == s0):
        w = fst.weight.copy()
        a, b = fst.offsets[s0], fst.offsets[s0 + 1]
        w[a:b] += c
        final = fst.final.copy()
        final[s0] += c
        return fst.replace(weight=w, final=final)
    n = fst.num_states
    return fst.replace(num_states=n + 1, start=n,
                       final=np.append(fst.final, np.inf).astype(fst.dtype),
                       src=np.append(fst.src, n), dst=np.append(fst.dst, s0),
                       ilabel=np.append(fst.ilabel, 0), olabel=np.append(fst.olabel, 0),
                       weight=np.append(fst.weight, c).astype(fst.dtype))


def reweight(fst: Fst, potentials: np.ndarray, to_initial: bool = True) -> Fst:
    """Reweight by ``potentials`` (float64 [S]) without touching the start weight:
    to_initial: w' = w + V(dst) - V(src), final' = final - V(s);
    to_final:   w' = w + V(src) - V(dst), final' = final + V(s).
    Arcs or finals touching a state with infinite potential are left as they are."""
    v = np.asarray(potentials, dtype=np.float64)
    vs, vd = v[fst.src], v[fst.dst]
    ok = np.isfinite(vs) & np.isfinite(vd)
    w = fst.weight.astype(np.float64)
    delta = (vd - vs) if to_initial else (vs - vd)
    w = np.where(ok, w + np.where(ok, delta, 0.0), w)
    fin = fst.final.astype(np.float64)
    okf = np.isfinite(v) & np.isfinite(fin)
    fin = np.where(okf, fin + np.where(okf, -v if to_initial else v, 0.0), fin)
    return fst.replace(weight=w.astype(fst.dtype), final=fin.astype(fst.dtype))


def push(fst: Fst, reweight_type: str = "to_initial", remove_total_weight: bool = False,
         delta: float = SHORTEST_DELTA, semiring: str | None = None) -> Fst:
    """Push weights towards the initial state ("to_initial") or the final states ("to_final") in
    the machine's semiring (or ``semiring``). Returns a new Fst with the same paths and, unless
    ``remove_total_weight``, the same path weights."""
    if fst.start < 0 or fst.num_states == 0:
        return fst
    if reweight_type == "to_initial":
        v = shortest_distance(fst, reverse=True, delta=delta, semiring=semiring)
        out = reweight(fst, v, to_initial=True)
        c = 0.0 if remove_total_weight or not np.isfinite(v[fst.start]) else float(v[fst.start])
    elif reweight_type == "to_final":
        v = shortest_distance(fst, reverse=False, delta=delta, semiring=semiring)
        out = reweight(fst, v, to_initial=False)
        c = -float(v[fst.start])
        if remove_total_weight:
            out = apply_start_weight(out, c)
            beta = shortest_distance(out, reverse=True, delta=delta, semiring=semiring)
            c = -float(beta[out.start]) if np.isfinite(beta[out.start]) else 0.0
    else:
        raise ValueError(f"reweight_type must be 'to_initial' or 'to_final', not {reweight_type!r}")
    return apply_start_weight(out, c)
