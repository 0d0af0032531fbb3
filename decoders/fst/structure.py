"""Structural operations: sorting, projection, relabelling, trimming, reversal and the rational
operations (union, concatenation, closure). Semantics follow OpenFst's functions of the same
names; each returns a new Fst.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
from numba import njit

from asrkit.decoders.fst.fst import Fst
from asrkit.decoders.fst.symbols import SymbolTable

# -- sorting, projection, relabelling ----------------------------------------------------------


def arcsort(fst: Fst, sort_type: str = "ilabel") -> Fst:
    """Sort the arcs of every state by (ilabel, olabel) ("ilabel") or (olabel, ilabel)
    ("olabel"), as OpenFst's ArcSort with ILabelCompare / OLabelCompare."""
    if sort_type == "ilabel":
        order = np.lexsort((fst.olabel, fst.ilabel, fst.src))
    elif sort_type == "olabel":
        order = np.lexsort((fst.ilabel, fst.olabel, fst.src))
    else:
        raise ValueError(f"sort_type must be 'ilabel' or 'olabel', not {sort_type!r}")
    return fst.replace(src=fst.src[order], dst=fst.dst[order], ilabel=fst.ilabel[order],
                       olabel=fst.olabel[order], weight=fst.weight[order])


def is_arcsorted(fst: Fst, sort_type: str = "ilabel") -> bool:
    """True when the arcs of every state are non-decreasing in ilabel (or olabel)."""
    lab = fst.ilabel if sort_type == "ilabel" else fst.olabel
    if fst.num_arcs < 2:
        return True
    same = fst.src[1:] == fst.src[:-1]
    return not bool(np.any(same & (lab[1:] < lab[:-1])))


def project(fst: Fst, project_type: str = "input") -> Fst:
    """Acceptor of the input ("input") or output ("output") labels."""
    if project_type == "input":
        return fst.replace(olabel=fst.ilabel, osymbols=fst.isymbols)
    if project_type == "output":
        return fst.replace(ilabel=fst.olabel, isymbols=fst.osymbols)
    raise ValueError(f"project_type must be 'input' or 'output', not {project_type!r}")


def invert(fst: Fst) -> Fst:
    """Swap input and output labels (and symbol tables)."""
    return fst.replace(ilabel=fst.olabel, olabel=fst.ilabel, isymbols=fst.osymbols,
                       osymbols=fst.isymbols)


def _label_map(mapping, labels: np.ndarray) -> np.ndarray:
    if mapping is None:
        return labels
    if isinstance(mapping, Mapping):
        if not mapping:
            return labels
        top = max(int(labels.max(initial=0)), max(mapping)) + 1
        table = np.arange(top, dtype=np.int64)
        for old, new in mapping.items():
            table[int(old)] = int(new)
    else:
        table = np.asarray(mapping, dtype=np.int64)
        if labels.size and labels.max() >= table.size:
            raise ValueError(f"label {int(labels.max())} is beyond the relabel table "
                             f"({table.size} entries)")
    out = table[labels]
    if out.size and out.min() < 0:
        raise ValueError("relabel maps a label to a negative id")
    return out.astype(np.int32)


def relabel(fst: Fst, imap=None, omap=None, isymbols: SymbolTable | None = None,
            osymbols: SymbolTable | None = None) -> Fst:
    """Relabel arcs. ``imap``/``omap``: dict old -> new (others unchanged) or an int array
    indexed by old label. ``isymbols``/``osymbols``: new tables; when given without a map, labels
    are mapped by symbol name from the machine's current tables (OpenFst's relabel_tables)."""
    if imap is None and isymbols is not None and fst.isymbols is not None:
        imap = {i: isymbols.id(s) for i, s in fst.isymbols}
    if omap is None and osymbols is not None and fst.osymbols is not None:
        omap = {i: osymbols.id(s) for i, s in fst.osymbols}
    return fst.replace(ilabel=_label_map(imap, fst.ilabel), olabel=_label_map(omap, fst.olabel),
                       isymbols=isymbols if isymbols is not None else fst.isymbols,
                       osymbols=osymbols if osymbols is not None else fst.osymbols)


