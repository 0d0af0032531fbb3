"""Weighted determinisation of acceptors and functional transducers (Mohri's algorithm, as
OpenFst's Determinize with DETERMINIZE_FUNCTIONAL, tropical or log semiring).

A result state is a weighted subset ``{(state, residual weight, residual output string)}``.
For each input label the candidate successors are gathered; the arc carries the semiring sum of
their weights and the longest common prefix of their output strings, and the remainders stay in
the new subset. Weights are compared after quantisation by ``delta`` (OpenFst's kDelta = 1/1024).
Output prefixes longer than one label become a chain of epsilon-input arcs, and residual strings
at final states a chain to a new final state (as OpenFst's FactorWeight does after Gallic
determinisation). Input epsilons are treated as an ordinary label, as in OpenFst.

The input must be determinisable (twins property) and functional: for transducers, make it so
with disambiguation symbols (Kaldi's #0, #1, ...) and remove them afterwards.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from asrkit.decoders.fst.fst import Fst
from asrkit.decoders.fst.minimization import _mix
from asrkit.decoders.fst.semiring import DELTA, TROPICAL, check_semiring, plus, semiring_code
from asrkit.decoders.fst.structure import arcsort, connect


class NonFunctionalError(ValueError):
    """Two paths with the same input have different outputs: the transducer is not functional."""


def _log_sum(values: list[float]) -> float:
    m = min(values)
    if m == math.inf or len(values) == 1:
        return m
    return m - math.log(sum(math.exp(m - v) for v in values))


def _common_prefix(strings) -> tuple[int, ...]:
    it = iter(strings)
    prefix = next(it)
    for s in it:
        if not prefix:
            break
        k = 0
        lim = min(len(prefix), len(s))
        while k < lim and prefix[k] == s[k]:
            k += 1
        prefix = prefix[:k]
    return prefix


def determinize_reference(fst: Fst, delta: float = DELTA, semiring: str | None = None,
                          max_states: int | None = None) -> Fst:
    """Plain-Python twin of ``determinize`` (same result, state for state); the specification
    the njit kernel is tested against.

    ``semiring`` ("tropical"/"log") overrides the machine's for the weight sums (Kaldi
    determinises in the log semiring with ``--use-log``); the result keeps the machine's semiring
    tag. ``max_states`` bounds the result (ValueError beyond it), a guard for inputs without the
    twins property, on which determinisation does not terminate. Raises NonFunctionalError for a
    non-functional transducer. The input is trimmed first.
    """
    sr = check_semiring(semiring or fst.semiring)
    tropical = sr == TROPICAL
    fst = connect(fst)
    if fst.start < 0:
        return fst
    fst = arcsort(fst, "ilabel")
    offs = fst.offsets.tolist()
    il, ol, dst = fst.ilabel.tolist(), fst.olabel.tolist(), fst.dst.tolist()
    wt = fst.weight.astype(np.float64).tolist()
    final = fst.final.astype(np.float64).tolist()
    inv_delta = 1.0 / delta
    inf = math.inf

    def key_of(elems):
        return tuple((q, math.floor(w * inv_delta + 0.5), s) for q, w, s in elems)

    start = ((fst.start, 0.0, ()),)
    index = {key_of(start): 0}
    subsets = [start]
    state_of = [0]  # subset id -> result state id (chains also add states)
    out_src, out_dst, out_il, out_ol, out_w = [], [], [], [], []
    out_final = [inf]

    def new_state() -> int:
        out_final.append(inf)
        return len(out_final) - 1

    def chain(frm: int, to: int, ilabel: int, labels, weight: float) -> None:
        """Arcs frm -> to with input ilabel and output labels (eps-input arcs after the first)."""
        cur = frm
        n = max(1, len(labels))
        for k in range(n):
            nxt = to if k == n - 1 else new_state()
            out_src.append(cur)
            out_dst.append(nxt)
            out_il.append(ilabel if k == 0 else 0)
            out_ol.append(labels[k] if labels else 0)
            out_w.append(weight if k == 0 else 0.0)
            cur = nxt

    head = 0
    while head < len(subsets):
        sid_elems = subsets[head]
        sid = state_of[head]
        head += 1
        # final weight (the residual string must be the same on every final element)
        fws, fstr = [], None
        for q, w, s in sid_elems:
            if final[q] != inf:
                if fstr is None:
                    fstr = s
                elif fstr != s:
                    raise NonFunctionalError(
                        f"determinize: input state {q} ends paths with different output strings")
                fws.append(w + final[q])
        if fws:
            fw = min(fws) if tropical else _log_sum(fws)
            if fstr:
                cur = sid
                for j, lab in enumerate(fstr):
                    nxt = new_state()
                    chain(cur, nxt, 0, [lab], fw if j == 0 else 0.0)
                    cur = nxt
                out_final[cur] = 0.0
            else:
                out_final[sid] = fw
        # successors grouped by input label
        groups: dict[int, dict[int, list]] = {}
        for q, w, s in sid_elems:
            for a in range(offs[q], offs[q + 1]):
                g = groups.get(il[a])
                if g is None:
                    g = groups[il[a]] = {}
                o = ol[a]
                cs = s + (o,) if o else s
                cw = w + wt[a]
                t = dst[a]
                e = g.get(t)
                if e is None:
                    g[t] = [cw, cs]
                else:
                    if e[1] != cs:
                        raise NonFunctionalError(
                            f"determinize: input label {il[a]} leads to state {t} with different "
                            "output strings; the transducer is not functional (add "
                            "disambiguation symbols)")
                    e[0] = min(e[0], cw) if tropical else _log_sum([e[0], cw])
        for label in sorted(groups):
            g = groups[label]
            ws = [e[0] for e in g.values()]
            wsum = min(ws) if tropical else _log_sum(ws)
            prefix = _common_prefix([e[1] for e in g.values()])
            k = len(prefix)
            elems = tuple(sorted((t, e[0] - wsum, e[1][k:]) for t, e in g.items()))
            key = key_of(elems)
            tid = index.get(key)
            if tid is None:
                tid = len(subsets)
                index[key] = tid
                subsets.append(elems)
                if max_states is not None and len(subsets) > max_states:
                    raise ValueError(f"determinize: more than {max_states} states (the input "
                                     "may lack the twins property)")
                state_of.append(new_state())
            chain(sid, state_of[tid], label, list(prefix), wsum)
    n = len(out_final)
    return Fst(n, 0, np.array(out_final), out_src, out_dst, out_il, out_ol,
               np.array(out_w, np.float64), fst.semiring, fst.isymbols, fst.osymbols,
               dtype=fst.dtype)


# -- the njit kernel ---------------------------------------------------------------------------
# Residual output strings are interned as nodes of a trie (node = the string spelled from the
# root): appending a label is a child lookup, the longest common prefix of several strings is
# their deepest common ancestor, and a residual is re-inserted from the root. Subsets live in
# flat arrays (offsets, state, weight and its quantisation, string node) and are found by a
# 64-bit hash of their elements, each candidate compared exactly.
# Both lookups (trie children, subsets) are open-addressing tables in plain arrays, probed
# linearly and doubled at half load: numba's typed Dict costs a call through the runtime per
# lookup, which was most of the kernel's time on L o G.

_OK, _NONFUNCTIONAL_FINAL, _NONFUNCTIONAL_ARC, _TOO_MANY = 0, 1, 2, 3


@njit(cache=True)
def _gi(a, n):
    """``a``, or a copy twice its size when index ``n`` is beyond it."""
    if n < a.size:
        return a
    b = np.empty(max(16, a.size * 2), dtype=a.dtype)
    b[: a.size] = a
    return b


@njit(cache=True)
def _grow_to(a, size):
    """A copy of ``a`` with ``size`` entries (the first ``a.size`` copied)."""
    b = np.empty(size, dtype=a.dtype)
    b[: a.size] = a
    return b


_FIB = np.uint64(0x9E3779B97F4A7C15)


@njit(cache=True, inline="always")
def _home(key, mask):
    """Home slot of a non-negative int64 ``key`` in a table of ``mask + 1`` slots (Fibonacci
    hashing: the product's high bits)."""
    return np.int64(((np.uint64(key) * _FIB) >> np.uint64(20)) & np.uint64(mask))


@njit(cache=True)
def _grow_keys(keys, vals):
    """The (key, value) table doubled and re-probed (keys -1 = empty)."""
    size = keys.size * 2
    mask = size - 1
    nk = np.full(size, -1, np.int64)
    nv = np.empty(size, np.int64)
    for i in range(keys.size):
        k = keys[i]
        if k >= 0:
            s = _home(k, mask)
            while nk[s] >= 0:
                s = (s + 1) & mask
            nk[s] = k
            nv[s] = vals[i]
    return nk, nv


@njit(cache=True, inline="always")
def _child(tk, tv, parent, depth, label, nnodes, node, x, lbase):
    """Node of string ``node`` + label ``x`` in the trie (``tk``/``tv``: child key
    ``node * lbase + x`` -> node; ``nnodes`` nodes so far). Returns the node and whether it is
    new; a new node is added to ``parent``/``depth``/``label``, which the caller has grown to
    hold ``nnodes + 1`` entries."""
    key = node * lbase + x
    mask = tk.size - 1
    s = _home(key, mask)
    while True:
        k = tk[s]
        if k == key:
            return tv[s], False
        if k < 0:
            break
        s = (s + 1) & mask
    tk[s] = key
    tv[s] = nnodes
    parent[nnodes] = node
    depth[nnodes] = depth[node] + 1
    label[nnodes] = x
    return nnodes, True


@njit(cache=True)
def _trie_room(tk, tv, parent, depth, label, nnodes):
    """The trie's arrays with room for one more node (tables kept at most half full)."""
    if 2 * (nnodes + 1) > tk.size:
        tk, tv = _grow_keys(tk, tv)
    if nnodes >= parent.size:
        parent = _gi(parent, nnodes)
        depth = _gi(depth, nnodes)
        label = _gi(label, nnodes)
    return tk, tv, parent, depth, label


@njit(cache=True)
def _grow_subsets(table, sub_h, nsub):
    """The subset table doubled, every subset re-probed from its hash."""
    size = table.size * 2
    mask = np.uint64(size - 1)
    out = np.full(size, -1, np.int64)
    for tid in range(nsub):
        s = np.int64(sub_h[tid] & mask)
        while out[s] >= 0:
            s = np.int64(np.uint64(s + 1) & mask)
        out[s] = tid
    return out


@njit(cache=True)
def _lca(parent, depth, a, b):
    while depth[a] > depth[b]:
        a = parent[a]
    while depth[b] > depth[a]:
        b = parent[b]
    while a != b:
        a = parent[a]
        b = parent[b]
    return a


@njit(cache=True)
def _labels_below(parent, depth, label, node, ancestor_depth, buf):
    """Labels of ``node``'s string after its first ``ancestor_depth`` labels, into buf."""
    n = depth[node] - ancestor_depth
    k = n - 1
    while k >= 0:
        buf[k] = label[node]
        node = parent[node]
        k -= 1
    return n


@njit(cache=True)
def _det_kernel(states, arcs, start, code, inv_delta, max_states):
    """``states`` int64 ``[S, 3]``: arc range and final weight (float64 bits) per state;
    ``arcs`` int64 ``[A, 4]``: ilabel, olabel, destination, weight (float64 bits). One record
    per state and per arc: the lookups of an element touch a cache line or two, not seven."""
    n_in = states.shape[0]
    sfin = states.view(np.float64)
    aw = arcs.view(np.float64)
    lbase = np.int64(1)
    for a in range(arcs.shape[0]):
        if arcs[a, 1] + 1 > lbase:
            lbase = np.int64(arcs[a, 1] + 1)
    # string trie; node 0 = empty string
    tk = np.full(1024, -1, np.int64)
    tv = np.empty(1024, np.int64)
    nnodes = 1
    t_parent = np.full(64, -1, np.int64)
    t_depth = np.zeros(64, np.int64)
    t_label = np.zeros(64, np.int64)
    # subsets: elements (state, weight, quantised weight, string node), hash, result state
    sub_off = np.zeros(64, np.int64)
    e_q = np.empty(64, np.int32)
    e_w = np.empty(64, np.float64)
    e_qw = np.empty(64, np.int64)
    e_s = np.empty(64, np.int32)
    sub_state = np.empty(64, np.int64)
    sub_h = np.empty(64, np.uint64)
    sub_table = np.full(1024, -1, np.int64)
    # result
    o_src = np.empty(1024, np.int32)
    o_dst = np.empty(1024, np.int32)
    o_il = np.empty(1024, np.int32)
    o_ol = np.empty(1024, np.int32)
    o_w = np.empty(1024, np.float64)
    o_fin = np.full(64, np.inf)
    na = 0
    nout = 1
    # candidate buffers
    c_lab = np.empty(64, np.int64)
    c_dst = np.empty(64, np.int64)
    c_w = np.empty(64, np.float64)
    c_s = np.empty(64, np.int64)
    u_dst = np.empty(64, np.int64)
    u_w = np.empty(64, np.float64)
    u_s = np.empty(64, np.int64)
    u_qw = np.empty(64, np.int64)
    buf = np.empty(64, np.int64)
    order_buf = np.empty(24, np.int64)

    # subset 0 = {(start, 0, empty)}
    e_q[0] = start
    e_w[0] = 0.0
    e_qw[0] = 0
    e_s[0] = 0
    sub_off[1] = 1
    sub_state[0] = 0
    h0 = _mix(_mix(np.uint64(0x51ED), np.uint64(start)), np.uint64(0))
    h0 = _mix(h0, np.uint64(0))
    sub_h[0] = h0
    sub_table[np.int64(h0 & np.uint64(sub_table.size - 1))] = 0
    nsub = 1
    head = 0
    while head < nsub:
        k = head
        head += 1
        me = sub_state[k]
        b0 = sub_off[k]
        b1 = sub_off[k + 1]
        # final weight
        fw = np.inf
        fstr = -1
        for e in range(b0, b1):
            q = e_q[e]
            fq = sfin[q, 2]
            if fq != np.inf:
                if fstr < 0:
                    fstr = e_s[e]
                elif fstr != e_s[e]:
                    return _NONFUNCTIONAL_FINAL, q, o_src, o_dst, o_il, o_ol, o_w, o_fin, na, nout
                fw = plus(fw, e_w[e] + fq, code)
        if fstr > 0:
            if buf.size < t_depth[fstr]:
                buf = np.empty(2 * t_depth[fstr], np.int64)
            nl = _labels_below(t_parent, t_depth, t_label, fstr, 0, buf)
            cur = me
            for j in range(nl):
                if nout >= o_fin.size:
                    o_fin = _gi(o_fin, nout)
                o_fin[nout] = np.inf
                nxt = nout
                nout += 1
                if na >= o_src.size:
                    o_src = _gi(o_src, na)
                    o_dst = _gi(o_dst, na)
                    o_il = _gi(o_il, na)
                    o_ol = _gi(o_ol, na)
                    o_w = _gi(o_w, na)
                o_src[na] = cur
                o_dst[na] = nxt
                o_il[na] = 0
                o_ol[na] = buf[j]
                o_w[na] = fw if j == 0 else 0.0
                na += 1
                cur = nxt
            o_fin[cur] = 0.0
        elif fstr == 0:
            o_fin[me] = fw
        # gather candidate successors
        nc = 0
        for e in range(b0, b1):
            q = e_q[e]
            for a in range(states[q, 0], states[q, 1]):
                if nc >= c_lab.size:
                    c_lab = _gi(c_lab, nc)
                    c_dst = _gi(c_dst, nc)
                    c_w = _gi(c_w, nc)
                    c_s = _gi(c_s, nc)
                c_lab[nc] = arcs[a, 0]
                c_dst[nc] = arcs[a, 2]
                c_w[nc] = e_w[e] + aw[a, 3]
                s = e_s[e]
                oa = arcs[a, 1]
                if oa != 0:
                    if 2 * (nnodes + 1) > tk.size or nnodes >= t_parent.size:
                        tk, tv, t_parent, t_depth, t_label = _trie_room(
                            tk, tv, t_parent, t_depth, t_label, nnodes)
                    s, new = _child(tk, tv, t_parent, t_depth, t_label, nnodes, s, oa, lbase)
                    nnodes += new
                c_s[nc] = s
                nc += 1
        if nc == 0:
            continue
        if nc <= 24:  # insertion sort by (label, destination): no allocation
            order = order_buf
            for j in range(nc):
                order[j] = j
            for j in range(1, nc):
                c = order[j]
                kc = c_lab[c] * n_in + c_dst[c]
                m = j - 1
                while m >= 0 and c_lab[order[m]] * n_in + c_dst[order[m]] > kc:
                    order[m + 1] = order[m]
                    m -= 1
                order[m + 1] = c
        else:
            order = np.argsort(c_lab[:nc] * n_in + c_dst[:nc], kind="mergesort")
        g0 = 0
        while g0 < nc:
            lab = c_lab[order[g0]]
            g1 = g0
            while g1 < nc and c_lab[order[g1]] == lab:
                g1 += 1
            # merge equal destinations
            nu = 0
            for j in range(g0, g1):
                c = order[j]
                if nu > 0 and u_dst[nu - 1] == c_dst[c]:
                    if u_s[nu - 1] != c_s[c]:
                        return (_NONFUNCTIONAL_ARC, c_dst[c], o_src, o_dst, o_il, o_ol, o_w,
                                o_fin, na, nout)
                    u_w[nu - 1] = plus(u_w[nu - 1], c_w[c], code)
                else:
                    if nu >= u_dst.size:
                        u_dst = _gi(u_dst, nu)
                        u_w = _gi(u_w, nu)
                        u_s = _gi(u_s, nu)
                        u_qw = _gi(u_qw, nu)
                    u_dst[nu] = c_dst[c]
                    u_w[nu] = c_w[c]
                    u_s[nu] = c_s[c]
                    nu += 1
            wsum = np.inf
            pre = u_s[0]
            for j in range(nu):
                wsum = plus(wsum, u_w[j], code)
                pre = _lca(t_parent, t_depth, pre, u_s[j])
            plen = t_depth[pre]
            for j in range(nu):
                if buf.size < t_depth[u_s[j]]:
                    buf = np.empty(2 * t_depth[u_s[j]], np.int64)
            # residual strings and the subset's hash
            h = np.uint64(0x51ED)
            for j in range(nu):
                u_w[j] = u_w[j] - wsum
                if plen > 0:
                    nl = _labels_below(t_parent, t_depth, t_label, u_s[j], plen, buf)
                    r = 0
                    for m in range(nl):
                        if 2 * (nnodes + 1) > tk.size or nnodes >= t_parent.size:
                            tk, tv, t_parent, t_depth, t_label = _trie_room(
                                tk, tv, t_parent, t_depth, t_label, nnodes)
                        r, new = _child(tk, tv, t_parent, t_depth, t_label, nnodes, r, buf[m],
                                        lbase)
                        nnodes += new
                    u_s[j] = r
                qw = np.int64(np.floor(u_w[j] * inv_delta + 0.5))
                u_qw[j] = qw
                h = _mix(_mix(_mix(h, np.uint64(u_dst[j])), np.uint64(qw)), np.uint64(u_s[j]))
            # find or add the subset
            smask = np.uint64(sub_table.size - 1)
            slot = np.int64(h & smask)
            while True:
                tid = sub_table[slot]
                if tid < 0:
                    break
                t0 = sub_off[tid]
                if sub_h[tid] == h and sub_off[tid + 1] - t0 == nu:
                    same = True
                    for j in range(nu):
                        if (e_q[t0 + j] != u_dst[j] or e_s[t0 + j] != u_s[j]
                                or e_qw[t0 + j] != u_qw[j]):
                            same = False
                            break
                    if same:
                        break
                slot = np.int64(np.uint64(slot + 1) & smask)
            if tid < 0:
                tid = nsub
                if max_states > 0 and nsub + 1 > max_states:
                    return _TOO_MANY, nsub, o_src, o_dst, o_il, o_ol, o_w, o_fin, na, nout
                base = sub_off[nsub]
                if nsub + 1 >= sub_off.size:
                    sub_off = _gi(sub_off, nsub + 1)
                if nsub >= sub_state.size:
                    sub_state = _gi(sub_state, nsub)
                    sub_h = _gi(sub_h, nsub)
                if e_q.size < base + nu:
                    grow = max(2 * e_q.size, base + nu)
                    e_q = _grow_to(e_q, grow)
                    e_w = _grow_to(e_w, grow)
                    e_qw = _grow_to(e_qw, grow)
                    e_s = _grow_to(e_s, grow)
                for j in range(nu):
                    e_q[base + j] = u_dst[j]
                    e_w[base + j] = u_w[j]
                    e_qw[base + j] = u_qw[j]
                    e_s[base + j] = u_s[j]
                sub_off[nsub + 1] = base + nu
                sub_h[nsub] = h
                sub_table[slot] = nsub
                if 2 * (nsub + 1) > sub_table.size:
                    sub_table = _grow_subsets(sub_table, sub_h, nsub + 1)
                if nout >= o_fin.size:
                    o_fin = _gi(o_fin, nout)
                o_fin[nout] = np.inf
                sub_state[nsub] = nout
                nout += 1
                nsub += 1
            # the arc (a chain when the common prefix has more than one label)
            nl = _labels_below(t_parent, t_depth, t_label, pre, 0, buf)
            cur = me
            steps = max(1, nl)
            for j in range(steps):
                if j == steps - 1:
                    nxt = sub_state[tid]
                else:
                    if nout >= o_fin.size:
                        o_fin = _gi(o_fin, nout)
                    o_fin[nout] = np.inf
                    nxt = nout
                    nout += 1
                if na >= o_src.size:
                    o_src = _gi(o_src, na)
                    o_dst = _gi(o_dst, na)
                    o_il = _gi(o_il, na)
                    o_ol = _gi(o_ol, na)
                    o_w = _gi(o_w, na)
                o_src[na] = cur
                o_dst[na] = nxt
                o_il[na] = lab if j == 0 else 0
                o_ol[na] = buf[j] if nl > 0 else 0
                o_w[na] = wsum if j == 0 else 0.0
                na += 1
                cur = nxt
            g0 = g1
    return _OK, 0, o_src, o_dst, o_il, o_ol, o_w, o_fin, na, nout


def determinize(fst: Fst, delta: float = DELTA, semiring: str | None = None,
                max_states: int | None = None) -> Fst:
    """Deterministic equivalent of ``fst`` (no state has two arcs with the same input label).

    ``semiring`` ("tropical"/"log") overrides the machine's for the weight sums (Kaldi
    determinises in the log semiring with ``--use-log``); the result keeps the machine's semiring
    tag. ``max_states`` bounds the number of subsets (ValueError beyond it), a guard for inputs
    without the twins property, on which determinisation does not terminate. Raises
    NonFunctionalError for a non-functional transducer. The input is trimmed first.
    """
    code = semiring_code(semiring or fst.semiring)
    fst = connect(fst)
    if fst.start < 0:
        return fst
    states = np.empty((fst.num_states, 3), np.int64)
    states[:, 0] = fst.offsets[:-1]
    states[:, 1] = fst.offsets[1:]
    states.view(np.float64)[:, 2] = fst.final
    arcs = np.empty((fst.num_arcs, 4), np.int64)
    arcs[:, 0] = fst.ilabel
    arcs[:, 1] = fst.olabel
    arcs[:, 2] = fst.dst
    arcs.view(np.float64)[:, 3] = fst.weight
    status, info, src, dst, il, ol, w, fin, na, nout = _det_kernel(
        states, arcs, fst.start, code, 1.0 / delta, 0 if max_states is None else int(max_states))
    if status == _NONFUNCTIONAL_FINAL:
        raise NonFunctionalError(
            f"determinize: input state {info} ends paths with different output strings")
    if status == _NONFUNCTIONAL_ARC:
        raise NonFunctionalError(
            f"determinize: two paths with the same input reach state {info} with different "
            "output strings; the transducer is not functional (add disambiguation symbols)")
    if status == _TOO_MANY:
        raise ValueError(f"determinize: more than {max_states} states (the input may lack the "
                         "twins property)")
    return Fst(nout, 0, fin[:nout], src[:na], dst[:na], il[:na], ol[:na], w[:na], fst.semiring,
               fst.isymbols, fst.osymbols, dtype=fst.dtype)
