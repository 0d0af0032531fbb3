"""Incremental decoding: the TLG Viterbi search and the CTC prefix search fed scores in chunks
equal the offline searches; partial results are the best path so far; Kaldi's endpoint rules;
hotword context graphs (Aho-Corasick semantics checked by brute force) bias both searches."""

import math

import numpy as np
import pytest

from asrkit.decoders.context_graph import (
    ContextGraph,
    Hotword,
    parse_hotwords,
    token_phrases,
)
from asrkit.decoders.ctc import CtcPrefixSearch, Lexicon, ctc_prefix_beam_search
from asrkit.decoders.online import EndpointConfig, EndpointRule, OnlineGraphDecoder
from asrkit.decoders.viterbi import GraphArrays, ViterbiSearch, viterbi_decode
from tests.decoders.test_viterbi import _random_graph


def _splits(T, rng):
    """Random chunk boundaries over T frames (empty chunks included)."""
    cuts = sorted(rng.integers(0, T + 1, size=int(rng.integers(1, 6))).tolist())
    return list(zip([0] + cuts, cuts + [T]))


def _same_result(a, b):
    assert a.words == b.words
    np.testing.assert_array_equal(a.word_frames, b.word_frames)
    assert (a.cost, a.graph_cost, a.acoustic_cost, a.reached_final, a.num_tokens) == \
        (b.cost, b.graph_cost, b.acoustic_cost, b.reached_final, b.num_tokens)
    if a.lattice_links is None:
        assert b.lattice_links is None
    else:
        np.testing.assert_array_equal(a.lattice_links, b.lattice_links)
        assert a.lattice_final == b.lattice_final
        np.testing.assert_array_equal(a.lattice_tok_frame, b.lattice_tok_frame)


@pytest.mark.parametrize("seed", range(12))
def test_viterbi_in_chunks_equals_viterbi_decode(seed):
    rng = np.random.default_rng(seed)
    graph, _, _ = _random_graph(rng, num_states=8, num_arcs=30)
    T = int(rng.integers(1, 25))
    scores = np.log(rng.dirichlet(np.ones(3), size=T)).astype(np.float32)
    opts = dict(beam=float(rng.uniform(1, 8)), max_active=int(rng.integers(2, 8)),
                min_active=1, word_insertion_penalty=0.3,
                lattice_beam=None if seed % 2 else 4.0)
    whole = viterbi_decode(graph, scores, **opts)
    search = ViterbiSearch(graph, **opts)
    for a, b in _splits(T, rng):
        search.advance(scores[a:b])
    _same_result(search.result(), whole)


def _costs_without_final(graph: GraphArrays, arcs, scores):
    """Exact Viterbi DP (no final weights, no pruning): best cost per state after the frames."""
    S = graph.num_states
    cost = np.full(S, np.inf)
    cost[0] = 0.0

    def closure(c):
        for _ in range(S + 1):
            for s, d, il, _, w in arcs:
                if il == 0 and c[s] + w < c[d]:
                    c[d] = c[s] + w
        return c

    cost = closure(cost)
    for t in range(len(scores)):
        new = np.full(S, np.inf)
        for s, d, il, _, w in arcs:
            if il:
                new[d] = min(new[d], cost[s] + w - scores[t, il - 1])
        cost = closure(new)
    return cost


@pytest.mark.parametrize("seed", range(6))
def test_partial_result_is_the_best_path_so_far(seed):
    rng = np.random.default_rng(100 + seed)
    graph, arcs, _ = _random_graph(rng, num_states=6, num_arcs=24)
    scores = np.log(rng.dirichlet(np.ones(3), size=12)).astype(np.float32)
    search = ViterbiSearch(graph, beam=1e9, max_active=10**6)
    for t in range(len(scores)):
        search.advance(scores[t:t + 1])
        partial = search.result(final=False)
        best = _costs_without_final(graph, arcs, scores[:t + 1]).min()
        if np.isfinite(best):
            assert partial.cost == pytest.approx(best, abs=1e-4)
            assert partial.graph_cost + partial.acoustic_cost == pytest.approx(best, abs=1e-4)
        else:
            assert partial.words == [] and math.isinf(partial.cost)


