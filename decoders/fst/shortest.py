"""Shortest distances, n-best paths and path enumeration.

``shortest_distance`` is Mohri's generic single-source algorithm (as OpenFst's ShortestDistance)
in the machine's semiring: exact in one pass over a topological order for acyclic machines, and
iterated with a FIFO queue until changes fall below ``delta`` otherwise. ``shortest_path`` finds
the n best paths (tropical, i.e. Viterbi, whatever the semiring) by A* over the exact
reverse distances, the algorithm of OpenFst's NShortestPath.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

import numpy as np
from numba import njit

from asrkit.decoders.fst.fst import Fst
from asrkit.decoders.fst.semiring import TROPICAL, plus, semiring_code
from asrkit.decoders.fst.structure import reverse_csr, topological_order

SHORTEST_DELTA = 1e-6  # OpenFst's kShortestDelta


@njit(cache=True)
def _sd_acyclic(offsets, nxt, w, init, order, code):
    d = init.copy()
    for k in range(order.size):
        s = order[k]
        ds = d[s]
        if ds == np.inf:
            continue
        for a in range(offsets[s], offsets[s + 1]):
            t = nxt[a]
            d[t] = plus(d[t], ds + w[a], code)
    return d


@njit(cache=True)
def _sd_generic(offsets, nxt, w, init, code, delta, max_pops):
    n = init.size
    d = init.copy()
    r = init.copy()
    inq = np.zeros(n, dtype=np.bool_)
    cap = n + 1
    queue = np.empty(cap, dtype=np.int64)
    head = 0
    size = 0
    for s in range(n):
        if init[s] != np.inf:
            queue[(head + size) % cap] = s
            size += 1
            inq[s] = True
    pops = 0
    while size > 0:
        s = queue[head]
        head = (head + 1) % cap
        size -= 1
        inq[s] = False
        pops += 1
        if pops > max_pops:
            return d, False
        rs = r[s]
        r[s] = np.inf
        if rs == np.inf:
            continue
        for a in range(offsets[s], offsets[s + 1]):
            t = nxt[a]
            x = rs + w[a]
            nd = plus(d[t], x, code)
            old = d[t]
            if old == np.inf or abs(nd - old) > delta:
                d[t] = nd
                r[t] = plus(r[t], x, code)
                if not inq[t]:
                    queue[(head + size) % cap] = t
                    size += 1
                    inq[t] = True
    return d, True


def _distances(offsets, nxt, w, init, code, order, delta, what):
    if order is not None:
        return _sd_acyclic(offsets, nxt, w, init, order, code)
    d, ok = _sd_generic(offsets, nxt, w, init, code, delta, 1000 * (init.size + 1) + 10**7)
    if not ok:
        raise ValueError(f"{what}: no convergence (a negative-weight cycle, or a log-semiring "
                         "cycle whose weights sum to infinity)")
    return d


def shortest_distance(fst: Fst, reverse: bool = False, delta: float = SHORTEST_DELTA,
                      semiring: str | None = None) -> np.ndarray:
    """float64 [S]: the semiring sum of path weights from the start state to each state
    (``reverse=False``), or from each state to the final states, final weights included
    (``reverse=True``), as OpenFst's ShortestDistance. ``semiring`` overrides the machine's."""
    code = semiring_code(semiring or fst.semiring)
    n = fst.num_states
    w = fst.weight.astype(np.float64)
    order = topological_order(fst)
    if not reverse:
        init = np.full(n, np.inf)
        if fst.start >= 0:
            init[fst.start] = 0.0
        return _distances(fst.offsets, fst.dst.astype(np.int64), w, init, code, order, delta,
                          "shortest_distance")
    offsets, arc_ids = reverse_csr(fst)
    init = fst.final.astype(np.float64)
    rorder = None if order is None else order[::-1].copy()
    return _distances(offsets, fst.src[arc_ids].astype(np.int64), w[arc_ids], init, code, rorder,
                      delta, "shortest_distance(reverse=True)")


def total_weight(fst: Fst, semiring: str | None = None) -> float:
    """The semiring sum of the weights of all successful paths (+inf when there are none)."""
    if fst.start < 0:
        return np.inf
    return float(shortest_distance(fst, reverse=True, semiring=semiring)[fst.start])


def shortest_path(fst: Fst, nshortest: int = 1) -> Fst:
    """The ``nshortest`` best paths (lowest total weight, tropical) as a machine: one chain of
    arcs per path from a common start state, in order of increasing weight. Paths, not strings,
    are counted (OpenFst's ShortestPath with unique=False). An empty machine when nothing is
    accepted."""
    if nshortest < 1:
        raise ValueError(f"nshortest must be >= 1, got {nshortest}")
    found = nbest_paths(fst, nshortest)
    src, dst, il, ol, wt = [], [], [], [], []
    final = [np.inf]
    for arcs, final_w in found:
        prev = 0
        for a in arcs:
            final.append(np.inf)
            s = len(final) - 1
            src.append(prev)
            dst.append(s)
            il.append(int(fst.ilabel[a]))
            ol.append(int(fst.olabel[a]))
            wt.append(float(fst.weight[a]))
            prev = s
        final[prev] = final_w if final[prev] == np.inf else min(final[prev], final_w)
    if not found:
        return Fst.empty(fst.semiring, fst.dtype).replace(isymbols=fst.isymbols,
                                                          osymbols=fst.osymbols)
    return Fst(len(final), 0, np.array(final), src, dst, il, ol, np.array(wt, np.float64),
               fst.semiring, fst.isymbols, fst.osymbols, dtype=fst.dtype)


def nbest_paths(fst: Fst, n: int = 1) -> list[tuple[list[int], float]]:
    """The ``n`` best successful paths as ``(arc ids, final weight)`` pairs, best first
    (tropical weights; A* search with the exact reverse distances as heuristic)."""
    if fst.start < 0:
        return []
    beta = shortest_distance(fst, reverse=True, semiring=TROPICAL)
    if beta[fst.start] == np.inf:
        return []
    offs = fst.offsets
    dst = fst.dst
    wts = fst.weight.astype(np.float64)
    final = fst.final.astype(np.float64)
    count = np.zeros(fst.num_states, dtype=np.int64)
    # node: (state, parent node, arc id, g); state -1 marks a completed path
    nodes: list[tuple[int, int, int, float]] = [(fst.start, -1, -1, 0.0)]
    heap = [(float(beta[fst.start]), 0, 0)]
    tick = 1
    out = []
    while heap and len(out) < n:
        _, _, k = heapq.heappop(heap)
        state, _, _, g = nodes[k]
        if state == -1:
            last = nodes[k][1]
            arcs = []
            p = last
            while nodes[p][2] >= 0:
                arcs.append(nodes[p][2])
                p = nodes[p][1]
            arcs.reverse()
            out.append((arcs, float(final[nodes[last][0]])))
            continue
        count[state] += 1
        if count[state] > n:
            continue
        if final[state] != np.inf:
            nodes.append((-1, k, -1, g + final[state]))
            heapq.heappush(heap, (g + final[state], tick, len(nodes) - 1))
            tick += 1
        for a in range(offs[state], offs[state + 1]):
            t = int(dst[a])
            if beta[t] == np.inf:
                continue
            g2 = g + wts[a]
            nodes.append((t, k, a, g2))
            heapq.heappush(heap, (g2 + beta[t], tick, len(nodes) - 1))
            tick += 1
    return out


def paths(fst: Fst, max_paths: int = 100000) -> Iterator[tuple[tuple[int, ...], tuple[int, ...],
                                                             float]]:
    """Yield every successful path of an acyclic machine as ``(ilabels, olabels, weight)`` with
    epsilons (0) dropped and weight = sum of arc weights and final weight. Raises ValueError on a
    cyclic machine or after ``max_paths`` paths."""
    if fst.start < 0:
        return
    if topological_order(fst) is None:
        raise ValueError("paths: the machine is cyclic (infinitely many paths)")
    offs, dst, il, ol = fst.offsets, fst.dst.tolist(), fst.ilabel.tolist(), fst.olabel.tolist()
    wts, final = fst.weight.astype(np.float64).tolist(), fst.final.astype(np.float64).tolist()
    count = 0
    stack = [(fst.start, (), (), 0.0)]
    while stack:
        s, ins, outs, w = stack.pop()
        if final[s] != np.inf:
            count += 1
            if count > max_paths:
                raise ValueError(f"paths: more than {max_paths} paths")
            yield ins, outs, w + final[s]
        for a in range(int(offs[s]), int(offs[s + 1])):
            stack.append((dst[a], ins + (il[a],) if il[a] else ins,
                          outs + (ol[a],) if ol[a] else outs, w + wts[a]))


def string_weights(fst: Fst, max_paths: int = 100000) -> dict[tuple, float]:
    """For an acyclic machine: ``{(ilabels, olabels): weight}`` with the weights of all paths
    carrying the same label pair summed in the machine's semiring (its weighted relation)."""
    from asrkit.decoders.fst.semiring import sum_np

    groups: dict[tuple, list[float]] = {}
    for ins, outs, w in paths(fst, max_paths):
        groups.setdefault((ins, outs), []).append(w)
    return {k: sum_np(v, fst.semiring) for k, v in groups.items()}
