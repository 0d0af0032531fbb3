"""Token-passing Viterbi search against an exact dynamic programme on random graphs."""

import numpy as np
import pytest

from asrkit.decoders.viterbi import GraphArrays, viterbi_decode


def _random_graph(rng, num_states=6, num_arcs=18, num_tokens=3, eps_fraction=0.2):
    arcs = []
    for _ in range(num_arcs):
        s, d = rng.integers(num_states, size=2)
        il = 0 if rng.random() < eps_fraction and d > s else int(rng.integers(1, num_tokens + 1))
        ol = int(rng.integers(0, 4))
        arcs.append((int(s), int(d), il, ol, float(rng.uniform(0, 2))))
    finals = {int(s): float(rng.uniform(0, 1)) for s in rng.choice(num_states, 2, replace=False)}
    return GraphArrays.from_arcs(num_states, 0, arcs, finals), arcs, finals


def _exact(num_states, arcs, finals, scores, wip=0.0):
    """Exact Viterbi: epsilon closure by Bellman-Ford after each frame."""

    def closure(cost):
        for _ in range(num_states + 1):
            changed = False
            for s, d, il, ol, w in arcs:
                if il == 0 and cost[s] + w + (wip if ol else 0) < cost[d] - 1e-9:
                    cost[d] = cost[s] + w + (wip if ol else 0)
                    changed = True
            if not changed:
                break
        return cost

    cost = np.full(num_states, np.inf)
    cost[0] = 0
    cost = closure(cost)
    for t in range(scores.shape[0]):
        new = np.full(num_states, np.inf)
        for s, d, il, ol, w in arcs:
            if il:
                new[d] = min(new[d], cost[s] + w + (wip if ol else 0) - scores[t, il - 1])
        cost = closure(new)
    return min(cost[s] + f for s, f in finals.items())


@pytest.mark.parametrize("seed", range(25))
def test_wide_beam_equals_exact_viterbi(seed):
    rng = np.random.default_rng(seed)
    graph, arcs, finals = _random_graph(rng)
    scores = np.log(rng.dirichlet(np.ones(3), size=int(rng.integers(1, 7)))).astype(np.float32)
    expect = _exact(graph.num_states, arcs, finals, scores, wip=0.5)
    res = viterbi_decode(graph, scores, beam=1e9, max_active=10**6,
                         word_insertion_penalty=0.5, lattice_beam=5.0)
    if not np.isfinite(expect):
        assert not res.reached_final
        return
    assert res.reached_final
    assert res.cost == pytest.approx(expect, rel=1e-5, abs=1e-4)
    assert res.graph_cost + res.acoustic_cost == pytest.approx(res.cost, rel=1e-5, abs=1e-4)
    # the lattice, read as an FST over tokens, keeps the best path
    links = res.lattice_links
    alpha = {0: 0.0}
    for _ in range(len(links) + 1):  # Bellman-Ford over the (acyclic but unordered) links
        for l in links:
            if l["src_tok"] in alpha:
                c = alpha[l["src_tok"]] + l["graph_cost"] + l["ac_cost"]
                if c < alpha.get(l["dst_tok"], np.inf) - 1e-7:
                    alpha[l["dst_tok"]] = c
    best = min(alpha[t] + f for t, f in res.lattice_final.items() if t in alpha)
    assert best == pytest.approx(expect, rel=1e-5, abs=1e-4)


def test_word_loop_recovers_the_spoken_words():
    # two one-token words in a loop: state 0 --tok1:w1--> 0, --tok2:w2--> 0, blank self-loop
    arcs = [(0, 0, 1, 0, 0.0), (0, 1, 2, 1, 0.0), (0, 2, 3, 2, 0.0),
            (1, 1, 2, 0, 0.0), (1, 0, 1, 0, 0.0), (1, 1, 1, 0, 0.0),
            (2, 2, 3, 0, 0.0), (2, 0, 1, 0, 0.0), (2, 2, 1, 0, 0.0)]
    for s in (1, 2):  # a word can follow another directly
        arcs += [(s, 1, 2, 1, 0.0), (s, 2, 3, 2, 0.0)] if s == 2 else [(s, 2, 3, 2, 0.0)]
    graph = GraphArrays.from_arcs(3, 0, arcs, {0: 0.0, 1: 0.0, 2: 0.0})
    path = [0, 1, 1, 0, 2, 0, 0, 1, 0]  # columns: 0 blank, 1 tok1, 2 tok2
    scores = np.log(np.eye(3)[path] * 0.9 + 0.05).astype(np.float32)
    res = viterbi_decode(graph, scores, beam=10.0)
    assert res.words == [1, 2, 1]
    assert res.word_frames[:, 0].tolist() == [1, 4, 7]
