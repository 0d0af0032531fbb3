"""Weighted minimisation: push weights towards the initial state, then minimise the machine as
an unweighted acceptor whose labels are (ilabel, olabel, quantised weight) triples, and keep the
original weights (Kaldi's MinimizeEncoded; OpenFst's Minimize does the same for acceptors).

The acceptor step is Moore's partition refinement: states start in classes by quantised final
weight; each round splits a class by the set of (label, class of destination) pairs of its
states, until no class splits. Signatures are compared through 64-bit hashes in an njit kernel,
and the final partition is verified exactly, so a hash collision can never merge states that
differ. For deterministic input the result is the minimal deterministic machine; for
non-deterministic input it is the quotient by the coarsest bisimulation (still equivalent).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from asrkit.decoders.fst.fst import Fst
from asrkit.decoders.fst.pushing import push
from asrkit.decoders.fst.semiring import DELTA
from asrkit.decoders.fst.structure import accessible, connect, keep_states

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


@njit(cache=True, inline="always")
def _mix(h, x):
    """splitmix64 finaliser of h ^ x (uint64 arithmetic wraps, which is what we want)."""
    z = (h ^ x) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


@njit(cache=True)
def _sort_pairs(lab, cls, n):
    """Insertion sort of the first n (lab, cls) pairs; returns the count without duplicates."""
    for i in range(1, n):
        a, b = lab[i], cls[i]
        j = i - 1
        while j >= 0 and (lab[j] > a or (lab[j] == a and cls[j] > b)):
            lab[j + 1] = lab[j]
            cls[j + 1] = cls[j]
            j -= 1
        lab[j + 1] = a
        cls[j + 1] = b
    m = 0
    for i in range(n):
        if m == 0 or lab[i] != lab[m - 1] or cls[i] != cls[m - 1]:
            lab[m] = lab[i]
            cls[m] = cls[i]
            m += 1
    return m


@njit(cache=True)
def _signatures(offsets, dst, label, cls, maxdeg):
    n = offsets.size - 1
    h = np.empty(n, dtype=np.uint64)
    lab = np.empty(maxdeg, dtype=np.int64)
    cl = np.empty(maxdeg, dtype=np.int64)
    for s in range(n):
        k = 0
        for a in range(offsets[s], offsets[s + 1]):
            lab[k] = label[a]
            cl[k] = cls[dst[a]]
            k += 1
        m = _sort_pairs(lab, cl, k)
        z = _mix(np.uint64(0x12345), np.uint64(cls[s]))
        z = _mix(z, np.uint64(m))
        for i in range(m):
            z = _mix(z, np.uint64(lab[i]))
            z = _mix(z, np.uint64(cl[i]))
        h[s] = z
    return h


@njit(cache=True)
def _verify(offsets, dst, label, cls, rep, maxdeg):
    """True when every state has exactly its class representative's signature."""
    n = offsets.size - 1
    la = np.empty(maxdeg, dtype=np.int64)
    ca = np.empty(maxdeg, dtype=np.int64)
    lb = np.empty(maxdeg, dtype=np.int64)
    cb = np.empty(maxdeg, dtype=np.int64)
    for s in range(n):
        r = rep[cls[s]]
        if r == s:
            continue
        k = 0
        for a in range(offsets[s], offsets[s + 1]):
            la[k] = label[a]
            ca[k] = cls[dst[a]]
            k += 1
        m = _sort_pairs(la, ca, k)
        k = 0
        for a in range(offsets[r], offsets[r + 1]):
            lb[k] = label[a]
            cb[k] = cls[dst[a]]
            k += 1
        m2 = _sort_pairs(lb, cb, k)
        if m != m2:
            return False
        for i in range(m):
            if la[i] != lb[i] or ca[i] != cb[i]:
                return False
    return True


def _quantize(w: np.ndarray, delta: float) -> np.ndarray:
    """int64 codes of weights rounded to multiples of delta; +inf gets its own code."""
    q = np.where(np.isfinite(w), np.round(np.where(np.isfinite(w), w, 0.0) / delta), 0)
    q = q.astype(np.int64)
    return np.where(np.isfinite(w), q, np.iinfo(np.int64).max)


