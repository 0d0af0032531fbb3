"""Lattices from the Viterbi search: token lattice -> word lattice -> n-best word sequences.

The search keeps every link within ``lattice_beam`` of the best path (``DecodeResult``). As an FST
its states are the search's tokens, its arcs the links (input: token label, output: word label,
weight: graph + acoustic cost). Projecting on the words, removing epsilons and determinising in the
tropical semiring leaves one path per distinct word sequence with its best cost (Kaldi's
``lattice-determinize`` followed by ``lattice-to-nbest``, without keeping alignments).

Kaldi keeps lattice weights as (graph cost, acoustic cost) pairs; here the determinisation runs on
the summed cost, and each n-best word sequence's split is then recovered exactly as the two parts
of its best token path (``nbest_split``: a best-path search through the token lattice constrained
to the sequence's words), so ``graph_cost + ac_cost`` is the sequence's cost.
"""

from __future__ import annotations

import dataclasses

import numba
import numpy as np

from asrkit.decoders.fst import Fst, determinize, nbest_paths, project, rmepsilon
from asrkit.decoders.viterbi import DecodeResult


def _lattice_states(result: DecodeResult):
    """The token lattice's states: tokens in use renumbered in token order (token 0, the start,
    first). Returns (num_states, start, src int32[L], dst int32[L], final float64[S])."""
    links = result.lattice_links
    if links is None:
        raise ValueError("the result holds no lattice: decode with lattice_beam=...")
    n = len(links)
    finals = np.fromiter(result.lattice_final, np.int64, len(result.lattice_final))
    used, inverse = np.unique(np.concatenate([[0], links["src_tok"], links["dst_tok"], finals]),
                              return_inverse=True)
    src = inverse[1: n + 1].astype(np.int32)
    dst = inverse[n + 1: 2 * n + 1].astype(np.int32)
    final = np.full(len(used), np.inf)
    final[inverse[2 * n + 1:]] = np.fromiter(result.lattice_final.values(), np.float64,
                                             len(finals))
    return len(used), int(inverse[0]), src, dst, final


def token_lattice(result: DecodeResult, acoustic_scale: float = 1.0) -> Fst:
    """The raw lattice as an ``Fst`` (tokens -> words); needs ``viterbi_decode(lattice_beam=)``.

    ``acoustic_scale`` rescales the acoustic part of each arc's cost (for lattice rescoring with
    another scale than the search used).
    """
    num_states, start, src, dst, final = _lattice_states(result)
    links = result.lattice_links
    weight = links["graph_cost"].astype(np.float64) + acoustic_scale * \
        links["ac_cost"].astype(np.float64)
    return Fst(num_states, start, final, src, dst, links["ilabel"], links["olabel"], weight)


# Beyond these the word lattice is too ambiguous to determinise cheaply (an uncertain
# utterance has exponentially many word sequences within the lattice beam).
MAX_LINKS = 4000        # links of the token lattice (epsilon removal grows with them)
MAX_WORD_ARCS = 20000   # arcs of the epsilon-free word lattice
MAX_DET_STATES = 2000   # states of its determinisation


def word_lattice(result: DecodeResult, acoustic_scale: float = 1.0,
                 max_states: int | None = MAX_DET_STATES) -> Fst:
    """A deterministic word acceptor: one path per word sequence, weighted by its best cost.

    Raises ValueError when determinisation would exceed ``max_states`` states (a very uncertain
    utterance has exponentially many word sequences within the lattice beam).
    """
    if max_states is not None and len(result.lattice_links) > MAX_LINKS:
        raise ValueError(f"token lattice has {len(result.lattice_links)} links (> {MAX_LINKS})")
    words = rmepsilon(project(token_lattice(result, acoustic_scale), "output"))
    if max_states is not None and words.num_arcs > MAX_WORD_ARCS:
        raise ValueError(f"word lattice has {words.num_arcs} arcs (> {MAX_WORD_ARCS})")
    return determinize(words, max_states=max_states)


def _paths_nbest(result: DecodeResult, n: int, acoustic_scale: float,
                 paths_per_hyp: int = 16) -> list[tuple[list[int], float]]:
    """Distinct word sequences among the ``n * paths_per_hyp`` best token paths (bounded work;
    may return fewer than ``n`` when many paths share their words)."""
    tok = token_lattice(result, acoustic_scale)
    best: dict[tuple, float] = {}
    for arcs, final_w in nbest_paths(tok, n * paths_per_hyp):
        words = tuple(int(tok.olabel[a]) for a in arcs if tok.olabel[a] != 0)
        cost = float(sum(float(tok.weight[a]) for a in arcs) + final_w)
        if words not in best:
            best[words] = cost
            if len(best) == n:
                break
    return [(list(w), c) for w, c in best.items()]


