"""Transducer search: the numpy prediction networks equal the graph's, greedy search, modified
beam search against the exact one-symbol-per-frame DP, n-best, word times, LM fusion."""

import math

import numpy as np
import pytest

from asrkit.decoders.transducer import (
    transducer_beam_search,
    transducer_greedy,
    words_of,
)
from asrkit.graph import evaluate
from asrkit.kernels.transducer import joiner_logits, log_softmax
from asrkit.models import TransducerModel
from asrkit.ops.transducer import predictor_step

NET = {"seed": 3, "layers": [{"type": "dense", "dim": 8}]}


def _model(kind, V=5, H=6, **spec):
    tokens = ["<blk>"] + [f"w{i}" for i in range(1, V)]
    return TransducerModel(NET, 4, tokens, 0, transducer={"predictor": kind, "predictor_dim": 7,
                                                          "joiner_dim": H, **spec})


@pytest.mark.parametrize("kind,spec", [("stateless", {"context_size": 2}),
                                       ("stateless", {"context_size": 3}),
                                       ("lstm", {"predictor_layers": 2})])
def test_the_numpy_step_equals_the_graphs_prediction_network(kind, spec):
    m = _model(kind, **spec)
    labels = np.array([[1, 3, 2, 4, 4], [2, 1, 0, 0, 0]], np.int32).T  # [U, B]
    lengths = np.array([5, 2], np.int32)
    (pred,) = evaluate([m.pred], {m.labels: (labels, lengths)})
    np.testing.assert_array_equal(pred.lengths, lengths + 1)
    step = predictor_step(kind, m.predictor_arrays(), m.blank)
    for b in range(2):
        state, out = step.start()
        np.testing.assert_allclose(out, pred.data[0, b], rtol=1e-5, atol=1e-6)
        for u in range(lengths[b]):
            state, out = step.step(state, labels[u, b])
            np.testing.assert_allclose(out, pred.data[u + 1, b], rtol=1e-5, atol=1e-6)


def _search_case(seed=0, T=4, V=3, H=5):
    rng = np.random.default_rng(seed)
    m = _model("stateless", V=V, H=H, context_size=1)
    enc = rng.standard_normal((T, H)).astype(np.float32)
    W = np.asarray(m.joiner.weight.value) * 3
    b = np.asarray(m.joiner.bias.value)
    return m, enc, predictor_step("stateless", m.predictor_arrays(), 0), W, b


def _one_symbol_per_frame_logp(enc, step, W, b, y):
    """log p(y) summed over alignments that emit at most one label per frame (the lattice the
    modified beam search walks), by dynamic programming."""
    outs = [step.start()[1]]
    state = step.start()[0]
    for lab in y:
        state, o = step.step(state, lab)
        outs.append(o)
    T, U = enc.shape[0], len(y)
    a = np.full((T + 1, U + 1), -np.inf)
    a[0, 0] = 0.0
    for t in range(T):
        lp = log_softmax(joiner_logits(enc[t][None], np.stack(outs), W, b))  # [U+1, V]
        for u in range(U + 1):
            stay = a[t, u] + lp[u, 0]
            move = a[t, u - 1] + lp[u - 1, y[u - 1]] if u else -np.inf
            a[t + 1, u] = np.logaddexp(stay, move)
    return a[T, U]


def test_beam_search_scores_are_the_exact_sum_over_alignments():
    m, enc, step, W, b = _search_case()
    # beam 3^4: nothing is pruned, every prefix keeps all its alignments
    hyps = transducer_beam_search(enc, step, W, b, blank=0, beam=81, nbest=81)
    assert len({tuple(h.tokens) for h in hyps}) == len(hyps)
    total = -np.inf
    for h in hyps:
        want = _one_symbol_per_frame_logp(enc, step, W, b, h.tokens)
        assert h.acoustic == pytest.approx(want, abs=1e-4)
        total = np.logaddexp(total, h.acoustic)
    # all label sequences of at most T labels: the probabilities sum to one
    assert total == pytest.approx(0.0, abs=1e-4)
    assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)


