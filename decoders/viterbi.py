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
import threading

import numba
import numpy as np

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
def _search(offsets, emit_begin, dst, ilabel, olabel, weight, start, scores, ilabel_offset,
            beam, max_active, min_active, beam_delta, wip, keep_links, state2tok):
    """The frame-synchronous search; see the module docstring. ``state2tok`` int32[S] must be
    all -1; it is all -1 again on return.

    Returns tokens (state, cost, frame, previous token, arc), the first token of the last
    frame, and, with ``keep_links``, every expansion as links (src token, dst token, arc,
    acoustic cost); otherwise the link arrays are empty.
    """
    num_states = offsets.shape[0] - 1
    T = scores.shape[0]
    C = scores.shape[1]
    cap = 1024
    tok_state = np.empty(cap, np.int32)
    tok_cost = np.empty(cap, np.float32)
    tok_frame = np.empty(cap, np.int32)
    tok_prev = np.empty(cap, np.int32)
    tok_arc = np.empty(cap, np.int32)
    cap_l = 4096 if keep_links else 1
    l_src = np.empty(cap_l, np.int32)
    l_dst = np.empty(cap_l, np.int32)
    l_arc = np.empty(cap_l, np.int32)
    l_ac = np.empty(cap_l, np.float32)
    n_link = 0
    queue = np.empty(256, np.int32)

    tok_state[0] = start
    tok_cost[0] = 0.0
    tok_frame[0] = 0
    tok_prev[0] = -1
    tok_arc[0] = -1
    n_tok = 1
    state2tok[start] = 0
    frame_begin = 0
    adaptive_beam = beam
    for t in range(T + 1):
        new_begin = n_tok
        # a frame holds at most one token per state: growing here, outside the arc loops,
        # keeps the arrays fixed inside them (numba then keeps their pointers in registers)
        if n_tok + num_states > tok_state.shape[0]:
            tok_state = _grow(tok_state, n_tok + num_states, n_tok)
            tok_cost = _grow(tok_cost, n_tok + num_states, n_tok)
            tok_frame = _grow(tok_frame, n_tok + num_states, n_tok)
            tok_prev = _grow(tok_prev, n_tok + num_states, n_tok)
            tok_arc = _grow(tok_arc, n_tok + num_states, n_tok)
        if t > 0:
            # -- emitting arcs: tokens of frame t - 1 -> new tokens of frame t --------------
            cutoff, adaptive_beam, best_tok = _cutoff(tok_cost, frame_begin, n_tok, beam,
                                                      max_active, min_active, beam_delta)
            if best_tok < 0:
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
                    if olabel[a] != 0:
                        c += wip
                    if c >= next_cutoff:
                        continue
                    d = dst[a]
                    nt = state2tok[d]
                    if nt < 0:
                        nt = n_tok
                        n_tok += 1
                        tok_state[nt] = d
                        tok_cost[nt] = INF
                        tok_frame[nt] = t
                        state2tok[d] = nt
                    if keep_links:
                        if n_link >= l_src.shape[0]:
                            l_src = _grow(l_src, n_link, n_link)
                            l_dst = _grow(l_dst, n_link, n_link)
                            l_arc = _grow(l_arc, n_link, n_link)
                            l_ac = _grow(l_ac, n_link, n_link)
                        l_src[n_link] = tk
                        l_dst[n_link] = nt
                        l_arc[n_link] = a
                        l_ac[n_link] = ac
                        n_link += 1
                    if c < tok_cost[nt]:
                        tok_cost[nt] = c
                        tok_prev[nt] = tk
                        tok_arc[nt] = a
                        if c + adaptive_beam < next_cutoff:
                            next_cutoff = c + adaptive_beam
            if n_tok == new_begin:
                frame_begin = new_begin
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
                if olabel[a] != 0:
                    c += wip
                if c >= eps_cutoff:
                    continue
                d = dst[a]
                nt = state2tok[d]
                if nt < 0:
                    nt = n_tok
                    n_tok += 1
                    tok_state[nt] = d
                    tok_cost[nt] = INF
                    tok_frame[nt] = t
                    state2tok[d] = nt
                if keep_links:
                    if n_link >= l_src.shape[0]:
                        l_src = _grow(l_src, n_link, n_link)
                        l_dst = _grow(l_dst, n_link, n_link)
                        l_arc = _grow(l_arc, n_link, n_link)
                        l_ac = _grow(l_ac, n_link, n_link)
                    l_src[n_link] = tk
                    l_dst[n_link] = nt
                    l_arc[n_link] = a
                    l_ac[n_link] = 0.0
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
    return (tok_state[:n_tok], tok_cost[:n_tok], tok_frame[:n_tok], tok_prev[:n_tok],
            tok_arc[:n_tok], frame_begin, l_src[:n_link], l_dst[:n_link], l_arc[:n_link],
            l_ac[:n_link])


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


