"""Lattices from the Viterbi search: token lattice -> word lattice -> n-best word sequences.

The search keeps every link within ``lattice_beam`` of the best path (``DecodeResult``). As an FST
its states are the search's tokens, its arcs the links (input: token label, output: word label,
weight: graph + acoustic cost). Projecting on the words, removing epsilons and determinising in the
tropical semiring leaves one path per distinct word sequence with its best cost (Kaldi's
``lattice-determinize`` followed by ``lattice-to-nbest``, without keeping alignments).
"""

from __future__ import annotations

import numpy as np

from asrkit.decoders.fst import Fst, determinize, nbest_paths, project, rmepsilon
from asrkit.decoders.viterbi import DecodeResult


def token_lattice(result: DecodeResult, acoustic_scale: float = 1.0) -> Fst:
    """The raw lattice as an ``Fst`` (tokens -> words); needs ``viterbi_decode(lattice_beam=)``.

    ``acoustic_scale`` rescales the acoustic part of each arc's cost (for lattice rescoring with
    another scale than the search used).
    """
    links = result.lattice_links
    if links is None:
        raise ValueError("the result holds no lattice: decode with lattice_beam=...")
    n = len(links)
    finals = np.fromiter(result.lattice_final, np.int64, len(result.lattice_final))
    # states are the tokens in use, renumbered in token order (token 0, the start, first)
    used, inverse = np.unique(np.concatenate([[0], links["src_tok"], links["dst_tok"], finals]),
                              return_inverse=True)
    src = inverse[1: n + 1].astype(np.int32)
    dst = inverse[n + 1: 2 * n + 1].astype(np.int32)
    weight = links["graph_cost"].astype(np.float64) + acoustic_scale * \
        links["ac_cost"].astype(np.float64)
    final = np.full(len(used), np.inf)
    final[inverse[2 * n + 1:]] = np.fromiter(result.lattice_final.values(), np.float64,
                                             len(finals))
    return Fst(len(used), int(inverse[0]), final, src, dst, links["ilabel"], links["olabel"],
               weight)


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