def acceptor_classes(fst: Fst, arc_labels: np.ndarray, final_labels: np.ndarray) -> np.ndarray:
    """int64 [S]: Moore equivalence classes of the states of ``fst`` seen as an acceptor with
    arc labels ``arc_labels`` (int64 [A]) and final labels ``final_labels`` (int64 [S])."""
    _, cls = np.unique(final_labels, return_inverse=True)
    cls = cls.astype(np.int64).ravel()
    nclass = int(cls.max()) + 1 if cls.size else 0
    dst = fst.dst.astype(np.int64)
    degs = np.diff(fst.offsets)
    maxdeg = int(degs.max()) if degs.size else 0
    maxdeg = max(maxdeg, 1)
    while True:
        h = _signatures(fst.offsets, dst, arc_labels, cls, maxdeg)
        _, new = np.unique(h, return_inverse=True)
        new = new.astype(np.int64).ravel()
        nnew = int(new.max()) + 1 if new.size else 0
        cls = new
        if nnew == nclass:
            break
        nclass = nnew
    rep = np.full(nclass, -1, dtype=np.int64)
    rep[cls[::-1]] = np.arange(cls.size - 1, -1, -1)  # first state of each class
    if not _verify(fst.offsets, dst, arc_labels, cls, rep, maxdeg):
        raise RuntimeError("minimize: signature hash collision; please report this machine")
    return cls


def minimize(fst: Fst, delta: float = DELTA, push_weights: bool = True,
             semiring: str | None = None) -> Fst:
    """Minimal equivalent machine: weights pushed towards the initial state (in ``semiring``,
    default the machine's) unless ``push_weights=False``, then states merged whose futures agree
    on labels and (quantised) weights. Works on transducers by treating each (ilabel, olabel,
    weight) triple as one label, so output labels are not moved. The result is trimmed and its
    states are numbered in breadth-first order from the start."""
    fst = connect(fst)
    if fst.start < 0:
        return fst
    if push_weights:
        fst = push(fst, "to_initial", semiring=semiring)
    qw = _quantize(fst.weight.astype(np.float64), delta)
    triples = np.stack([fst.ilabel.astype(np.int64), fst.olabel.astype(np.int64), qw], axis=1)
    if triples.shape[0]:
        _, labels = np.unique(triples, axis=0, return_inverse=True)
        labels = labels.astype(np.int64).ravel()
    else:
        labels = np.zeros(0, np.int64)
    cls = acceptor_classes(fst, labels, _quantize(fst.final.astype(np.float64), delta))
    nclass = int(cls.max()) + 1
    rep = np.full(nclass, -1, dtype=np.int64)
    rep[cls[::-1]] = np.arange(cls.size - 1, -1, -1)
    is_rep = np.zeros(fst.num_states, dtype=bool)
    is_rep[rep] = True
    arc_keep = is_rep[fst.src]
    quotient = Fst(nclass, int(cls[fst.start]), fst.final[rep], cls[fst.src[arc_keep]],
                   cls[fst.dst[arc_keep]], fst.ilabel[arc_keep], fst.olabel[arc_keep],
                   fst.weight[arc_keep], fst.semiring, fst.isymbols, fst.osymbols,
                   dtype=fst.dtype)
    return bfs_renumber(quotient)


def bfs_renumber(fst: Fst) -> Fst:
    """Renumber accessible states in breadth-first order from the start (drops the others)."""
    if fst.start < 0:
        return fst
    fst = keep_states(fst, accessible(fst))
    order = _bfs_order(fst.offsets, fst.dst.astype(np.int64), fst.start)
    from asrkit.decoders.fst.structure import permute_states

    return permute_states(fst, order)


@njit(cache=True)
def _bfs_order(offsets, dst, start):
    n = offsets.size - 1
    seen = np.zeros(n, dtype=np.bool_)
    order = np.empty(n, dtype=np.int64)
    seen[start] = True
    order[0] = start
    head = 0
    tail = 1
    while head < tail:
        s = order[head]
        head += 1
        for a in range(offsets[s], offsets[s + 1]):
            d = dst[a]
            if not seen[d]:
                seen[d] = True
                order[tail] = d
                tail += 1
    return order[:tail]
