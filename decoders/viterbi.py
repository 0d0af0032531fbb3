"""Token-passing Viterbi beam search over a decoding graph (Kaldi's lattice-faster decoder, lean).

The graph is given as CSR arrays (``GraphArrays``): for each state its arcs' destination, input
label (token id + ``ilabel_offset``; 0 = epsilon), output label (word id; 0 = none) and weight
(a cost, -ln). Scores come from a decodable or a ``[T, C]`` matrix of log-likelihoods (natural log,
acoustic scale applied by the caller or by ``acoustic_scale``).

Per frame, as Kaldi's ``LatticeFasterDecoder``:
  * the cutoff over the frame's tokens is ``best + beam``, tightened to the ``max_active``-th
    best cost when more tokens are within the beam, or widened to the ``min_active``-th when
    fewer are (``_cutoff``, Kaldi's ``GetCutoff``: a partial sort only when the limit binds);
    the beam then used for the next frame is adapted to that cutoff (plus ``beam_delta``);
  * the best token is expanded first, so the next frame's cutoff is tight from the start, then
    every token under the cutoff is expanded along its emitting arcs;
  * epsilon arcs are followed within the new frame (arcs are kept epsilon-first per state, so
    each state's epsilon arcs are a prefix of its arc range and its emitting arcs the rest).

Each token keeps a back-pointer (previous token, arc), which gives the 1-best path with word
times. Only when ``lattice_beam`` is given are all expansions (*links*) stored, and the raw token
lattice is pruned to that beam (see ``DecodeResult.lattice_links``).

``word_insertion_penalty`` is added to the cost of every arc with a word on its output side.
The search, the cutoff and the back-trace are numba-compiled; nothing per frame runs in Python.
"""

from __future__ import annotations

import dataclasses
import math
import threading

import numba
import numba.extending
import numpy as np

from asrkit.decoders.context_graph import _step as _ctx_step
from asrkit.decoders.decodable import as_matrix

INF = np.float32(np.inf)


@dataclasses.dataclass
class GraphArrays:
    """A decoding graph as CSR arrays (arcs of state s: ``offsets[s]:offsets[s+1]``).

    Attributes: offsets int64[S+1]; dst, ilabel, olabel int32[A]; weight float32[A];
    final float32[S] (inf = not final); start int.
    """

    offsets: np.ndarray
    dst: np.ndarray
    ilabel: np.ndarray
    olabel: np.ndarray
    weight: np.ndarray
    final: np.ndarray
    start: int

    @property
    def num_states(self) -> int:
        return len(self.final)

    @classmethod
    def from_fst(cls, fst) -> GraphArrays:
        """View an ``asrkit.decoders.fst.Fst`` (same CSR layout) as search arrays."""
        return cls(np.asarray(fst.offsets, np.int64), np.asarray(fst.dst, np.int32),
                   np.asarray(fst.ilabel, np.int32), np.asarray(fst.olabel, np.int32),
                   np.asarray(fst.weight, np.float32), np.asarray(fst.final, np.float32),
                   int(fst.start))

    @classmethod
    def from_arcs(cls, num_states: int, start: int, arcs, finals: dict) -> GraphArrays:
        """Build from ``arcs`` = iterable of (src, dst, ilabel, olabel, weight) and finals."""
        arcs = sorted(arcs, key=lambda a: a[0])
        src = np.array([a[0] for a in arcs], np.int64)
        offsets = np.zeros(num_states + 1, np.int64)
        np.add.at(offsets, src + 1, 1)
        final = np.full(num_states, np.inf, np.float32)
        for s, w in finals.items():
            final[s] = w
        return cls(np.cumsum(offsets), np.array([a[1] for a in arcs], np.int32),
                   np.array([a[2] for a in arcs], np.int32),
                   np.array([a[3] for a in arcs], np.int32),
                   np.array([a[4] for a in arcs], np.float32), final, int(start))

    def check(self, name: str = "graph") -> None:
        """Raise ValueError naming ``name`` unless the search can run on these arrays: CSR
        offsets from 0 to the arc count, non-decreasing; arc destinations and the start state
        in range; labels >= 0; weights and final weights neither NaN nor -inf; and no cycle of
        epsilon arcs with a negative total weight (the search would follow it forever)."""
        offsets, num_arcs = np.asarray(self.offsets), len(self.dst)
        if (len(offsets) != self.num_states + 1 or offsets[0] != 0 or offsets[-1] != num_arcs
                or np.any(np.diff(offsets) < 0)):
            raise ValueError(f"{name}: the arc offsets do not cover the arcs in order")
        if not (len(self.ilabel) == len(self.olabel) == len(self.weight) == num_arcs):
            raise ValueError(f"{name}: the arc arrays differ in length")
        if num_arcs and (self.dst.min() < 0 or self.dst.max() >= self.num_states):
            raise ValueError(f"{name}: an arc leads to a state outside 0..{self.num_states - 1}")
        if num_arcs and (self.ilabel.min() < 0 or self.olabel.min() < 0):
            raise ValueError(f"{name}: negative label")
        if not 0 <= self.start < self.num_states:
            raise ValueError(f"{name}: start state {self.start} is not a state (empty graph?)")
        for what, w in (("an arc", self.weight), ("a final", self.final)):
            if np.isnan(w).any() or (w == -np.inf).any():
                raise ValueError(f"{name}: {what} weight is NaN or -inf")
        if _negative_epsilon_cycle(np.ascontiguousarray(offsets, np.int64),
                                   np.ascontiguousarray(self.dst, np.int32),
                                   np.ascontiguousarray(self.ilabel, np.int32),
                                   np.ascontiguousarray(self.weight, np.float32)):
            raise ValueError(f"{name}: a cycle of epsilon arcs has a negative weight (a search "
                             "would never leave it)")

    def search_arrays(self) -> SearchArrays:
        """The arrays the search reads: arcs epsilon-first within each state (a stable
        reordering, the identity for graphs arc-sorted by input label such as TLG) and each
        state's first emitting arc. Computed once and cached on the object, so the arrays must
        not be modified in place afterwards."""
        cached = self.__dict__.get("_search")
        if cached is None:
            cached = self.__dict__["_search"] = SearchArrays.of(self)
        return cached