def _plain_scores(rng, T, C):
    x = rng.normal(size=(T, C)) * 3
    return (x - np.log(np.exp(x).sum(axis=1, keepdims=True))).astype(np.float32)


class FlatLM:
    """A word LM that scores everything 0 (forces the Python path of the prefix search)."""

    def begin_state(self):
        return ()

    def score_word(self, state, word):
        return (-0.1 if word != "</s>" else 0.0), state + (word,)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("path", ["compiled", "python", "lexicon"])
def test_ctc_prefix_search_in_chunks_equals_the_offline_search(seed, path):
    rng = np.random.default_rng(seed)
    tokens = ["<b>", "a", "b", "c", "|"]
    scores = _plain_scores(rng, int(rng.integers(1, 30)), len(tokens))
    kwargs = dict(tokens=tokens, beam=4, unit="char")
    if path == "python":
        kwargs["lm"] = FlatLM()
    elif path == "lexicon":
        kwargs["lexicon"] = Lexicon(["ab", "ca", "b"])
    whole = ctc_prefix_beam_search(scores, nbest=4, **kwargs)
    search = CtcPrefixSearch(**kwargs)
    assert search.compiled == (path == "compiled")
    for a, b in _splits(len(scores), rng):
        search.advance(scores[a:b])
        if b > a:
            best = search.best()
            assert best.score >= max(h.score for h in search.finish(4)) - 20  # a real entry
    got = search.finish(4)
    assert [(h.tokens, h.words) for h in got] == [(h.tokens, h.words) for h in whole]
    np.testing.assert_allclose([h.score for h in got], [h.score for h in whole])


def test_ctc_partial_is_the_best_prefix_so_far():
    rng = np.random.default_rng(5)
    scores = _plain_scores(rng, 20, 4)
    for compiled in (True, False):
        search = CtcPrefixSearch(tokens=["-", "x", "y", "z"], beam=8,
                                 lm=None if compiled else FlatLM())
        for t in range(20):
            search.advance(scores[t:t + 1])
            ref = ctc_prefix_beam_search(scores[:t + 1], tokens=["-", "x", "y", "z"], beam=8,
                                         lm=None if compiled else FlatLM())[0]
            if compiled:  # no end-of-sentence score: the same ranking
                assert search.best().tokens == ref.tokens


# -- hotwords --------------------------------------------------------------------------------
def _occurrence_total(phrases, seq):
    """Sum over every occurrence (overlaps included) of each phrase in ``seq`` of its boosts."""
    total = 0.0
    for phrase in phrases:
        labels = [lab for lab, _ in phrase]
        for i in range(len(seq) - len(labels) + 1):
            if seq[i:i + len(labels)] == labels:
                total += sum(b for _, b in phrase)
    return total


@pytest.mark.parametrize("seed", range(20))
def test_context_graph_scores_each_phrase_occurrence_once(seed):
    rng = np.random.default_rng(seed)
    boost = float(rng.uniform(0.5, 3))
    phrases, seen = [], set()
    for _ in range(int(rng.integers(1, 6))):
        labels = tuple(int(x) for x in rng.integers(1, 4, size=int(rng.integers(1, 4))))
        if labels not in seen:
            seen.add(labels)
            phrases.append([(lab, boost) for lab in labels])
    graph = ContextGraph(phrases)
    for _ in range(10):
        seq = [int(x) for x in rng.integers(1, 5, size=int(rng.integers(0, 12)))]
        state, total = 0, 0.0
        for lab in seq:
            state, score = graph.step(state, lab)
            total += score
        total += graph.final_score(state)
        assert total == pytest.approx(_occurrence_total(phrases, seq), abs=1e-4)