def nbest(result: DecodeResult, n: int = 10,
          acoustic_scale: float = 1.0) -> list[tuple[list[int], float]]:
    """The ``n`` best distinct word sequences as (word ids, cost), best first.

    Exact through the determinised word lattice; when that lattice is too big or too ambiguous
    (``MAX_LINKS``, ``MAX_WORD_ARCS``, ``MAX_DET_STATES``), the distinct sequences among the best
    token paths instead.
    """
    try:
        lat = word_lattice(result, acoustic_scale)
    except ValueError:
        return _paths_nbest(result, n, acoustic_scale)
    out = []
    for arcs, final_w in nbest_paths(lat, n):
        words = [int(lat.olabel[a]) for a in arcs if lat.olabel[a] != 0]
        out.append((words, float(sum(float(lat.weight[a]) for a in arcs) + final_w)))
    return out


@dataclasses.dataclass
class NbestEntry:
    """One n-best word sequence with its cost split as Kaldi's lattices keep it.

    ``graph_cost``: the graph's part of the path (LM, lexicon, word insertion penalty, final
    weight); ``ac_cost``: the acoustic part, *already scaled* by the search's acoustic scale (and
    by ``nbest_split``'s ``acoustic_scale``), so ``cost == graph_cost + ac_cost``. Natural log.
    """

    words: list[int]
    graph_cost: float
    ac_cost: float

    @property
    def cost(self) -> float:
        """The path's total cost, ``graph_cost + ac_cost``."""
        return self.graph_cost + self.ac_cost


@numba.njit(cache=True)
def _constrained_best(num_states, start, src, dst, olabel, g_cost, a_cost, final, seq,
                      max_sweeps):
    """Best path through the token lattice whose words are ``seq``: a relaxation over states
    (token, words consumed) in link order (links are in creation order, so one sweep nearly
    always suffices; repeated to a fixpoint for epsilon links within a frame). Returns
    (graph cost, acoustic cost), inf when no such path exists."""
    m = seq.shape[0]
    best = np.full((num_states, m + 1), np.inf)
    g = np.zeros((num_states, m + 1))
    a = np.zeros((num_states, m + 1))
    best[start, 0] = 0.0
    for _ in range(max_sweeps):
        changed = False
        for i in range(src.shape[0]):
            s = src[i]
            d = dst[i]
            w = olabel[i]
            for k in range(m + 1):
                if best[s, k] == np.inf:
                    continue
                nk = k
                if w != 0:
                    if k == m or seq[k] != w:
                        continue
                    nk = k + 1
                c = best[s, k] + g_cost[i] + a_cost[i]
                if c < best[d, nk] - 1e-9:
                    best[d, nk] = c
                    g[d, nk] = g[s, k] + g_cost[i]
                    a[d, nk] = a[s, k] + a_cost[i]
                    changed = True
        if not changed:
            break
    top = np.inf
    bg = np.inf
    ba = np.inf
    for s in range(num_states):
        c = best[s, m] + final[s]
        if c < top:
            top = c
            bg = g[s, m] + final[s]
            ba = a[s, m]
    return bg, ba


def split_costs(result: DecodeResult, words: list[int],
                acoustic_scale: float = 1.0) -> tuple[float, float]:
    """(graph cost, acoustic cost) of the best lattice path with output ``words`` (word ids);
    the acoustic part is scaled as in ``token_lattice``. Raises ValueError when the lattice has
    no path with these words."""
    num_states, start, src, dst, final = _lattice_states(result)
    links = result.lattice_links
    g_cost = links["graph_cost"].astype(np.float64)
    a_cost = acoustic_scale * links["ac_cost"].astype(np.float64)
    seq = np.asarray(words, np.int32)
    g, a = _constrained_best(num_states, start, src, dst, links["olabel"].astype(np.int32),
                             g_cost, a_cost, final, seq, len(src) + 1)
    if not np.isfinite(g + a):
        raise ValueError(f"the lattice has no path with words {list(words)}")
    return float(g), float(a)


def nbest_split(result: DecodeResult, n: int = 10,
                acoustic_scale: float = 1.0) -> list[NbestEntry]:
    """The ``n`` best distinct word sequences (as :func:`nbest`), each with its cost split into
    graph and acoustic parts (:class:`NbestEntry`), best first."""
    out = []
    for words, _cost in nbest(result, n, acoustic_scale):
        g, a = split_costs(result, words, acoustic_scale)
        out.append(NbestEntry(words, g, a))
    return out
