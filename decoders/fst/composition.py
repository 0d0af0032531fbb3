"""Composition of two transducers with OpenFst's default epsilon-sequencing filter.

``compose(a, b)`` pairs a path of ``a`` with a path of ``b`` whenever a's output string equals
b's input string. Epsilons are handled as in OpenFst's SequenceComposeFilter: every state has an
implicit epsilon self-loop, and a move on an output epsilon of ``a`` (b staying put) may not
follow a move on an input epsilon of ``b`` (a staying put); this keeps exactly one path per pair
of epsilon orders, so the result has no redundant epsilon paths (and is correct in the log
semiring). The filter state is 0 ("either may move") or 1 ("a may no longer move alone").

The search runs in one njit kernel: a hash map from (s1, s2, filter) to result states, and for
each pair the non-epsilon arcs are matched by iterating the side with fewer arcs and binary
searching the other (so a lexicon's loop state against a trigram state costs what the trigram
state has, not the vocabulary).
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.typed import Dict

from asrkit.decoders.fst.fst import Fst
from asrkit.decoders.fst.structure import arcsort, connect, is_arcsorted


@njit(cache=True)
def _grow_i(a, n):
    if n < a.size:
        return a
    b = np.empty(a.size * 2, dtype=a.dtype)
    b[: a.size] = a
    return b


@njit(cache=True)
def _grow_f(a, n):
    if n < a.size:
        return a
    b = np.empty(a.size * 2, dtype=a.dtype)
    b[: a.size] = a
    return b


@njit(cache=True)
def _lower_bound(labels, lo, hi, x):
    while lo < hi:
        mid = (lo + hi) >> 1
        if labels[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def _compose_kernel(a_off, a_dst, a_il, a_ol, a_w, a_fin, a_start,
                    b_off, b_dst, b_il, b_ol, b_w, b_fin, b_start, max_states):
    n2 = b_fin.size
    index = Dict.empty(key_type=types.int64, value_type=types.int64)
    cap = 1024
    q1 = np.empty(cap, np.int64)
    q2 = np.empty(cap, np.int64)
    qf = np.empty(cap, np.int64)
    fin = np.empty(cap, np.float64)
    acap = 4096
    o_src = np.empty(acap, np.int64)
    o_dst = np.empty(acap, np.int64)
    o_il = np.empty(acap, np.int64)
    o_ol = np.empty(acap, np.int64)
    o_w = np.empty(acap, np.float64)
    ns = 0
    na = 0

    # start state
    index[(a_start * n2 + b_start) * 2] = 0
    q1[0] = a_start
    q2[0] = b_start
    qf[0] = 0
    ns = 1
    head = 0
    while head < ns:
        if ns > max_states:
            return ns, -1, q1, fin, o_src, o_dst, o_il, o_ol, o_w
        s1 = q1[head]
        s2 = q2[head]
        fs = qf[head]
        me = head
        head += 1
        fin1 = a_fin[s1]
        fin2 = b_fin[s2]
        fin[me] = fin1 + fin2 if (fin1 != np.inf and fin2 != np.inf) else np.inf
        a0 = a_off[s1]
        a1 = a_off[s1 + 1]
        b0 = b_off[s2]
        b1 = b_off[s2 + 1]
        ne1 = _lower_bound(a_ol, a0, a1, 1) - a0  # arcs of a with output epsilon
        ne2 = _lower_bound(b_il, b0, b1, 1) - b0  # arcs of b with input epsilon
        alleps1 = ne1 == a1 - a0 and fin1 == np.inf
        noeps1 = ne1 == 0
        # Epsilon moves (phase 0: a moves on an output epsilon while b stays, allowed only in
        # filter state 0; phase 1: b moves on an input epsilon while a stays, refused when every
        # way out of s1 is an epsilon move, and leading to filter state 1 when s1 has one), then
        # both move on the same non-epsilon label (filter state 0).
        for phase in range(2):
            if phase == 0:
                if fs != 0:
                    continue
                lo, hi = a0, a0 + ne1
            else:
                if alleps1:
                    continue
                lo, hi = b0, b0 + ne2
            for k in range(lo, hi):
                if phase == 0:
                    d1 = a_dst[k]
                    d2 = s2
                    nf = 0
                    il = a_il[k]
                    ol = 0
                    w = a_w[k]
                else:
                    d1 = s1
                    d2 = b_dst[k]
                    nf = 0 if noeps1 else 1
                    il = 0
                    ol = b_ol[k]
                    w = b_w[k]
                key = (d1 * n2 + d2) * 2 + nf
                t = index.get(key, -1)
                if t < 0:
                    t = ns
                    index[key] = t
                    q1 = _grow_i(q1, ns)
                    q2 = _grow_i(q2, ns)
                    qf = _grow_i(qf, ns)
                    fin = _grow_f(fin, ns)
                    q1[ns] = d1
                    q2[ns] = d2
                    qf[ns] = nf
                    ns += 1
                o_src = _grow_i(o_src, na)
                o_dst = _grow_i(o_dst, na)
                o_il = _grow_i(o_il, na)
                o_ol = _grow_i(o_ol, na)
                o_w = _grow_f(o_w, na)
                o_src[na] = me
                o_dst[na] = t
                o_il[na] = il
                o_ol[na] = ol
                o_w[na] = w
                na += 1
        # label matching, iterating the side with fewer arcs
        ia0 = a0 + ne1
        ib0 = b0 + ne2
        if ia0 >= a1 or ib0 >= b1:
            continue
        iter_a = (a1 - ia0) <= (b1 - ib0)
        if iter_a:
            lo, hi = ia0, a1
        else:
            lo, hi = ib0, b1
        for k in range(lo, hi):
            if iter_a:
                lab = a_ol[k]
                m = _lower_bound(b_il, ib0, b1, lab)
                m_end = b1
            else:
                lab = b_il[k]
                m = _lower_bound(a_ol, ia0, a1, lab)
                m_end = a1
            while m < m_end:
                if iter_a:
                    if b_il[m] != lab:
                        break
                    ka = k
                    kb = m
                else:
                    if a_ol[m] != lab:
                        break
                    ka = m
                    kb = k
                m += 1
                d1 = a_dst[ka]
                d2 = b_dst[kb]
                key = (d1 * n2 + d2) * 2
                t = index.get(key, -1)
                if t < 0:
                    t = ns
                    index[key] = t
                    q1 = _grow_i(q1, ns)
                    q2 = _grow_i(q2, ns)
                    qf = _grow_i(qf, ns)
                    fin = _grow_f(fin, ns)
                    q1[ns] = d1
                    q2[ns] = d2
                    qf[ns] = 0
                    ns += 1
                o_src = _grow_i(o_src, na)
                o_dst = _grow_i(o_dst, na)
                o_il = _grow_i(o_il, na)
                o_ol = _grow_i(o_ol, na)
                o_w = _grow_f(o_w, na)
                o_src[na] = me
                o_dst[na] = t
                o_il[na] = a_il[ka]
                o_ol[na] = b_ol[kb]
                o_w[na] = a_w[ka] + b_w[kb]
                na += 1
    return ns, na, q1, fin, o_src, o_dst, o_il, o_ol, o_w


def compose(a: Fst, b: Fst, connect_result: bool = True, max_states: int = 2**40) -> Fst:
    """The composition ``a o b``: input labels from ``a``, output labels from ``b``, weights
    added (times), epsilon-sequencing filter as OpenFst's default. ``a`` is arc-sorted by output
    label and ``b`` by input label internally. Trimmed (``connect``) unless
    ``connect_result=False``. Symbol tables: a's input table, b's output table."""
    if a.semiring != b.semiring:
        raise ValueError(f"compose: semirings differ ({a.semiring} vs {b.semiring})")
    dtype = np.result_type(a.dtype, b.dtype)
    if a.start < 0 or b.start < 0:
        return Fst.empty(a.semiring, dtype).replace(isymbols=a.isymbols, osymbols=b.osymbols)
    a_s = a if is_arcsorted(a, "olabel") else arcsort(a, "olabel")
    b_s = b if is_arcsorted(b, "ilabel") else arcsort(b, "ilabel")
    ns, na, _, fin, src, dst, il, ol, w = _compose_kernel(
        a_s.offsets, a_s.dst.astype(np.int64), a_s.ilabel.astype(np.int64),
        a_s.olabel.astype(np.int64), a_s.weight.astype(np.float64),
        a_s.final.astype(np.float64), a_s.start,
        b_s.offsets, b_s.dst.astype(np.int64), b_s.ilabel.astype(np.int64),
        b_s.olabel.astype(np.int64), b_s.weight.astype(np.float64),
        b_s.final.astype(np.float64), b_s.start, max_states)
    if na < 0:
        raise ValueError(f"compose: more than {max_states} states")
    out = Fst(ns, 0, fin[:ns], src[:na], dst[:na], il[:na], ol[:na], w[:na], a.semiring,
              a.isymbols, b.osymbols, dtype=dtype)
    return connect(out) if connect_result else out
