"""Token-passing Viterbi beam search over a decoding graph (Kaldi's lattice-faster decoder, lean).

The graph is given as CSR arrays (``GraphArrays``): for each state its arcs' destination, input
label (token id + ``ilabel_offset``; 0 = epsilon), output label (word id; 0 = none) and weight
(a cost, -ln). Scores come from a decodable or a ``[T, C]`` matrix of log-likelihoods (natural log,
acoustic scale applied by the caller or by ``acoustic_scale``).

Per frame the search expands every surviving token along the emitting arcs, keeps those within
``beam`` of the frame's best (and at most ``max_active`` of them), then follows epsilon arcs. Each
expansion is a *link* (from-token, to-token, labels, graph and acoustic cost) kept for the whole
utterance, so the result holds the 1-best path with word times and a raw token lattice that is
pruned with ``lattice_beam`` (see ``DecodeResult.lattice_links``).

``word_insertion_penalty`` is added to the cost of every arc with a word on its output side.
The inner loop is numba-compiled.
"""

from __future__ import annotations

import dataclasses

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


@dataclasses.dataclass
class DecodeResult:
    """What one utterance's search found.

    Attributes:
        words: output labels of the best path (word ids, epsilons removed).
        word_frames: int32 [n, 2]: first and last frame of each word's tokens on the best path.
        cost: total cost of the best path (graph + acoustic, -ln), final weight included.
        graph_cost, acoustic_cost: its two parts.
        reached_final: False when no final state survived (the best partial path is returned).
        lattice_links: structured array of the pruned raw lattice's links (fields src_tok,
            dst_tok, ilabel, olabel, graph_cost, ac_cost), token 0 = start; lattice_final: dict
            token -> final weight (0 when no final state was reached); lattice_tok_frame: int32
            frame of each token. Read as an FST (states = tokens), its best path is the 1-best.
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


LINK_DTYPE = np.dtype([("src_tok", np.int32), ("dst_tok", np.int32), ("ilabel", np.int32),
                       ("olabel", np.int32), ("graph_cost", np.float32),
                       ("ac_cost", np.float32)])


@numba.njit(cache=True)
def _grow_i(a, n):
    if n < a.shape[0]:
        return a
    b = np.empty(max(2 * a.shape[0], n + 1), a.dtype)
    b[: a.shape[0]] = a
    return b


@numba.njit(cache=True)
def _search(offsets, dst, ilabel, olabel, weight, final, start, scores, ilabel_offset,
            beam, max_active, min_active, wip):
    """Returns token arrays (state, cost, frame, best_link) and link arrays."""
    num_states = final.shape[0]
    T = scores.shape[0]
    C = scores.shape[1]
    cap_t = 1024
    tok_state = np.empty(cap_t, np.int32)
    tok_cost = np.empty(cap_t, np.float32)
    tok_frame = np.empty(cap_t, np.int32)
    tok_best = np.empty(cap_t, np.int32)
    cap_l = 4096
    l_src = np.empty(cap_l, np.int32)
    l_dst = np.empty(cap_l, np.int32)
    l_arc = np.empty(cap_l, np.int64)
    l_ac = np.empty(cap_l, np.float32)
    n_tok = 0
    n_link = 0
    state2tok = np.full(num_states, -1, np.int32)
    # start token
    tok_state[0] = start
    tok_cost[0] = 0.0
    tok_frame[0] = 0
    tok_best[0] = -1
    n_tok = 1
    frame_begin = 0
    state2tok[start] = 0
    # epsilon closure of the start token (frame 0, before any emission)
    queue = np.empty(64, np.int32)
    qn = 0
    queue[0] = 0
    qn = 1
    while qn > 0:
        qn -= 1
        tk = queue[qn]
        s = tok_state[tk]
        for a in range(offsets[s], offsets[s + 1]):
            if ilabel[a] != 0:
                continue
            c = tok_cost[tk] + weight[a] + (wip if olabel[a] != 0 else 0.0)
            d = dst[a]
            nt = state2tok[d]
            if nt < 0:
                tok_state = _grow_i(tok_state, n_tok)
                tok_cost = _grow_i(tok_cost, n_tok)
                tok_frame = _grow_i(tok_frame, n_tok)
                tok_best = _grow_i(tok_best, n_tok)
                nt = n_tok
                n_tok += 1
                tok_state[nt] = d
                tok_cost[nt] = INF
                tok_frame[nt] = 0
                tok_best[nt] = -1
                state2tok[d] = nt
            l_src = _grow_i(l_src, n_link)
            l_dst = _grow_i(l_dst, n_link)
            l_arc = _grow_i(l_arc, n_link)
            l_ac = _grow_i(l_ac, n_link)
            l_src[n_link] = tk
            l_dst[n_link] = nt
            l_arc[n_link] = a
            l_ac[n_link] = 0.0
            if c < tok_cost[nt]:
                tok_cost[nt] = c
                tok_best[nt] = n_link
                queue = _grow_i(queue, qn)
                queue[qn] = nt
                qn += 1
            n_link += 1
    frame_end = n_tok
    for i in range(frame_begin, frame_end):
        state2tok[tok_state[i]] = -1

    for t in range(T):
        # cutoff among the previous frame's tokens
        n_prev = frame_end - frame_begin
        costs = tok_cost[frame_begin:frame_end].copy()
        best = costs.min() if n_prev > 0 else INF
        cutoff = best + beam
        if n_prev > max_active:
            cutoff = min(cutoff, np.sort(costs)[max_active - 1])
        elif n_prev > min_active:
            pass  # Kaldi widens the beam up to min_active tokens; the beam is kept fixed here
        new_begin = n_tok
        next_best = INF
        for tk in range(frame_begin, frame_end):
            tc = tok_cost[tk]
            if tc > cutoff:
                continue
            s = tok_state[tk]
            for a in range(offsets[s], offsets[s + 1]):
                il = ilabel[a]
                if il == 0:
                    continue
                col = il - ilabel_offset
                if col < 0 or col >= C:
                    continue
                ac = -scores[t, col]
                c = tc + weight[a] + ac + (wip if olabel[a] != 0 else 0.0)
                if c > next_best + beam:
                    continue
                d = dst[a]
                nt = state2tok[d]
                if nt < 0:
                    tok_state = _grow_i(tok_state, n_tok)
                    tok_cost = _grow_i(tok_cost, n_tok)
                    tok_frame = _grow_i(tok_frame, n_tok)
                    tok_best = _grow_i(tok_best, n_tok)
                    nt = n_tok
                    n_tok += 1
                    tok_state[nt] = d
                    tok_cost[nt] = INF
                    tok_frame[nt] = t + 1
                    tok_best[nt] = -1
                    state2tok[d] = nt
                l_src = _grow_i(l_src, n_link)
                l_dst = _grow_i(l_dst, n_link)
                l_arc = _grow_i(l_arc, n_link)
                l_ac = _grow_i(l_ac, n_link)
                l_src[n_link] = tk
                l_dst[n_link] = nt
                l_arc[n_link] = a
                l_ac[n_link] = ac
                if c < tok_cost[nt]:
                    tok_cost[nt] = c
                    tok_best[nt] = n_link
                    if c < next_best:
                        next_best = c
                n_link += 1
        # epsilon arcs among the new frame's tokens
        qn = 0
        for tk in range(new_begin, n_tok):
            queue = _grow_i(queue, qn)
            queue[qn] = tk
            qn += 1
        while qn > 0:
            qn -= 1
            tk = queue[qn]
            if tok_cost[tk] > next_best + beam:
                continue
            s = tok_state[tk]
            for a in range(offsets[s], offsets[s + 1]):
                if ilabel[a] != 0:
                    continue
                c = tok_cost[tk] + weight[a] + (wip if olabel[a] != 0 else 0.0)
                if c > next_best + beam:
                    continue
                d = dst[a]
                nt = state2tok[d]
                if nt < 0:
                    tok_state = _grow_i(tok_state, n_tok)
                    tok_cost = _grow_i(tok_cost, n_tok)
                    tok_frame = _grow_i(tok_frame, n_tok)
                    tok_best = _grow_i(tok_best, n_tok)
                    nt = n_tok
                    n_tok += 1
                    tok_state[nt] = d
                    tok_cost[nt] = INF
                    tok_frame[nt] = t + 1
                    tok_best[nt] = -1
                    state2tok[d] = nt
                l_src = _grow_i(l_src, n_link)
                l_dst = _grow_i(l_dst, n_link)
                l_arc = _grow_i(l_arc, n_link)
                l_ac = _grow_i(l_ac, n_link)
                l_src[n_link] = tk
                l_dst[n_link] = nt
                l_arc[n_link] = a
                l_ac[n_link] = 0.0
                n_link += 1
                if c < tok_cost[nt]:
                    tok_cost[nt] = c
                    tok_best[nt] = n_link - 1
                    queue = _grow_i(queue, qn)
                    queue[qn] = nt
                    qn += 1
        for i in range(new_begin, n_tok):
            state2tok[tok_state[i]] = -1
        frame_begin = new_begin
        frame_end = n_tok
    return (tok_state[:n_tok], tok_cost[:n_tok], tok_frame[:n_tok], tok_best[:n_tok],
            l_src[:n_link], l_dst[:n_link], l_arc[:n_link], l_ac[:n_link], frame_begin)


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
                   lattice_beam: float | None = None) -> DecodeResult:
    """Decode one utterance.

    Args:
        graph: the decoding graph (e.g. TLG) as CSR arrays.
        log_likelihoods: ``[T, C]`` natural-log scores (array or decodable); column
            ``ilabel - ilabel_offset`` scores input label ``ilabel``.
        beam, max_active, min_active: search pruning (cost units, token counts).
        acoustic_scale: multiplies the scores.
        word_insertion_penalty: cost added per output word.
        lattice_beam: if given, keep the raw lattice pruned to this beam in the result.
    Returns:
        A ``DecodeResult``.
    """
    scores = as_matrix(log_likelihoods, acoustic_scale)
    T = scores.shape[0]
    (tok_state, tok_cost, tok_frame, tok_best, l_src, l_dst, l_arc, l_ac,
     last_begin) = _search(graph.offsets, graph.dst, graph.ilabel, graph.olabel, graph.weight,
                           graph.final, graph.start, scores, ilabel_offset, np.float32(beam),
                           max_active, min_active, np.float32(word_insertion_penalty))
    last = np.arange(last_begin, len(tok_state))
    if len(last) == 0:
        return DecodeResult([], np.zeros((0, 2), np.int32), float("inf"), float("inf"),
                            float("inf"), False)
    with_final = tok_cost[last] + graph.final[tok_state[last]]
    reached = bool(np.isfinite(with_final).any())
    end_cost = np.where(np.isfinite(with_final), with_final, np.inf) if reached else \
        tok_cost[last]
    best_tok = int(last[int(np.argmin(end_cost))])
    total = float(end_cost.min())
    words, frames, graph_cost, ac_cost = [], [], 0.0, 0.0
    tk = best_tok
    path_links = []
    while tok_best[tk] >= 0:
        li = int(tok_best[tk])
        path_links.append(li)
        tk = int(l_src[li])
    path_links.reverse()
    for li in path_links:
        a = int(l_arc[li])
        graph_cost += float(graph.weight[a]) + (word_insertion_penalty
                                                if graph.olabel[a] != 0 else 0.0)
        ac_cost += float(l_ac[li])
        frame = int(tok_frame[l_dst[li]]) - 1  # the frame this link consumed (or follows)
        if graph.olabel[a] != 0:
            if words:
                frames[-1][1] = max(frames[-1][0], frame - 1 if graph.ilabel[a] else frame)
            words.append(int(graph.olabel[a]))
            frames.append([max(frame, 0), max(frame, 0)])
    if words:
        frames[-1][1] = max(frames[-1][0], T - 1)
    if reached:
        graph_cost += float(graph.final[tok_state[best_tok]])
    result = DecodeResult(words, np.array(frames, np.int32).reshape(-1, 2), total, graph_cost,
                          ac_cost, reached)
    if lattice_beam is not None:
        wip = np.float32(word_insertion_penalty)
        l_graph = graph.weight[l_arc] + np.where(graph.olabel[l_arc] != 0, wip, 0)
        l_cost = (l_graph + l_ac).astype(np.float32)
        end = np.full(len(tok_state), np.inf, np.float32)
        # cost to go from a last-frame token: its final weight (0 when no final was reached)
        end[last] = end_cost - tok_cost[last]
        beta = _backward_costs(len(tok_state), l_src, l_dst, l_cost, end)
        # alpha of a link's source + link + beta of its destination within the lattice beam
        keep = tok_cost[l_src] + l_cost + beta[l_dst] <= total + lattice_beam
        links = np.zeros(int(keep.sum()), LINK_DTYPE)
        links["src_tok"], links["dst_tok"] = l_src[keep], l_dst[keep]
        links["ilabel"], links["olabel"] = graph.ilabel[l_arc[keep]], graph.olabel[l_arc[keep]]
        links["graph_cost"], links["ac_cost"] = l_graph[keep], l_ac[keep]
        result.lattice_links = links
        result.lattice_final = {int(t): float(end[t]) for t, c in zip(last, end_cost)
                                if np.isfinite(c) and c <= total + lattice_beam}
        result.lattice_tok_frame = tok_frame
    return result