def remove_disambig(fst: Fst, ilabels: Iterable[int] = (), olabels: Iterable[int] = ()) -> Fst:
    """Replace the given input and output labels (disambiguation symbols) by epsilon."""
    il, ol = fst.ilabel, fst.olabel
    ids = np.fromiter(ilabels, dtype=np.int64)
    if ids.size:
        il = np.where(np.isin(il, ids), 0, il).astype(np.int32)
    ods = np.fromiter(olabels, dtype=np.int64)
    if ods.size:
        ol = np.where(np.isin(ol, ods), 0, ol).astype(np.int32)
    return fst.replace(ilabel=il, olabel=ol)


# -- trimming and state renumbering ------------------------------------------------------------


@njit(cache=True)
def _reach(offsets, nxt, seeds):
    """bool [S]: states reachable from ``seeds`` over the CSR graph (offsets, nxt)."""
    n = offsets.size - 1
    seen = np.zeros(n, dtype=np.bool_)
    stack = np.empty(n, dtype=np.int64)
    top = 0
    for s in seeds:
        if not seen[s]:
            seen[s] = True
            stack[top] = s
            top += 1
    while top > 0:
        top -= 1
        s = stack[top]
        for a in range(offsets[s], offsets[s + 1]):
            d = nxt[a]
            if not seen[d]:
                seen[d] = True
                stack[top] = d
                top += 1
    return seen


def reverse_csr(fst: Fst) -> tuple[np.ndarray, np.ndarray]:
    """(offsets int64 [S+1], arc ids int64 [A]): the arcs entering each state, grouped by dst."""
    order = np.argsort(fst.dst, kind="stable")
    offsets = np.zeros(fst.num_states + 1, dtype=np.int64)
    if fst.num_arcs:
        np.cumsum(np.bincount(fst.dst, minlength=fst.num_states), out=offsets[1:])
    return offsets, order


def accessible(fst: Fst) -> np.ndarray:
    """bool [S]: states reachable from the start state."""
    if fst.start < 0:
        return np.zeros(fst.num_states, dtype=bool)
    return _reach(fst.offsets, fst.dst.astype(np.int64), np.array([fst.start], np.int64))


def coaccessible(fst: Fst) -> np.ndarray:
    """bool [S]: states from which a final state can be reached."""
    offsets, order = reverse_csr(fst)
    return _reach(offsets, fst.src[order].astype(np.int64), fst.final_states().astype(np.int64))


def keep_states(fst: Fst, keep: np.ndarray) -> Fst:
    """The machine restricted to the states where ``keep`` (bool [S]) holds, renumbered in their
    original order; arcs touching a removed state are dropped."""
    keep = np.asarray(keep, dtype=bool)
    new_id = np.cumsum(keep) - 1
    arc_ok = keep[fst.src] & keep[fst.dst]
    start = int(new_id[fst.start]) if fst.start >= 0 and keep[fst.start] else -1
    n = int(keep.sum())
    if start < 0:
        return Fst.empty(fst.semiring, fst.dtype).replace(isymbols=fst.isymbols,
                                                          osymbols=fst.osymbols)
    return fst.replace(num_states=n, start=start, final=fst.final[keep],
                       src=new_id[fst.src[arc_ok]], dst=new_id[fst.dst[arc_ok]],
                       ilabel=fst.ilabel[arc_ok], olabel=fst.olabel[arc_ok],
                       weight=fst.weight[arc_ok])


def connect(fst: Fst) -> Fst:
    """Remove states that are not both accessible and coaccessible (OpenFst's Connect);
    a machine accepting nothing becomes the empty machine (no states)."""
    if fst.num_states == 0:
        return fst
    keep = accessible(fst) & coaccessible(fst)
    if keep.all():
        return fst
    return keep_states(fst, keep)


