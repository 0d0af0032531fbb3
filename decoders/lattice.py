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
    used = np.unique(np.concatenate([[0], links["src_tok"], links["dst_tok"],
                                     np.fromiter(result.lattice_final, np.int64)]))
    index = {int(t): i for i, t in enumerate(used)}
    src = np.array([index[int(t)] for t in links["src_tok"]], np.int32)
    dst = np.array([index[int(t)] for t in links["dst_tok"]], np.int32)
    weight = links["graph_cost"].astype(np.float64) + acoustic_scale * \
        links["ac_cost"].astype(np.float64)
    final = np.full(len(used), np.inf)
    for tok, w in result.lattice_final.items():
        final[index[tok]] = w
    return Fst(len(used), index[0], final, src, dst, links["ilabel"], links["olabel"], weight)


def word_lattice(result: DecodeResult, acoustic_scale: float = 1.0) -> Fst:
    """A deterministic word acceptor: one path per word sequence, weighted by its best cost."""
    words = project(token_lattice(result, acoustic_scale), "output")
    return determinize(rmepsilon(words))


def nbest(result: DecodeResult, n: int = 10,
          acoustic_scale: float = 1.0) -> list[tuple[list[int], float]]:
    """The ``n`` best distinct word sequences as (word ids, cost), best first."""
    lat = word_lattice(result, acoustic_scale)
    out = []
    for arcs, final_w in nbest_paths(lat, n):
        words = [int(lat.olabel[a]) for a in arcs if lat.olabel[a] != 0]
        out.append((words, float(sum(float(lat.weight[a]) for a in arcs) + final_w)))
    return out