def viterbi_decode(graph: GraphArrays, log_likelihoods, beam: float = 16.0,
                   max_active: int = 7000, min_active: int = 200, acoustic_scale: float = 1.0,
                   word_insertion_penalty: float = 0.0, ilabel_offset: int = 1,
                   lattice_beam: float | None = None, beam_delta: float = 0.5) -> DecodeResult:
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
    Returns:
        A ``DecodeResult``.
    """
    from asrkit.decoders.options import count, finite

    beam = finite("beam", beam, 0.0, strict=True)
    max_active, min_active = count("max_active", max_active), count("min_active", min_active, 0)
    acoustic_scale = finite("acoustic_scale", acoustic_scale, 0.0, strict=True)
    word_insertion_penalty = finite("word_insertion_penalty", word_insertion_penalty)
    beam_delta = finite("beam_delta", beam_delta, 0.0)
    if lattice_beam is not None:
        lattice_beam = finite("lattice_beam", lattice_beam, 0.0, strict=True)
    scores = as_matrix(log_likelihoods, acoustic_scale)
    T = scores.shape[0]
    g = graph.search_arrays()
    keep_links = lattice_beam is not None
    wip = np.float32(word_insertion_penalty)
    try:
        (tok_state, tok_cost, tok_frame, tok_prev, tok_arc, last_begin, l_src, l_dst, l_arc,
         l_ac) = _search(g.offsets, g.emit_begin, g.dst, g.ilabel, g.olabel, g.weight, g.start,
                         scores, ilabel_offset, np.float32(beam), int(max_active),
                         int(min_active), np.float32(beam_delta), wip, keep_links, g.state_map())
    except BaseException:
        g.drop_state_map()  # an interrupted search may leave entries set
        raise
    last = np.arange(last_begin, len(tok_state))
    if len(last) == 0 or tok_frame[last[0]] != T:
        return DecodeResult([], np.zeros((0, 2), np.int32), float("inf"), float("inf"),
                            float("inf"), False, num_tokens=len(tok_state))
    with_final = tok_cost[last] + g.final[tok_state[last]]
    reached = bool(np.isfinite(with_final).any())
    end_cost = with_final if reached else tok_cost[last]
    best_tok = int(last[int(np.argmin(end_cost))])
    total = float(end_cost.min())
    words, frames, graph_cost, ac_cost = _best_path(best_tok, tok_prev, tok_arc, tok_frame,
                                                    g.ilabel, g.olabel, g.weight, scores,
                                                    ilabel_offset, wip, T)
    if reached:
        graph_cost += float(g.final[tok_state[best_tok]])
    result = DecodeResult(words.tolist(), frames, total, float(graph_cost), float(ac_cost),
                          reached, num_tokens=len(tok_state))
    if keep_links:
        l_graph = g.weight[l_arc] + np.where(g.olabel[l_arc] != 0, wip, np.float32(0))
        l_cost = (l_graph + l_ac).astype(np.float32)
        end = np.full(len(tok_state), np.inf, np.float32)
        # cost to go from a last-frame token: its final weight (0 when no final was reached)
        end[last] = end_cost - tok_cost[last]
        beta = _backward_costs(len(tok_state), l_src, l_dst, l_cost, end)
        # alpha of a link's source + link + beta of its destination within the lattice beam
        keep = tok_cost[l_src] + l_cost + beta[l_dst] <= total + lattice_beam
        links = np.zeros(int(keep.sum()), LINK_DTYPE)
        links["src_tok"], links["dst_tok"] = l_src[keep], l_dst[keep]
        links["ilabel"], links["olabel"] = g.ilabel[l_arc[keep]], g.olabel[l_arc[keep]]
        links["graph_cost"], links["ac_cost"] = l_graph[keep], l_ac[keep]
        result.lattice_links = links
        ends = last[np.isfinite(end_cost) & (end_cost <= total + lattice_beam)]
        result.lattice_final = dict(zip(ends.tolist(), end[ends].astype(np.float64).tolist()))
        result.lattice_tok_frame = tok_frame.copy()  # not a view of the grown buffer
    return result