def permute_states(fst: Fst, order: np.ndarray) -> Fst:
    """Renumber states so that new state ``k`` is old state ``order[k]`` (a permutation)."""
    order = np.asarray(order, dtype=np.int64)
    new_id = np.empty_like(order)
    new_id[order] = np.arange(order.size)
    return fst.replace(start=int(new_id[fst.start]) if fst.start >= 0 else -1,
                       final=fst.final[order], src=new_id[fst.src], dst=new_id[fst.dst])


@njit(cache=True)
def _kahn(offsets, dst, n):
    indeg = np.zeros(n, dtype=np.int64)
    for a in range(dst.size):
        indeg[dst[a]] += 1
    order = np.empty(n, dtype=np.int64)
    queue = np.empty(n, dtype=np.int64)
    head = 0
    tail = 0
    for s in range(n):
        if indeg[s] == 0:
            queue[tail] = s
            tail += 1
    k = 0
    while head < tail:
        s = queue[head]
        head += 1
        order[k] = s
        k += 1
        for a in range(offsets[s], offsets[s + 1]):
            d = dst[a]
            indeg[d] -= 1
            if indeg[d] == 0:
                queue[tail] = d
                tail += 1
    return order[:k]


def topological_order(fst: Fst) -> np.ndarray | None:
    """int64 [S]: states in an order where every arc goes forward, or None if there is a cycle."""
    order = _kahn(fst.offsets, fst.dst.astype(np.int64), fst.num_states)
    return order if order.size == fst.num_states else None


def is_acyclic(fst: Fst) -> bool:
    """True when the machine has no cycle (over all states)."""
    return topological_order(fst) is not None


def topsort(fst: Fst) -> Fst:
    """Renumber the states of an acyclic machine topologically (every arc goes from a lower to a
    higher state id). Raises ValueError on a cyclic machine (where OpenFst returns false)."""
    order = topological_order(fst)
    if order is None:
        raise ValueError("topsort: the machine is cyclic")
    return permute_states(fst, order)


# -- reversal and rational operations ----------------------------------------------------------


def _check_same(a: Fst, b: Fst, what: str) -> None:
    if a.semiring != b.semiring:
        raise ValueError(f"{what}: semirings differ ({a.semiring} vs {b.semiring})")


def _stack(a: Fst, b: Fst, extra_states: int = 0):
    """Arrays of a followed by b (b's states shifted by a.num_states)."""
    na = a.num_states
    dtype = np.result_type(a.dtype, b.dtype)
    return (na + b.num_states + extra_states,
            np.concatenate([a.final, b.final, np.full(extra_states, np.inf)]).astype(dtype),
            [a.src, b.src + na], [a.dst, b.dst + na], [a.ilabel, b.ilabel], [a.olabel, b.olabel],
            [a.weight.astype(dtype), b.weight.astype(dtype)], dtype)


def _build(template: Fst, n, start, final, src, dst, il, ol, w, dtype) -> Fst:
    return Fst(n, start, final, np.concatenate(src), np.concatenate(dst), np.concatenate(il),
               np.concatenate(ol), np.concatenate(w).astype(dtype), template.semiring,
               template.isymbols, template.osymbols, dtype=dtype)


def _eps_arcs(srcs, dsts, weights):
    srcs = np.asarray(srcs, np.int32)
    z = np.zeros(srcs.size, np.int32)
    return srcs, np.asarray(dsts, np.int32), z, z, np.asarray(weights, np.float64)


def _append(lists, arcs):
    for lst, arr in zip(lists, arcs, strict=True):
        lst.append(arr)