@numba.njit(cache=True)
def _negative_epsilon_cycle(offsets, dst, ilabel, weight):
    """True when the epsilon arcs (ilabel 0) form a cycle of negative total weight: a
    topological sort (Kahn) proves most graphs acyclic at once; otherwise Bellman-Ford over
    the epsilon arcs, in the search's float32, still relaxing after S passes finds one."""
    S = offsets.shape[0] - 1
    indeg = np.zeros(S, np.int64)
    for a in range(dst.shape[0]):
        if ilabel[a] == 0:
            indeg[dst[a]] += 1
    stack = np.empty(S, np.int64)
    top = 0
    for s in range(S):
        if indeg[s] == 0:
            stack[top] = s
            top += 1
    done = 0
    while top > 0:
        top -= 1
        s = stack[top]
        done += 1
        for a in range(offsets[s], offsets[s + 1]):
            if ilabel[a] == 0:
                indeg[dst[a]] -= 1
                if indeg[dst[a]] == 0:
                    stack[top] = dst[a]
                    top += 1
    if done == S:
        return False
    dist = np.zeros(S, np.float32)
    for _ in range(S):
        changed = False
        for s in range(S):
            for a in range(offsets[s], offsets[s + 1]):
                if ilabel[a] == 0:
                    c = dist[s] + weight[a]
                    if c < dist[dst[a]]:
                        dist[dst[a]] = c
                        changed = True
        if not changed:
            return False
    return True


@dataclasses.dataclass
class SearchArrays:
    """``GraphArrays`` with arcs epsilon-first per state: ``offsets[s]:emit_begin[s]`` are
    state s's epsilon arcs, ``emit_begin[s]:offsets[s+1]`` its emitting arcs (int64[S])."""

    offsets: np.ndarray
    emit_begin: np.ndarray
    dst: np.ndarray
    ilabel: np.ndarray
    olabel: np.ndarray
    weight: np.ndarray
    final: np.ndarray
    start: int
    _local: threading.local = dataclasses.field(default_factory=threading.local, repr=False,
                                                compare=False)

    def state_map(self) -> np.ndarray:
        """This thread's state -> token map, int32[S] of -1: the search leaves it all -1 again,
        so it is allocated once per thread instead of once per utterance."""
        m = getattr(self._local, "state2tok", None)
        if m is None:
            m = self._local.state2tok = np.full(len(self.final), -1, np.int32)
        return m

    def drop_state_map(self) -> None:
        """Forget this thread's state map (after a search that did not finish)."""
        self._local.state2tok = None

    @classmethod
    def of(cls, g: GraphArrays) -> SearchArrays:
        """Reorder ``g``'s arcs (when needed) and find each state's first emitting arc."""
        offsets = np.ascontiguousarray(g.offsets, np.int64)
        ilabel = np.ascontiguousarray(g.ilabel, np.int32)
        dst = np.ascontiguousarray(g.dst, np.int32)
        olabel = np.ascontiguousarray(g.olabel, np.int32)
        weight = np.ascontiguousarray(g.weight, np.float32)
        num_states = len(offsets) - 1
        src = np.repeat(np.arange(num_states, dtype=np.int64), np.diff(offsets))
        emitting = ilabel != 0
        key = src * 2 + emitting
        if key.size and np.any(key[1:] < key[:-1]):
            order = np.argsort(key, kind="stable")
            dst, ilabel, olabel, weight = dst[order], ilabel[order], olabel[order], weight[order]
            emitting = emitting[order]
        n_eps = np.bincount(src[~emitting], minlength=num_states) if src.size else \
            np.zeros(num_states, np.int64)
        emit_begin = offsets[:-1] + n_eps
        return cls(offsets, emit_begin.astype(np.int64), dst, ilabel, olabel, weight,
                   np.ascontiguousarray(g.final, np.float32), int(g.start))


