"""N-best rescoring: reranking, interpolation arithmetic, the n-best text format."""

import math

import numpy as np
import pytest

from asrkit.nnlm import NbestFormatError, format_nbest, read_nbest, rescore_nbest, write_nbest
from tests.nnlm.conftest import ngram

LN10 = math.log(10.0)


@pytest.mark.parametrize("good,bad", [("the big cats sleep", "the big cats sleeps"),
                                      ("a red bird sees the dog", "a red bird see the dog")])
def test_grammatical_hypothesis_wins_over_acoustically_better_one(trained_lm, good, bad):
    # subject-verb agreement across an adjective
    assert -LN10 * (trained_lm.score(good) - trained_lm.score(bad)) < -1.0  # nats
    nbest = {"utt1": [(bad, 100.0, 20.0), (good, 100.5, 20.0)]}
    ranked = rescore_nbest(nbest, trained_lm, lm_weight=1.0, nn_weight=1.0)
    assert " ".join(ranked["utt1"][0].words) == good
    assert ranked["utt1"][0].rank == 1
    # without the neural LM the acoustics decide
    kept = rescore_nbest(nbest, trained_lm, lm_weight=1.0, nn_weight=0.0)
    assert " ".join(kept["utt1"][0].words) == bad


class FixedLM:
    """An LM with given per-word log10 probabilities (1 word + </s> sentences)."""

    def __init__(self, table):
        self.table = table

    def word_scores(self, sentences):
        return [np.array(self.table[s]) for s in sentences]

    def score_sentences(self, sentences):
        return np.array([sum(self.table[s]) for s in sentences])


def test_interpolation_arithmetic():
    nn = FixedLM({"a": [-1.0, -0.5], "b": [-2.0, -0.5]})
    ng = FixedLM({"a": [-3.0, -0.5], "b": [-1.0, -0.5]})
    nbest = [[("a", 10.0, 7.0), ("b", 11.0, 5.0)]]
    (res,) = rescore_nbest(nbest, nn, lm_weight=2.0, nn_weight=0.25, acoustic_scale=0.5)
    a = next(h for h in res if h.words == ["a"])
    assert a.old_lm_cost == 7.0  # the n-best's own LM cost
    assert a.nn_lm_cost == pytest.approx(1.5 * LN10)
    assert a.new_lm_cost == pytest.approx(0.75 * 7.0 + 0.25 * 1.5 * LN10)
    assert a.total == pytest.approx(0.5 * 10.0 + 2.0 * a.new_lm_cost)
    assert [h.total for h in res] == sorted(h.total for h in res)
    (res,) = rescore_nbest(nbest, nn, ngram_lm=ng, interpolation="linear", nn_weight=0.25)
    a = next(h for h in res if h.words == ["a"])
    want = -math.log(0.25 * 0.1 + 0.75 * 0.001) - math.log(10 ** -0.5)
    assert a.new_lm_cost == pytest.approx(want)
    assert a.old_lm_cost == pytest.approx(3.5 * LN10)
    with pytest.raises(ValueError, match="ngram_lm"):
        rescore_nbest(nbest, nn, interpolation="linear")


def test_ngram_models_are_interchangeable(trained_lm, train_text):
    tri = ngram(train_text, 3)
    nbest = {"u": [("the cat sleeps", 5.0, 1.0), ("the cat sleep", 5.0, 1.0)]}
    by_ngram = rescore_nbest(nbest, tri, nn_weight=1.0)
    assert by_ngram["u"][0].nn_lm_cost == pytest.approx(-LN10 * tri.score("the cat sleeps"))
    mixed = rescore_nbest(nbest, trained_lm, ngram_lm=tri, interpolation="linear")
    assert " ".join(mixed["u"][0].words) == "the cat sleeps"


def test_nbest_text_round_trip(tmp_path):
    path = tmp_path / "nbest.txt"
    path.write_text("u1-1 10.5 3.25 the cat\nu1-2 11 2 the\nu-2-1 1e2 0\n\n")
    nb = read_nbest(path)
    assert list(nb) == ["u1", "u-2"]
    assert nb["u1"][1].words == ["the"] and nb["u1"][1].ac_cost == 11.0
    assert nb["u-2"][0].words == [] and nb["u-2"][0].rank == 0
    out = tmp_path / "out.txt"
    write_nbest(out, nb)
    assert read_nbest(out) == nb
    assert format_nbest(nb).splitlines()[2] == "u-2-1 100 0"


@pytest.mark.parametrize("text,message", [
    ("u1-1 1.0\n", r"nbest.txt:1: expected"),
    ("u1 1.0 2.0 a\n", r"nbest.txt:1: hypothesis id 'u1'"),
    ("u1-1 x 2.0 a\n", r"nbest.txt:1: costs"),
    ("u1-1 1 2 a\nu2-1 1 2 a\nu1-2 1 2 b\n", r"nbest.txt:3: .*not consecutive"),
    ("u1-1 nan 2 a\n", r"nbest.txt:1: costs must be finite"),
])
def test_bad_nbest_lines_name_file_and_line(tmp_path, text, message):
    path = tmp_path / "nbest.txt"
    path.write_text(text)
    with pytest.raises(NbestFormatError, match=message):
        read_nbest(path)


def test_decoders_fuse_the_lstm_lm_through_the_stateful_api(trained_lm):
    from asrkit.decoders.ctc import ctc_prefix_beam_search

    tokens = ["<blank>", "the", "big", "cats", "sleep", "sleeps"]
    # frames: the, blank, big, blank, cats, blank, {sleeps 0.55 | sleep 0.45}
    frames = [{1: 0.9}, {0: 0.9}, {2: 0.9}, {0: 0.9}, {3: 0.9}, {0: 0.9}, {5: 0.55, 4: 0.45}]
    probs = np.full((len(frames), len(tokens)), 1e-3)
    for t, f in enumerate(frames):
        for k, p in f.items():
            probs[t, k] = p
    logp = np.log(probs / probs.sum(1, keepdims=True))
    plain = ctc_prefix_beam_search(logp, tokens, beam=8)[0]
    fused = ctc_prefix_beam_search(logp, tokens, beam=8, lm=trained_lm, lm_weight=1.0)[0]
    assert plain.words == ["the", "big", "cats", "sleeps"]
    assert fused.words == ["the", "big", "cats", "sleep"]
    assert fused.lm == pytest.approx(LN10 * trained_lm.score("the big cats sleep"),
                                     abs=1e-4)
