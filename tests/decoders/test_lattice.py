"""Lattice n-best against brute-force enumeration of the search graph's paths."""

import numpy as np
import pytest

from asrkit.decoders.lattice import nbest, nbest_split, split_costs, token_lattice
from asrkit.decoders.viterbi import GraphArrays, viterbi_decode


def _word_loop():
    # words 1..3, each one token (ilabel = word + 1, column = word); blank column 0 (ilabel 1)
    arcs = [(0, 0, 1, 0, 0.0)]
    for w in (1, 2, 3):
        arcs += [(0, w, w + 1, w, 0.3 * w), (w, w, w + 1, 0, 0.0), (w, 0, 1, 0, 0.0)]
        arcs += [(w, v, v + 1, v, 0.3 * v) for v in (1, 2, 3) if v != w]
    return GraphArrays.from_arcs(4, 0, arcs, {s: 0.0 for s in range(4)}), arcs


def _brute_force_word_costs(arcs, scores):
    """min cost per word sequence over all paths of exactly T emitting arcs (no epsilons)."""
    by_src = {}
    for a in arcs:
        by_src.setdefault(a[0], []).append(a)
    best = {}
    frontier = {(0, ()): 0.0}
    for t in range(scores.shape[0]):
        nxt = {}
        for (s, words), c in frontier.items():
            for _, d, il, ol, w in by_src.get(s, []):
                key = (d, words + ((ol,) if ol else ()))
                cost = c + w - scores[t, il - 1]
                nxt[key] = min(nxt.get(key, np.inf), cost)
        frontier = nxt
    for (_s, words), c in frontier.items():
        best[words] = min(best.get(words, np.inf), c)
    return best


@pytest.mark.parametrize("seed", range(5))
def test_nbest_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    graph, arcs = _word_loop()
    scores = np.log(rng.dirichlet(np.ones(4) * 0.5, size=5)).astype(np.float32)
    res = viterbi_decode(graph, scores, beam=1e6, lattice_beam=1e6)
    exact = _brute_force_word_costs(arcs, scores)
    ranked = sorted(exact.items(), key=lambda kv: kv[1])[:5]
    got = nbest(res, 5)
    assert got[0][0] == res.words
    assert got[0][1] == pytest.approx(res.cost, abs=1e-4)
    for (words, cost), (_ew, ec) in zip(got, ranked):
        assert cost == pytest.approx(ec, abs=1e-4)
        assert exact[tuple(words)] == pytest.approx(cost, abs=1e-4)
    assert len({tuple(w) for w, _ in got}) == len(got)  # distinct word sequences


def test_lattice_needs_lattice_beam():
    graph, _ = _word_loop()
    res = viterbi_decode(graph, np.zeros((2, 4), np.float32))
    with pytest.raises(ValueError, match="lattice_beam"):
        token_lattice(res)


def _brute_force_split(arcs, scores, acoustic_scale):
    """word sequence -> (graph cost, scaled acoustic cost) of its best path (T emitting arcs)."""
    by_src = {}
    for a in arcs:
        by_src.setdefault(a[0], []).append(a)
    frontier = {(0, ()): (0.0, 0.0)}
    for t in range(scores.shape[0]):
        nxt = {}
        for (s, words), (g, ac) in frontier.items():
            for _, d, il, ol, w in by_src.get(s, []):
                key = (d, words + ((ol,) if ol else ()))
                cand = (g + w, ac - acoustic_scale * scores[t, il - 1])
                if key not in nxt or sum(cand) < sum(nxt[key]):
                    nxt[key] = cand
        frontier = nxt
    best = {}
    for (_s, words), split in frontier.items():
        if words not in best or sum(split) < sum(best[words]):
            best[words] = split
    return best


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("acoustic_scale", [1.0, 0.5])
def test_nbest_split_sums_to_cost_and_matches_brute_force(seed, acoustic_scale):
    rng = np.random.default_rng(seed)
    graph, arcs = _word_loop()
    scores = np.log(rng.dirichlet(np.ones(4) * 0.5, size=5)).astype(np.float32)
    res = viterbi_decode(graph, scores, beam=1e6, lattice_beam=1e6,
                         acoustic_scale=acoustic_scale, word_insertion_penalty=0.25)
    exact = _brute_force_split([(s, d, il, ol, w + (0.25 if ol else 0.0))
                                for s, d, il, ol, w in arcs], scores, acoustic_scale)
    got = nbest_split(res, 6)
    totals = nbest(res, 6)
    assert [e.words for e in got] == [w for w, _ in totals]
    assert got[0].graph_cost == pytest.approx(res.graph_cost, abs=1e-4)
    assert got[0].ac_cost == pytest.approx(res.acoustic_cost, abs=1e-4)
    for entry, (_w, total) in zip(got, totals):
        assert entry.cost == pytest.approx(total, abs=1e-4)
        g, ac = exact[tuple(entry.words)]
        assert entry.graph_cost == pytest.approx(g, abs=1e-4)
        assert entry.ac_cost == pytest.approx(ac, abs=1e-4)
        assert entry.graph_cost >= 0 and entry.ac_cost > 0


def test_split_costs_of_a_sequence_not_in_the_lattice():
    graph, _ = _word_loop()
    scores = np.log(np.full((2, 4), 0.25, np.float32))
    res = viterbi_decode(graph, scores, beam=1e6, lattice_beam=1e6)
    with pytest.raises(ValueError, match=r"no path with words \[1, 2, 3\]"):
        split_costs(res, [1, 2, 3])  # three words need three frames