@dataclasses.dataclass
class DecodeResult:
    """What one utterance's search found.

    Attributes:
        words: output labels of the best path (word ids, epsilons removed).
        word_frames: int32 [n, 2]: first and last frame of each word's tokens on the best path.
        cost: total cost of the best path (graph + acoustic, -ln), final weight included.
        graph_cost, acoustic_cost: its two parts (graph weights plus word insertion penalties;
            acoustic cost already multiplied by ``acoustic_scale``, as are the links' ac_cost).
        reached_final: False when no final state survived (the best partial path is returned).
        lattice_links: structured array of the pruned raw lattice's links (fields src_tok,
            dst_tok, ilabel, olabel, graph_cost, ac_cost), token 0 = start; lattice_final: dict
            token -> final weight (0 when no final state was reached); lattice_tok_frame: int32
            frame of each token. Read as an FST (states = tokens), its best path is the 1-best.
        num_tokens: tokens created by the search (a measure of its work).
    """

    words: list[int]
    word_frames: np.ndarray
    cost: float
    graph_cost: float
    acoustic_cost: float
    reached_final: bool
    lattice_links: np.ndarray | None = None
    lattice_final: dict | None = None
    lattice_tok_frame: np.ndarray | None = None
    num_tokens: int = 0


LINK_DTYPE = np.dtype([("src_tok", np.int32), ("dst_tok", np.int32), ("ilabel", np.int32),
                       ("olabel", np.int32), ("graph_cost", np.float32),
                       ("ac_cost", np.float32)])


@numba.njit(cache=True)
def _grow(a, n, used):
    """``a`` if it has room for index ``n``, else a copy of ``a[:used]`` with at least twice
    the room (copying only the used part keeps untouched pages untouched)."""
    if n < a.shape[0]:
        return a
    b = np.empty(max(2 * a.shape[0], n + 1), a.dtype)
    b[:used] = a[:used]
    return b


@numba.njit(cache=True)
def _cutoff(tok_cost, begin, end, beam, max_active, min_active, beam_delta):
    """Kaldi's GetCutoff over tokens ``begin:end``: returns (cutoff, adaptive beam, best token).

    The cutoff is ``best + beam``, lowered to the ``max_active``-th smallest cost when more
    than ``max_active`` tokens are under ``best + beam``, raised to the ``min_active``-th when
    fewer than ``min_active`` are; the adaptive beam is then ``cutoff - best + beam_delta``.
    A partial sort (``np.partition``) runs only when one of the two limits binds.
    """
    best = INF
    best_tok = -1
    for i in range(begin, end):
        if tok_cost[i] < best:
            best = tok_cost[i]
            best_tok = i
    beam_cutoff = best + beam
    n = end - begin
    if n <= min_active and n <= max_active:
        return beam_cutoff, beam, best_tok
    within = 0
    for i in range(begin, end):
        if tok_cost[i] < beam_cutoff:
            within += 1
    if within > max_active:
        c = np.partition(tok_cost[begin:end], max_active)[max_active]
        return c, c - best + beam_delta, best_tok
    if within <= min_active < n:
        c = np.partition(tok_cost[begin:end], min_active)[min_active]
        if c > beam_cutoff:
            return c, c - best + beam_delta, best_tok
    return beam_cutoff, beam, best_tok


@numba.njit(cache=True)
def _new_search(start, keep_links, use_ctx):
    """The state of a search before its first frame (see ``_advance``): token 0 at ``start``."""
    cap = 1024
    tok_state = np.empty(cap, np.int32)
    tok_cost = np.empty(cap, np.float32)
    tok_frame = np.empty(cap, np.int32)
    tok_prev = np.empty(cap, np.int32)
    tok_arc = np.empty(cap, np.int32)
    tok_ctx = np.zeros(cap if use_ctx else 1, np.int32)
    tok_link = np.full(cap if use_ctx else 1, -1, np.int32)
    cap_l = 4096 if keep_links else 1
    l_src = np.empty(cap_l, np.int32)
    l_dst = np.empty(cap_l, np.int32)
    l_arc = np.empty(cap_l, np.int32)
    l_ac = np.empty(cap_l, np.float32)
    l_gx = np.zeros(cap_l if keep_links and use_ctx else 1, np.float32)
    queue = np.empty(256, np.int32)
    tok_state[0] = start
    tok_cost[0] = 0.0
    tok_frame[0] = 0
    tok_prev[0] = -1
    tok_arc[0] = -1
    # counters: tokens, first token of the last frame, links, next frame to make, dead (0/1)
    ints = np.zeros(5, np.int64)
    ints[0] = 1
    floats = np.zeros(1, np.float32)  # the adaptive beam (set on the first frame)
    return (tok_state, tok_cost, tok_frame, tok_prev, tok_arc, tok_ctx, l_src, l_dst, l_arc,
            l_ac, l_gx, queue, ints, floats, tok_link)