def test_hotword_files():
    hw = parse_hotwords(["# a comment", "", "seven eight :3.5", "oh", "  nine  # tail"],
                        "hot.txt")
    assert [(h.words, h.boost, h.where) for h in hw] == [
        (["seven", "eight"], 3.5, "hot.txt:3"), (["oh"], 2.0, "hot.txt:4"),
        (["nine"], 2.0, "hot.txt:5")]
    with pytest.raises(ValueError, match="hot.txt:1: boost 'x'"):
        parse_hotwords(["one :x"], "hot.txt")
    with pytest.raises(ValueError, match="hot.txt:2: a boost without a phrase"):
        parse_hotwords(["one", ":2"], "hot.txt")
    with pytest.raises(ValueError, match="hot.txt:1: boost 'nan'"):
        parse_hotwords(["one :nan"], "hot.txt")
    chars = token_phrases([Hotword(["ab", "c"], 2.0, "h:1")], ["-", "a", "b", "c", "|"], "char")
    assert chars == [[(2, 1.0), (3, 1.0), (5, 0.0), (4, 2.0)]]
    pieces = token_phrases([Hotword(["cab"], 3.0)], ["-", "\u2581ca", "\u2581c", "b", "a"],
                           "bpe")
    assert pieces == [[(2, 1.5), (4, 1.5)]]
    with pytest.raises(ValueError, match="h:1: 'xyz' cannot be spelled"):
        token_phrases([Hotword(["xyz"], 1.0, "h:1")], ["-", "a"], "char")


def _word_loop(words):
    """A CTC word loop over one-token words (word i + 1 is token i + 1, input label i + 2;
    blank is token 0): state 0 after a blank, state i + 1 inside word i + 1 (its token
    repeats without a new word); every state final."""
    n = len(words)
    arcs = [(0, 0, 1, 0, 0.0)]
    for i in range(n):
        arcs.append((0, i + 1, i + 2, i + 1, 0.0))
        arcs.append((i + 1, i + 1, i + 2, 0, 0.0))
        arcs.append((i + 1, 0, 1, 0, 0.0))
        arcs += [(i + 1, j + 1, j + 2, j + 1, 0.0) for j in range(n) if j != i]
    return GraphArrays.from_arcs(n + 1, 0, arcs, {s: 0.0 for s in range(n + 1)})


def test_a_boosted_word_wins_in_the_tlg_search():
    # frames: blank, then one where "rare" is slightly less likely than "common", then blank
    p = np.full((5, 3), 1e-3)
    p[[0, 1, 3, 4], 0] = 1
    p[2, 1] = 0.55  # common
    p[2, 2] = 0.45  # rare
    scores = np.log(p / p.sum(axis=1, keepdims=True)).astype(np.float32)
    graph = _word_loop(["common", "rare"])
    plain = viterbi_decode(graph, scores)
    assert plain.words == [1]
    ctx = ContextGraph([[(2, 2.0)]])
    biased = viterbi_decode(graph, scores, context=ctx, lattice_beam=5.0)
    assert biased.words == [2]
    # the boost is in the graph cost, and streaming gives the same
    assert biased.graph_cost == pytest.approx(-2.0, abs=1e-5)
    search = ViterbiSearch(graph, context=ctx, lattice_beam=5.0)
    for t in range(5):
        search.advance(scores[t:t + 1])
    _same_result(search.result(), biased)
    # a phrase's boost is given back when it is not completed
    ctx2 = ContextGraph([[(2, 2.0), (1, 2.0)]])  # "rare common": never completed here
    assert viterbi_decode(graph, scores, context=ctx2).words == [1]