def reverse(fst: Fst) -> Fst:
    """The reversed machine, as OpenFst's Reverse: a new start state 0 with epsilon arcs (weight
    = final weight) to every former final state; the former start state is final with weight
    one; every arc is turned around. Old state s becomes s + 1."""
    n = fst.num_states + 1
    final = np.full(n, np.inf, dtype=fst.dtype)
    if fst.start >= 0:
        final[fst.start + 1] = 0.0
    fs = fst.final_states()
    src = [fst.dst + 1, np.zeros(fs.size, np.int32)]
    dst = [fst.src + 1, (fs + 1).astype(np.int32)]
    z = np.zeros(fs.size, np.int32)
    return Fst(n, 0, final, np.concatenate(src), np.concatenate(dst),
               np.concatenate([fst.ilabel, z]), np.concatenate([fst.olabel, z]),
               np.concatenate([fst.weight, fst.final[fs]]), fst.semiring, fst.isymbols,
               fst.osymbols, dtype=fst.dtype)


def _has_incoming(fst: Fst, state: int) -> bool:
    return bool(np.any(fst.dst == state))


def union(a: Fst, b: Fst) -> Fst:
    """Machine accepting the union of the two relations (OpenFst's Union: an epsilon arc from
    a's start to b's start when nothing enters a's start, else a new start state)."""
    _check_same(a, b, "union")
    if b.start < 0:
        return a
    if a.start < 0:
        return b.replace(isymbols=a.isymbols or b.isymbols, osymbols=a.osymbols or b.osymbols)
    new_start = _has_incoming(a, a.start)
    n, final, src, dst, il, ol, w, dtype = _stack(a, b, 1 if new_start else 0)
    na = a.num_states
    if new_start:
        s0 = n - 1
        _append((src, dst, il, ol, w), _eps_arcs([s0, s0], [a.start, b.start + na], [0, 0]))
    else:
        s0 = a.start
        _append((src, dst, il, ol, w), _eps_arcs([s0], [b.start + na], [0]))
    return _build(a, n, s0, final, src, dst, il, ol, w, dtype)


def concat(a: Fst, b: Fst) -> Fst:
    """Machine for the concatenation a.b: every final state of a gets an epsilon arc weighted by
    its final weight to b's start and stops being final (OpenFst's Concat)."""
    _check_same(a, b, "concat")
    if a.start < 0 or b.start < 0:
        return Fst.empty(a.semiring, a.dtype).replace(isymbols=a.isymbols, osymbols=a.osymbols)
    n, final, src, dst, il, ol, w, dtype = _stack(a, b)
    fs = a.final_states()
    _append((src, dst, il, ol, w), _eps_arcs(fs, np.full(fs.size, b.start + a.num_states),
                                             a.final[fs]))
    final[fs] = np.inf
    return _build(a, n, a.start, final, src, dst, il, ol, w, dtype)


def closure(fst: Fst, closure_type: str = "star") -> Fst:
    """Kleene closure (OpenFst's Closure): epsilon arcs from every final state (weight = final
    weight) back to the start; for "star" a new final start state with an epsilon arc to the old
    start, so the empty string is accepted; "plus" accepts one or more repetitions."""
    if closure_type not in ("star", "plus"):
        raise ValueError(f"closure_type must be 'star' or 'plus', not {closure_type!r}")
    if fst.start < 0:
        if closure_type == "plus":
            return fst
        one = Fst(1, 0, np.zeros(1), [], [], [], [], [], fst.semiring, fst.isymbols,
                  fst.osymbols, dtype=fst.dtype)
        return one
    fs = fst.final_states()
    empty = Fst.empty(fst.semiring, fst.dtype)
    extra = 1 if closure_type == "star" else 0
    n, final, src, dst, il, ol, w, dtype = _stack(fst, empty, extra)
    _append((src, dst, il, ol, w), _eps_arcs(fs, np.full(fs.size, fst.start), fst.final[fs]))
    start = fst.start
    if closure_type == "star":
        start = n - 1
        final[start] = 0.0
        _append((src, dst, il, ol, w), _eps_arcs([start], [fst.start], [0]))
    return _build(fst, n, start, final, src, dst, il, ol, w, dtype)