def _has_context(ctx):
    """True when ``ctx`` holds a context graph's arrays, False for None: a compile-time
    constant in the search, so the search without hotwords carries none of their code."""
    return ctx is not None


@numba.extending.overload(_has_context)
def _has_context_nb(ctx):
    value = not isinstance(ctx, numba.types.NoneType)
    return lambda ctx: value


def _word_step(ctx, c_state, word):
    """Context state and extra cost of emitting ``word`` after context ``c_state``."""
    if ctx is None or word == 0:
        return c_state, np.float32(0.0)
    nxt, score = _ctx_step(*ctx, c_state, word)
    return nxt, np.float32(-score)


@numba.extending.overload(_word_step)
def _word_step_nb(ctx, c_state, word):
    if isinstance(ctx, numba.types.NoneType):
        return lambda ctx, c_state, word: (np.int32(c_state), np.float32(0.0))

    def step(ctx, c_state, word):
        if word == 0:
            return np.int32(c_state), np.float32(0.0)
        nxt, score = _ctx_step(ctx[0], ctx[1], ctx[2], ctx[3], ctx[4], ctx[5], c_state, word)
        return np.int32(nxt), np.float32(-score)
    return step


@numba.njit(cache=True)
def _advance(offsets, emit_begin, dst, ilabel, olabel, weight, scores, t_end, ilabel_offset,
             beam, max_active, min_active, beam_delta, wip, keep_links, state2tok, ctx, st):
    """Run the frame-synchronous search (module docstring) from its next frame up to token
    frame ``t_end`` (frame t's tokens have read scores rows ``0 .. t-1``; frame 0 is the start
    state's epsilon closure); returns the new state (``_new_search``'s tuple).

    ``state2tok`` int32[S] must be all -1; it is all -1 again on return. ``ctx``: the arrays
    of a hotword context graph (``ContextGraph.arrays``), or None (no biasing, and none of its
    code compiled in: two specialisations by type): a token
    is then a (graph state, context state) pair, as in a search of the graph composed with the
    context graph (the tokens of one graph state in a frame are chained by ``tok_link``), and
    an arc with a word adds the context step's cost. With
    ``keep_links`` every expansion is kept as a link (src token, dst token, arc, acoustic cost,
    context cost). A search whose tokens all fall out of the beam is marked dead.
    """
    (tok_state, tok_cost, tok_frame, tok_prev, tok_arc, tok_ctx, l_src, l_dst, l_arc, l_ac,
     l_gx, queue, ints, floats, tok_link) = st
    use_ctx = _has_context(ctx)
    num_states = offsets.shape[0] - 1
    C = scores.shape[1]
    n_tok = ints[0]
    frame_begin = ints[1]
    n_link = ints[2]
    adaptive_beam = floats[0] if ints[3] > 0 else beam
    if ints[3] == 0:
        state2tok[tok_state[0]] = 0
    for t in range(ints[3], t_end + 1):
        if ints[4]:
            break
        new_begin = n_tok
        # a frame holds at most one token per state: growing here, outside the arc loops,
        # keeps the arrays fixed inside them (numba then keeps their pointers in registers)
        if n_tok + num_states > tok_state.shape[0]:
            tok_state = _grow(tok_state, n_tok + num_states, n_tok)
            tok_cost = _grow(tok_cost, n_tok + num_states, n_tok)
            tok_frame = _grow(tok_frame, n_tok + num_states, n_tok)
            tok_prev = _grow(tok_prev, n_tok + num_states, n_tok)
            tok_arc = _grow(tok_arc, n_tok + num_states, n_tok)
            if use_ctx:
                tok_ctx = _grow(tok_ctx, n_tok + num_states, n_tok)
                tok_link = _grow(tok_link, n_tok + num_states, n_tok)
        if t > 0:
            # -- emitting arcs: tokens of frame t - 1 -> new tokens of frame t --------------
            cutoff, adaptive_beam, best_tok = _cutoff(tok_cost, frame_begin, n_tok, beam,
                                                      max_active, min_active, beam_delta)
            if best_tok < 0:
                ints[4] = 1
                break
            row = t - 1
            # the best token's expansions give a tight cutoff for the new frame at once
            next_cutoff = INF
            s = tok_state[best_tok]
            for a in range(emit_begin[s], offsets[s + 1]):
                col = ilabel[a] - ilabel_offset
                if 0 <= col < C:
                    c = tok_cost[best_tok] + weight[a] - scores[row, col]
                    if olabel[a] != 0:
                        c += wip
                        if use_ctx:
                            c += _word_step(ctx, tok_ctx[best_tok], olabel[a])[1]
                    if c + adaptive_beam < next_cutoff:
                        next_cutoff = c + adaptive_beam
            for tk in range(frame_begin, new_begin):
                tc = tok_cost[tk]
                if tc > cutoff:
                    continue
                s = tok_state[tk]
                for a in range(emit_begin[s], offsets[s + 1]):
                    col = ilabel[a] - ilabel_offset
                    if col < 0 or col >= C:
                        continue
                    ac = -scores[row, col]
                    c = tc + weight[a] + ac
                    c_next = 0
                    gx = np.float32(0.0)
                    if olabel[a] != 0:
                        c += wip
                        if use_ctx:
                            c_next, gx = _word_step(ctx, tok_ctx[tk], olabel[a])
                            c += gx
                    elif use_ctx:
                        c_next = tok_ctx[tk]
                    if c >= next_cutoff:
                        continue
                    d = dst[a]
                    nt = state2tok[d]
                    if use_ctx:
                        while nt >= 0 and tok_ctx[nt] != c_next:
                            nt = tok_link[nt]
                    if nt < 0:
                        if use_ctx and n_tok >= tok_state.shape[0]:
                            tok_state = _grow(tok_state, n_tok, n_tok)
                            tok_cost = _grow(tok_cost, n_tok, n_tok)
                            tok_frame = _grow(tok_frame, n_tok, n_tok)
                            tok_prev = _grow(tok_prev, n_tok, n_tok)
                            tok_arc = _grow(tok_arc, n_tok, n_tok)
                            tok_ctx = _grow(tok_ctx, n_tok, n_tok)
                            tok_link = _grow(tok_link, n_tok, n_tok)
                        nt = n_tok
                        n_tok += 1
                        tok_state[nt] = d
                        tok_cost[nt] = INF
                        tok_frame[nt] = t
                        if use_ctx:
                            tok_ctx[nt] = c_next
                            tok_link[nt] = state2tok[d]
                        state2tok[d] = nt
                    if keep_links:
                        if n_link >= l_src.shape[0]:
                            l_src = _grow(l_src, n_link, n_link)
                            l_dst = _grow(l_dst, n_link, n_link)
                            l_arc = _grow(l_arc, n_link, n_link)
                            l_ac = _grow(l_ac, n_link, n_link)
                            if use_ctx:
                                l_gx = _grow(l_gx, n_link, n_link)
                        l_src[n_link] = tk
                        l_dst[n_link] = nt
                        l_arc[n_link] = a
                        l_ac[n_link] = ac
                        if use_ctx:
                            l_gx[n_link] = gx
                        n_link += 1
                    if c < tok_cost[nt]:
                        tok_cost[nt] = c
                        tok_prev[nt] = tk
                        tok_arc[nt] = a
                        if c + adaptive_beam < next_cutoff:
                            next_cutoff = c + adaptive_beam
            if n_tok == new_begin:
                frame_begin = new_begin
                ints[4] = 1
                break
        # -- epsilon arcs within the frame -----------------------------------------------------
        eps_best = INF
        for i in range(new_begin if t > 0 else 0, n_tok):
            if tok_cost[i] < eps_best:
                eps_best = tok_cost[i]
        eps_cutoff = eps_best + beam
        qn = 0
        for tk in range(new_begin if t > 0 else 0, n_tok):
            if emit_begin[tok_state[tk]] > offsets[tok_state[tk]]:
                queue = _grow(queue, qn, qn)
                queue[qn] = tk
                qn += 1
        while qn > 0:
            qn -= 1
            tk = queue[qn]
            tc = tok_cost[tk]
            if tc > eps_cutoff:
                continue
            s = tok_state[tk]
            for a in range(offsets[s], emit_begin[s]):
                c = tc + weight[a]
                c_next = 0
                gx = np.float32(0.0)
                if olabel[a] != 0:
                    c += wip
                    if use_ctx:
                        c_next, gx = _word_step(ctx, tok_ctx[tk], olabel[a])
                        c += gx
                elif use_ctx:
                    c_next = tok_ctx[tk]
                if c >= eps_cutoff:
                    continue
                d = dst[a]
                nt = state2tok[d]
                if use_ctx:
                    while nt >= 0 and tok_ctx[nt] != c_next:
                        nt = tok_link[nt]
                if nt < 0:
                    if use_ctx and n_tok >= tok_state.shape[0]:
                        tok_state = _grow(tok_state, n_tok, n_tok)
                        tok_cost = _grow(tok_cost, n_tok, n_tok)
                        tok_frame = _grow(tok_frame, n_tok, n_tok)
                        tok_prev = _grow(tok_prev, n_tok, n_tok)
                        tok_arc = _grow(tok_arc, n_tok, n_tok)
                        tok_ctx = _grow(tok_ctx, n_tok, n_tok)
                        tok_link = _grow(tok_link, n_tok, n_tok)
                    nt = n_tok
                    n_tok += 1
                    tok_state[nt] = d
                    tok_cost[nt] = INF
                    tok_frame[nt] = t
                    if use_ctx:
                        tok_ctx[nt] = c_next
                        tok_link[nt] = state2tok[d]
                    state2tok[d] = nt
                if keep_links:
                    if n_link >= l_src.shape[0]:
                        l_src = _grow(l_src, n_link, n_link)
                        l_dst = _grow(l_dst, n_link, n_link)
                        l_arc = _grow(l_arc, n_link, n_link)
                        l_ac = _grow(l_ac, n_link, n_link)
                        if use_ctx:
                            l_gx = _grow(l_gx, n_link, n_link)
                    l_src[n_link] = tk
                    l_dst[n_link] = nt
                    l_arc[n_link] = a
                    l_ac[n_link] = 0.0
                    if use_ctx:
                        l_gx[n_link] = gx
                    n_link += 1
                if c < tok_cost[nt]:
                    tok_cost[nt] = c
                    tok_prev[nt] = tk
                    tok_arc[nt] = a
                    if emit_begin[d] > offsets[d]:
                        queue = _grow(queue, qn, qn)
                        queue[qn] = nt
                        qn += 1
        if t > 0:
            frame_begin = new_begin
        # the frame is complete: its tokens leave the state map before the next one is made
        for i in range(frame_begin, n_tok):
            state2tok[tok_state[i]] = -1
        ints[3] = t + 1
    ints[0] = n_tok
    ints[1] = frame_begin
    ints[2] = n_link
    floats[0] = adaptive_beam
    return (tok_state, tok_cost, tok_frame, tok_prev, tok_arc, tok_ctx, l_src, l_dst, l_arc,
            l_ac, l_gx, queue, ints, floats, tok_link)


