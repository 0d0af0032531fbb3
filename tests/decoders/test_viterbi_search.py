"""The fast search's parts: Kaldi's GetCutoff, epsilon-first arc order, back-pointers without
links, and the reused state map."""

import numpy as np
import pytest

from asrkit.decoders.viterbi import GraphArrays, _cutoff, viterbi_decode


def _kaldi_get_cutoff(costs, beam, max_active, min_active, beam_delta):
    """Kaldi's LatticeFasterDecoder::GetCutoff, written with a full sort."""
    best = costs.min()
    beam_cutoff = best + beam
    srt = np.sort(costs)
    if len(costs) > max_active and srt[max_active] < beam_cutoff:
        return srt[max_active], srt[max_active] - best + beam_delta
    min_active_cutoff = srt[min_active] if len(costs) > min_active else best
    if min_active_cutoff > beam_cutoff:
        return min_active_cutoff, min_active_cutoff - best + beam_delta
    return beam_cutoff, beam


@pytest.mark.parametrize("seed", range(12))
def test_cutoff_matches_kaldi(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    costs = rng.exponential(4.0, size=n).astype(np.float32)
    padded = np.concatenate([rng.random(3).astype(np.float32), costs])  # tokens 3..3+n
    beam = np.float32(rng.uniform(1, 10))
    max_active, min_active = int(rng.integers(1, 40)), int(rng.integers(0, 30))
    cut, adaptive, best_tok = _cutoff(padded, 3, 3 + n, beam, max_active, min_active,
                                      np.float32(0.5))
    want_cut, want_beam = _kaldi_get_cutoff(costs, beam, max_active, min_active, 0.5)
    assert cut == pytest.approx(want_cut, rel=1e-6)
    assert adaptive == pytest.approx(want_beam, rel=1e-5)
    assert best_tok == 3 + int(np.argmin(costs))


def _loop_graph(num_words=6, seed=0, shuffle=False):
    """A CTC word loop over one-token words (column 0 blank) with an epsilon back-off state."""
    rng = np.random.default_rng(seed)
    arcs = [(0, 0, 1, 0, 0.0), (0, num_words + 1, 0, 0, 0.7)]
    for w in range(1, num_words + 1):
        arcs += [(0, w, w + 1, w, float(rng.uniform(0, 2))), (w, w, w + 1, 0, 0.0),
                 (w, 0, 1, 0, 0.0), (w, num_words + 1, 0, 0, 0.3)]
    arcs += [(num_words + 1, w, w + 1, w, 1.0) for w in range(1, num_words + 1)]
    if shuffle:
        arcs = [arcs[i] for i in rng.permutation(len(arcs))]
    finals = {s: 0.0 for s in range(num_words + 1)}
    return GraphArrays.from_arcs(num_words + 2, 0, arcs, finals)


def _scores(rng, T=30, C=7):
    return np.log(rng.dirichlet(np.ones(C) * 0.3, size=T)).astype(np.float32)


def test_arc_order_within_a_state_does_not_matter(rng):
    a, b = _loop_graph(), _loop_graph(shuffle=True)
    assert b.search_arrays().emit_begin.tolist() != []  # reordered copy is cached
    for _ in range(5):
        s = _scores(rng)
        ra, rb = viterbi_decode(a, s, beam=8.0), viterbi_decode(b, s, beam=8.0)
        assert ra.words == rb.words and ra.cost == pytest.approx(rb.cost, abs=1e-5)


def test_lattice_mode_and_backpointer_mode_agree(rng):
    g = _loop_graph()
    for _ in range(5):
        s = _scores(rng)
        plain = viterbi_decode(g, s, beam=6.0, max_active=5, min_active=2)
        lat = viterbi_decode(g, s, beam=6.0, max_active=5, min_active=2, lattice_beam=4.0)
        assert plain.lattice_links is None and lat.lattice_links is not None
        assert plain.words == lat.words and plain.cost == lat.cost
        np.testing.assert_array_equal(plain.word_frames, lat.word_frames)
        assert plain.graph_cost + plain.acoustic_cost == pytest.approx(plain.cost, abs=1e-4)


def test_state_map_is_clean_between_utterances(rng):
    g = _loop_graph()
    utts = [_scores(rng, T=int(rng.integers(1, 25))) for _ in range(6)]
    shared = [viterbi_decode(g, s, beam=5.0) for s in utts]
    fresh = [viterbi_decode(_loop_graph(), s, beam=5.0) for s in utts]
    for a, b in zip(shared, fresh):
        assert a.words == b.words and a.cost == b.cost
    assert (g.search_arrays().state_map() == -1).all()


def test_max_active_limits_the_search(rng):
    g = _loop_graph(num_words=20, seed=1)
    s = _scores(rng, T=40, C=22)
    wide = viterbi_decode(g, s, beam=1e6, max_active=10**6, min_active=0)
    narrow = viterbi_decode(g, s, beam=1e6, max_active=3, min_active=0)
    assert narrow.num_tokens < wide.num_tokens / 2
    assert narrow.reached_final and narrow.cost >= wide.cost - 1e-4
    assert narrow.graph_cost + narrow.acoustic_cost == pytest.approx(narrow.cost, abs=1e-4)