def test_greedy_follows_the_joiners_arg_max():
    m, enc, step, W, b = _search_case(seed=1)
    h = transducer_greedy(enc, step, W, b, blank=0, max_symbols=2)
    # replay: at each frame, labels while the arg-max is not blank (at most 2)
    state, out = step.start()
    toks, frames = [], []
    for t in range(enc.shape[0]):
        for _ in range(2):
            y = int(np.argmax(joiner_logits(enc[t], out, W, b)))
            if y == 0:
                break
            toks.append(y)
            frames.append(t)
            state, out = step.step(state, y)
    assert h.tokens == toks and h.frames == frames


def test_beam_one_keeps_the_best_extension_each_frame():
    m, enc, step, W, b = _search_case(seed=2, T=6, V=4)
    greedy = transducer_greedy(enc, step, W, b, max_symbols=1)
    beam1 = transducer_beam_search(enc, step, W, b, beam=1)[0]
    assert beam1.tokens == greedy.tokens and beam1.frames == greedy.frames


def test_words_and_their_frames_for_each_unit():
    tokens = ["<blk>", "<space>", "a", "b", "\u2581c", "d"]
    assert words_of([2, 3, 1, 3], [0, 2, 3, 5], tokens, "char", "<space>") == (
        ["ab", "b"], [(0, 2), (5, 5)])
    assert words_of([4, 5, 4], [1, 2, 7], tokens, "bpe") == (["cd", "c"], [(1, 2), (7, 7)])
    assert words_of([2, 3], [4, 9], tokens, "word") == (["a", "b"], [(4, 4), (9, 9)])


class _OneWordLM:
    """A unigram LM over the words w1, w2 strongly preferring ``word``, with the
    begin_state/score_word API of asrkit.lm.NgramLM (log10)."""

    def __init__(self, word):
        self.word = word

    def begin_state(self):
        return 0

    def score_word(self, state, word):
        if word == "</s>":
            return 0.0, state
        return (0.0 if word == self.word else -3.0), state


def test_lm_fusion_moves_the_best_hypothesis_and_adds_its_weighted_score():
    m, enc, step, W, b = _search_case(seed=3, T=3, V=3)
    tokens = m.tokens
    plain = transducer_beam_search(enc, step, W, b, beam=8, nbest=8, tokens=tokens)
    best_words = plain[0].words
    assert best_words, "the case should decode to at least one word"
    other = "w1" if best_words[0] == "w2" else "w2"
    fused = transducer_beam_search(enc, step, W, b, beam=8, nbest=8, tokens=tokens,
                                   lm=_OneWordLM(other), lm_weight=2.0)
    for h in fused:
        n_bad = sum(w != other for w in h.words)
        assert h.lm == pytest.approx(2.0 * -3.0 * math.log(10) * n_bad)
        assert h.score == pytest.approx(h.acoustic + h.lm)
    assert all(w == other for w in fused[0].words)


def test_bad_input_is_a_clear_error():
    m, enc, step, W, b = _search_case()
    with pytest.raises(ValueError, match="enc must be"):
        transducer_beam_search(enc[:, :2], step, W, b)
    with pytest.raises(ValueError, match="beam must be an integer"):
        transducer_beam_search(enc, step, W, b, beam=0)
    with pytest.raises(ValueError, match="needs the token strings"):
        transducer_beam_search(enc, step, W, b, lm=_OneWordLM("w1"))