@numba.njit(cache=True)
def _best_path(best_tok, tok_prev, tok_arc, tok_frame, ilabel, olabel, weight, scores,
               ilabel_offset, wip, T):
    """Follow back-pointers from ``best_tok``: returns word ids int32[n], word frames
    int32[n, 2] (first and last frame of each word's tokens), graph and acoustic cost."""
    n = 0
    tk = best_tok
    while tok_arc[tk] >= 0:
        n += 1
        tk = tok_prev[tk]
    arcs = np.empty(n, np.int32)
    toks = np.empty(n, np.int32)
    tk = best_tok
    for i in range(n - 1, -1, -1):
        arcs[i] = tok_arc[tk]
        toks[i] = tk
        tk = tok_prev[tk]
    n_words = 0
    for i in range(n):
        if olabel[arcs[i]] != 0:
            n_words += 1
    words = np.empty(n_words, np.int32)
    frames = np.zeros((n_words, 2), np.int32)
    graph_cost = 0.0
    ac_cost = 0.0
    k = 0
    for i in range(n):
        a = arcs[i]
        graph_cost += weight[a]
        frame = tok_frame[toks[i]] - 1  # the frame this arc consumed (or follows)
        if ilabel[a] != 0:
            ac_cost -= scores[frame, ilabel[a] - ilabel_offset]
        if olabel[a] != 0:
            graph_cost += wip
            if k > 0:
                end = frame - 1 if ilabel[a] != 0 else frame
                frames[k - 1, 1] = max(frames[k - 1, 0], end)
            words[k] = olabel[a]
            frames[k, 0] = max(frame, 0)
            frames[k, 1] = max(frame, 0)
            k += 1
    if n_words > 0:
        frames[n_words - 1, 1] = max(frames[n_words - 1, 0], T - 1)
    return words, frames, graph_cost, ac_cost


