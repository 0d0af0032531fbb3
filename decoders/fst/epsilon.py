"""Epsilon removal (OpenFst's RmEpsilon): drops every arc with both labels epsilon.

For each state q the epsilon closure is computed with the generic shortest-distance algorithm
restricted to epsilon arcs, d(q, p) = semiring sum over epsilon paths q ~> p; then q gets every
non-epsilon arc of every p in the closure with weight d(q, p) + w, and the final weight
sum_p d(q, p) + final(p). The result is trimmed. Epsilon cycles are fine (their weights are
summed to convergence within ``delta``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from asrkit.decoders.fst.composition import _grow_f, _grow_i
from asrkit.decoders.fst.fst import Fst
from asrkit.decoders.fst.semiring import plus, semiring_code
from asrkit.decoders.fst.shortest import SHORTEST_DELTA
from asrkit.decoders.fst.structure import connect


@njit(cache=True)
def _rmeps_kernel(offsets, dst, il, ol, w, fin, code, delta):
    n = fin.size
    d = np.full(n, np.inf)
    r = np.full(n, np.inf)
    inq = np.zeros(n, dtype=np.bool_)
    touched = np.empty(n, dtype=np.int64)
    queue = np.empty(n + 1, dtype=np.int64)
    new_fin = np.full(n, np.inf)
    cap = max(16, dst.size)
    o_src = np.empty(cap, np.int64)
    o_dst = np.empty(cap, np.int64)
    o_il = np.empty(cap, np.int64)
    o_ol = np.empty(cap, np.int64)
    o_w = np.empty(cap, np.float64)
    na = 0
    qcap = n + 1
    for q in range(n):
        nt = 1
        touched[0] = q
        d[q] = 0.0
        r[q] = 0.0
        head = 0
        size = 1
        queue[0] = q
        inq[q] = True
        while size > 0:
            s = queue[head]
            head = (head + 1) % qcap
            size -= 1
            inq[s] = False
            rs = r[s]
            r[s] = np.inf
            if rs == np.inf:
                continue
            for a in range(offsets[s], offsets[s + 1]):
                if il[a] != 0 or ol[a] != 0:
                    continue
                t = dst[a]
                x = rs + w[a]
                old = d[t]
                if old == np.inf:
                    touched[nt] = t
                    nt += 1
                nd = plus(old, x, code)
                if old == np.inf or abs(nd - old) > delta:
                    d[t] = nd
                    r[t] = plus(r[t], x, code)
                    if not inq[t]:
                        queue[(head + size) % qcap] = t
                        size += 1
                        inq[t] = True
        f = np.inf
        for k in range(nt):
            p = touched[k]
            dp = d[p]
            if fin[p] != np.inf:
                f = plus(f, dp + fin[p], code)
            for a in range(offsets[p], offsets[p + 1]):
                if il[a] == 0 and ol[a] == 0:
                    continue
                o_src = _grow_i(o_src, na)
                o_dst = _grow_i(o_dst, na)
                o_il = _grow_i(o_il, na)
                o_ol = _grow_i(o_ol, na)
                o_w = _grow_f(o_w, na)
                o_src[na] = q
                o_dst[na] = dst[a]
                o_il[na] = il[a]
                o_ol[na] = ol[a]
                o_w[na] = dp + w[a]
                na += 1
        new_fin[q] = f
        for k in range(nt):
            p = touched[k]
            d[p] = np.inf
            r[p] = np.inf
    return new_fin, o_src[:na], o_dst[:na], o_il[:na], o_ol[:na], o_w[:na]


def rmepsilon(fst: Fst, delta: float = SHORTEST_DELTA, semiring: str | None = None) -> Fst:
    """Equivalent machine without epsilon:epsilon arcs (weights summed in ``semiring``, default
    the machine's), trimmed."""
    is_eps = (fst.ilabel == 0) & (fst.olabel == 0)
    if not is_eps.any():
        return connect(fst)
    fin, src, dst, il, ol, w = _rmeps_kernel(
        fst.offsets, fst.dst.astype(np.int64), fst.ilabel.astype(np.int64),
        fst.olabel.astype(np.int64), fst.weight.astype(np.float64),
        fst.final.astype(np.float64), semiring_code(semiring or fst.semiring), delta)
    return connect(fst.replace(final=fin, src=src, dst=dst, ilabel=il, olabel=ol, weight=w))