def test_hotwords_boost_a_weak_word_and_take_back_an_unfinished_phrase():
    """The hand-set tone transducer (tests/transducer/test_recognizer.py) over encoder frames
    set by hand: a weak "two" (p = 0.19 a frame) is left out unless a hotword boosts it enough,
    and a phrase that is not completed changes nothing."""
    from asrkit.decoders.context_graph import ContextGraph, parse_hotwords, token_phrases
    from tests.transducer.test_recognizer import tone_transducer_model

    m = tone_transducer_model()  # tokens <blk> one two three; enc unit k-1 is word k
    step = predictor_step("stateless", m.predictor_arrays(), 0)
    W, b = np.asarray(m.joiner.weight.value), np.asarray(m.joiner.bias.value)
    off, weak, loud = -5.0, -0.3, 3.0
    enc = np.array([[loud, off, off], [off, off, off], [off, weak, off], [off, weak, off]],
                   np.float32)

    def best(lines):
        ctx = None
        if lines:
            ctx = ContextGraph(token_phrases(parse_hotwords(lines), m.tokens, "word"))
        return transducer_beam_search(enc, step, W, b, beam=4, nbest=4, tokens=m.tokens,
                                      context=ctx)

    assert best([])[0].words == ["one"]
    assert best(["two :0.5"])[0].words == ["one"]  # too small a boost
    boosted = best(["two :2"])
    assert boosted[0].words == ["one", "two"]
    assert boosted[0].lm == pytest.approx(2.0, abs=1e-5)  # the boost counts in the LM part
    assert boosted[0].score == pytest.approx(boosted[0].acoustic + 2.0, abs=1e-5)
    # "two three" earns 2 for "two" while matching, and gives it back when it never completes
    assert best(["two three :2"])[0].words == ["one"]
    # a phrase that continues what was said: "one two" gets both words' boosts
    assert best(["one two :1.5"])[0].words == ["one", "two"]
    assert best(["one two :1.5"])[0].lm == pytest.approx(3.0, abs=1e-5)


def _paths(T, U):
    """Every RNN-T path as the frame of each of U labels (non-decreasing frames < T)."""
    import itertools

    return [c for c in itertools.combinations_with_replacement(range(T), U)]


def test_force_align_is_the_best_of_all_paths():
    from asrkit.kernels.transducer import force_align

    m, enc, step, W, b = _search_case(seed=4, T=4, V=4)
    y = [2, 1, 3]
    outs = [step.start()[1]]
    state = step.start()[0]
    for lab in y:
        state, o = step.step(state, lab)
        outs.append(o)
    lp = np.stack([log_softmax(joiner_logits(enc[t][None], np.stack(outs), W, b))
                   for t in range(4)])  # [T, U+1, V]

    def path_logp(frames):
        total, u = 0.0, 0
        for t in range(4):
            while u < len(y) and frames[u] == t:
                total += lp[t, u, y[u]]
                u += 1
            total += lp[t, u, 0]
        return total

    best = max(_paths(4, 3), key=path_logp)
    frames, logp = force_align(enc, step, W, b, y)
    assert tuple(frames) == best and logp == pytest.approx(path_logp(best), abs=1e-5)
    assert force_align(enc[:0], step, W, b, y) == ([], -math.inf)


def test_a_joiner_function_stands_in_for_the_weights():
    """An exported joiner (``joiner=``, weight and bias None) gives both searches the same
    hypotheses as the weights do, and is called on equal-shaped [N, H] rows."""
    from asrkit.decoders.transducer import TransducerBeamSearch, TransducerGreedySearch

    m, enc, step, W, b = _search_case(seed=3, T=7, V=4)
    rows = []

    def joiner(e, o):
        assert e.shape == o.shape and e.ndim == 2
        rows.append(e.shape[0])
        return joiner_logits(e, o, W, b)

    for make in (lambda **k: TransducerGreedySearch(step, blank=0, max_symbols=2, **k),
                 lambda **k: TransducerBeamSearch(step, blank=0, beam=3, **k)):
        want, got = make(weight=W, bias=b), make(weight=None, bias=None, joiner=joiner)
        for s in (want, got):
            s.advance(enc[:3])
            s.advance(enc[3:])
        w, g = want.finish(3), got.finish(3)
        assert [(h.tokens, h.frames) for h in g] == [(h.tokens, h.frames) for h in w]
        assert [h.score for h in g] == pytest.approx([h.score for h in w], abs=1e-5)
    assert rows and max(rows) > 1  # the beam search joins all hypotheses at once