@numba.njit(cache=True)
def _backward_costs(n_tok, l_src, l_dst, l_cost, end_cost):
    """Best cost from each token to the end: links are in creation order, so a reverse sweep
    relaxes them (epsilon links within a frame may need a few sweeps; iterate to a fixpoint)."""
    beta = end_cost.copy()
    changed = True
    while changed:
        changed = False
        for i in range(l_src.shape[0] - 1, -1, -1):
            c = l_cost[i] + beta[l_dst[i]]
            if c < beta[l_src[i]]:
                beta[l_src[i]] = c
                changed = True
    return beta


class ViterbiSearch:
    """One utterance's search, fed scores frame block by frame block (streaming) or all at
    once (``viterbi_decode``); the options are ``viterbi_decode``'s.

    ``advance(scores)`` runs the search over more frames ``[n, C]``; ``best(use_final)`` is the
    best token now (a partial result: ``result(final=False)``); ``result()`` is the outcome so
    far as a ``DecodeResult``, with the lattice when ``lattice_beam`` is given. Fed the frames
    of an utterance in any blocks, ``result()`` equals ``viterbi_decode`` on all of them.
    ``context``: a hotword ``ContextGraph`` over word ids (None: no biasing); its costs count
    in the graph cost.
    """

    def __init__(self, graph: GraphArrays, beam: float = 16.0, max_active: int = 7000,
                 min_active: int = 200, acoustic_scale: float = 1.0,
                 word_insertion_penalty: float = 0.0, ilabel_offset: int = 1,
                 lattice_beam: float | None = None, beam_delta: float = 0.5, context=None):
        from asrkit.decoders.options import count, finite

        self.beam = np.float32(finite("beam", beam, 0.0, strict=True))
        self.max_active = count("max_active", max_active)
        self.min_active = count("min_active", min_active, 0)
        self.acoustic_scale = finite("acoustic_scale", acoustic_scale, 0.0, strict=True)
        self.wip = np.float32(finite("word_insertion_penalty", word_insertion_penalty))
        self.beam_delta = np.float32(finite("beam_delta", beam_delta, 0.0))
        self.lattice_beam = None if lattice_beam is None else \
            finite("lattice_beam", lattice_beam, 0.0, strict=True)
        self.ilabel_offset = int(ilabel_offset)
        self.g = graph.search_arrays()
        self.context = context
        self.ctx = None if context is None else context.arrays()
        self.keep_links = self.lattice_beam is not None
        self.scores = np.zeros((0, 0), np.float32)  # rows 0..T-1 used
        self.T = 0
        self.st = _new_search(self.g.start, self.keep_links, context is not None)

    def advance(self, log_likelihoods) -> None:
        """Search ``[n, C]`` more frames of scores (array or decodable; ``acoustic_scale``
        applied here). ValueError when they hold NaN or +inf or change width."""
        new = as_matrix(log_likelihoods, self.acoustic_scale)
        if self.T and new.shape[1] != self.scores.shape[1]:
            raise ValueError(f"scores of {new.shape[1]} tokens after {self.scores.shape[1]}")
        if self.T + len(new) > len(self.scores) or not self.T:
            grown = np.zeros((max(2 * len(self.scores), self.T + len(new), 64), new.shape[1]),
                             np.float32)
            if self.T:
                grown[:self.T] = self.scores[:self.T]
            self.scores = grown
        self.scores[self.T:self.T + len(new)] = new
        self.T += len(new)
        g = self.g
        try:
            self.st = _advance(g.offsets, g.emit_begin, g.dst, g.ilabel, g.olabel, g.weight,
                               self.scores, self.T, self.ilabel_offset, self.beam,
                               self.max_active, self.min_active, self.beam_delta, self.wip,
                               self.keep_links, g.state_map(), self.ctx, self.st)
        except BaseException:
            g.drop_state_map()  # an interrupted search may leave entries set
            raise

    @property
    def num_tokens(self) -> int:
        return int(self.st[12][0])

    def _last(self) -> np.ndarray:
        """Tokens of the last frame (empty when the search died before frame T)."""
        ints = self.st[12]
        last = np.arange(ints[1], ints[0])
        if len(last) == 0 or self.st[2][last[0]] != self.T:
            return last[:0]
        return last

    def _end_costs(self, last: np.ndarray, use_final: bool) -> tuple[np.ndarray, bool]:
        """Cost of each last-frame token to the end, and whether a final state is among them
        (``use_final`` False: no final weights). An unfinished hotword match is taken back."""
        tok_state, tok_cost = self.st[0], self.st[1]
        cost = tok_cost[last]
        if self.context is not None:
            cost = cost + self.context.node[self.st[5][last]]
        if not use_final:
            return cost, False
        with_final = cost + self.g.final[tok_state[last]]
        reached = bool(np.isfinite(with_final).any())
        return (with_final if reached else cost), reached

    def final_relative_cost(self) -> float:
        """Kaldi's ``FinalRelativeCost``: the best cost with final weights minus the best
        without (inf when no final state is active); small values mean the utterance can end
        here."""
        last = self._last()
        if not len(last):
            return math.inf
        with_final, reached = self._end_costs(last, True)
        if not reached:
            return math.inf
        return float(with_final.min() - self._end_costs(last, False)[0].min())

    def traceback(self, use_final: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """The best path so far: its arcs (int32, indices into the search arrays) and the
        frame each arc consumed or follows (int32; -1 for the start's epsilon arcs)."""
        last = self._last()
        if not len(last):
            return np.zeros(0, np.int32), np.zeros(0, np.int32)
        cost, _ = self._end_costs(last, use_final)
        tk = int(last[int(np.argmin(cost))])
        tok_frame, tok_prev, tok_arc = self.st[2], self.st[3], self.st[4]
        arcs, frames = [], []
        while tok_arc[tk] >= 0:
            arcs.append(tok_arc[tk])
            frames.append(tok_frame[tk] - 1)
            tk = tok_prev[tk]
        return np.array(arcs[::-1], np.int32), np.array(frames[::-1], np.int32)

    def result(self, final: bool = True) -> DecodeResult:
        """The best path over the frames so far (``final``: with final weights and, with
        ``lattice_beam``, the pruned lattice; otherwise a partial result without them)."""
        (tok_state, tok_cost, tok_frame, tok_prev, tok_arc, tok_ctx, l_src, l_dst, l_arc,
         l_ac, l_gx, _, ints, _, _) = self.st
        n_tok, n_link, T, g = int(ints[0]), int(ints[2]), self.T, self.g
        last = self._last()
        if not len(last):
            return DecodeResult([], np.zeros((0, 2), np.int32), float("inf"), float("inf"),
                                float("inf"), False, num_tokens=n_tok)
        end_cost, reached = self._end_costs(last, final)
        best_tok = int(last[int(np.argmin(end_cost))])
        total = float(end_cost.min())
        scores = self.scores[:T]
        words, frames, graph_cost, ac_cost = _best_path(best_tok, tok_prev, tok_arc, tok_frame,
                                                        g.ilabel, g.olabel, g.weight, scores,
                                                        self.ilabel_offset, self.wip, T)
        if self.context is not None:
            graph_cost = total - ac_cost  # graph weights, penalties and hotword costs
        elif reached:
            graph_cost += float(g.final[tok_state[best_tok]])
        result = DecodeResult(words.tolist(), frames, total, float(graph_cost), float(ac_cost),
                              reached, num_tokens=n_tok)
        if self.keep_links and final:
            tok_state, tok_cost, tok_frame = tok_state[:n_tok], tok_cost[:n_tok], \
                tok_frame[:n_tok]
            l_src, l_dst, l_arc, l_ac = l_src[:n_link], l_dst[:n_link], l_arc[:n_link], \
                l_ac[:n_link]
            l_graph = g.weight[l_arc] + np.where(g.olabel[l_arc] != 0, self.wip,
                                                 np.float32(0))
            if self.context is not None:
                l_graph = l_graph + l_gx[:n_link]
            l_cost = (l_graph + l_ac).astype(np.float32)
            end = np.full(n_tok, np.inf, np.float32)
            # cost to go from a last-frame token: its final weight (0 when no final was reached)
            end[last] = end_cost - tok_cost[last]
            beta = _backward_costs(n_tok, l_src, l_dst, l_cost, end)
            # alpha of a link's source + link + beta of its destination within the lattice beam
            keep = tok_cost[l_src] + l_cost + beta[l_dst] <= total + self.lattice_beam
            links = np.zeros(int(keep.sum()), LINK_DTYPE)
            links["src_tok"], links["dst_tok"] = l_src[keep], l_dst[keep]
            links["ilabel"], links["olabel"] = g.ilabel[l_arc[keep]], g.olabel[l_arc[keep]]
            links["graph_cost"], links["ac_cost"] = l_graph[keep], l_ac[keep]
            result.lattice_links = links
            ends = last[np.isfinite(end_cost) & (end_cost <= total + self.lattice_beam)]
            result.lattice_final = dict(zip(ends.tolist(),
                                            end[ends].astype(np.float64).tolist()))
            result.lattice_tok_frame = tok_frame.copy()  # not a view of the grown buffer
        return result


def viterbi_decode(graph: GraphArrays, log_likelihoods, beam: float = 16.0,
                   max_active: int = 7000, min_active: int = 200, acoustic_scale: float = 1.0,
                   word_insertion_penalty: float = 0.0, ilabel_offset: int = 1,
                   lattice_beam: float | None = None, beam_delta: float = 0.5,
                   context=None) -> DecodeResult:
    """Decode one utterance.

    Args:
        graph: the decoding graph (e.g. TLG) as CSR arrays.
        log_likelihoods: ``[T, C]`` natural-log scores (array or decodable); column
            ``ilabel - ilabel_offset`` scores input label ``ilabel``.
        beam, max_active, min_active: search pruning (cost units, token counts per frame).
        acoustic_scale: multiplies the scores.
        word_insertion_penalty: cost added per output word.
        lattice_beam: if given, keep the raw lattice pruned to this beam in the result (the
            search then stores every expansion; without it only back-pointers are kept).
        beam_delta: added to the adapted beam when ``max_active``/``min_active`` bind (Kaldi's
            ``--beam-delta``).
        context: hotwords, a ``ContextGraph`` over word ids (``asrkit.decoders.context_graph``).
    Returns:
        A ``DecodeResult``.
    """
    search = ViterbiSearch(graph, beam, max_active, min_active, acoustic_scale,
                           word_insertion_penalty, ilabel_offset, lattice_beam, beam_delta,
                           context)
    search.advance(log_likelihoods)
    return search.result()