def test_a_boosted_word_wins_in_the_ctc_prefix_search():
    tokens = ["-", "c", "o", "d", "g", "|"]
    # "cog" vs "cod": the last letter slightly favours d
    frames = [("c", 0.9), ("o", 0.9), ("d", 0.5, "g", 0.4)]
    p = np.full((len(frames) * 2, len(tokens)), 1e-3)
    for i, f in enumerate(frames):
        for sym, prob in zip(f[::2], f[1::2]):
            p[2 * i, tokens.index(sym)] = prob
        p[2 * i + 1, 0] = 1.0
    scores = np.log(p / p.sum(axis=1, keepdims=True)).astype(np.float32)
    plain = ctc_prefix_beam_search(scores, tokens, unit="char")[0]
    assert plain.words == ["cod"]
    ctx = ContextGraph(token_phrases([Hotword(["cog"], 3.0)], tokens, "char"))
    biased = ctc_prefix_beam_search(scores, tokens, unit="char", context=ctx)
    assert biased[0].words == ["cog"]
    search = CtcPrefixSearch(tokens, unit="char", context=ctx)
    for t in range(len(scores)):
        search.advance(scores[t:t + 1])
    assert [h.words for h in search.finish(3)] == [h.words for h in
                                                    ctc_prefix_beam_search(scores, tokens,
                                                                           unit="char",
                                                                           context=ctx,
                                                                           nbest=3)]


# -- endpoints -------------------------------------------------------------------------------
def test_endpoint_rules_are_kaldis():
    cfg = EndpointConfig()
    assert list(cfg.rules) == ["rule1", "rule2", "rule3", "rule4", "rule5"]
    # (utterance length, trailing silence, relative cost) -> first rule that fires
    cases = {(5.0, 5.0, math.inf): "rule1", (4.9, 4.9, math.inf): None,
             (2.0, 0.5, 1.0): "rule2", (2.0, 0.5, 3.0): None, (2.0, 1.0, 3.0): "rule3",
             (2.0, 1.0, 9.0): None, (3.0, 2.0, 50.0): "rule4", (20.0, 0.0, math.inf): "rule5",
             (1.0, 1.0, 0.0): None}  # all silence: rules 2-4 need speech
    for args, rule in cases.items():
        assert cfg.detected(*args) == rule, args
    custom = EndpointConfig.from_options({"rule2": {"min_trailing_silence": 0.2},
                                          "rule5": None, "short": {"min_utterance_length": 3,
                                                                   "min_trailing_silence": 0,
                                                                   "must_contain_nonsilence":
                                                                   False}})
    assert custom.rules["rule2"] == EndpointRule(True, 0.2, 2.0, 0.0)
    assert "rule5" not in custom.rules and custom.detected(3.0, 0.0, 9.0) == "short"
    assert EndpointConfig.from_options(False) is None
    with pytest.raises(ValueError, match="endpoint.rule2.bogus: unknown field"):
        EndpointConfig.from_options({"rule2": {"bogus": 1}})
    with pytest.raises(ValueError, match="endpoint.rule3.min_trailing_silence must be"):
        EndpointConfig.from_options({"rule3": {"min_trailing_silence": -1}})


def test_online_decoder_ends_a_segment_after_trailing_silence():
    from asrkit.decoders.decode import DecodeOptions, DecodingGraph

    graph = DecodingGraph(_word_loop(["one", "two"]), {1: "one", 2: "two"}, 1, {})
    shift = 0.04
    dec = OnlineGraphDecoder(graph, DecodeOptions(frame_shift=shift, nbest=1), blank=0)
    speech = np.log(np.array([[0.01, 0.98, 0.01]] * 5 + [[0.98, 0.01, 0.01]] * 2
                             + [[0.01, 0.01, 0.98]] * 5))
    silence = np.log(np.array([[0.98, 0.01, 0.01]]))
    dec.accept(speech.astype(np.float32))
    assert dec.partial().words == ["one", "two"]
    assert dec.endpoint(EndpointConfig()) is None
    fired = None
    for t in range(200):
        dec.accept(silence.astype(np.float32))
        assert dec.trailing_silence_frames() == t + 1
        fired = dec.endpoint(EndpointConfig())
        if fired:
            break
    # rule2: 0.5 s of silence after speech, the graph happy to end here (final cost 0)
    assert fired == "rule2" and t + 1 == math.ceil(0.5 / shift)
    final = dec.final()
    assert final.words == ["one", "two"] and final.timings[1].start == pytest.approx(7 * shift)
    dec.reset()
    assert dec.num_frames == 0 and dec.endpoint(EndpointConfig()) is None
