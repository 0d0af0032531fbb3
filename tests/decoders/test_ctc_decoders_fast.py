"""CTC prefix search: the compiled no-LM search against the Python one, lexicon constraints,
and the score beam."""

import math

import numpy as np
import pytest

from asrkit.decoders.ctc import Lexicon, ctc_prefix_beam_search


class FlatLM:
    """Every word, and the end of the sentence, has probability 1: fusion adds nothing."""

    def begin_state(self):
        return ()

    def score_word(self, state, word):
        return 0.0, ()


def _log_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


@pytest.mark.parametrize("seed", range(6))
def test_compiled_search_equals_the_python_search(seed):
    rng = np.random.default_rng(seed)
    tokens = ["<b>", "|", "a", "b", "c"]
    lp = _log_softmax(rng.normal(size=(12, 5)) * 3).astype(np.float32)
    fast = ctc_prefix_beam_search(lp, tokens, beam=6, nbest=6, unit="char")
    slow = ctc_prefix_beam_search(lp, tokens, beam=6, nbest=6, unit="char", lm=FlatLM())
    assert [h.tokens for h in fast] == [h.tokens for h in slow]
    assert [h.words for h in fast] == [h.words for h in slow]
    for f, s in zip(fast, slow):
        assert f.score == pytest.approx(s.score, abs=1e-9)


def _spell(text, tokens, rng, confuse=None):
    """Peaked log-probs for ``text`` (one token per char), a blank after each; ``confuse``:
    {position: other char} puts the other char slightly ahead at that position."""
    idx = {t: i for i, t in enumerate(tokens)}
    rows = []
    for i, ch in enumerate(text):
        row = np.full(len(tokens), -8.0)
        row[idx[ch]] = 0.0
        if confuse and i in confuse:
            row[idx[confuse[i]]] = 0.5
        rows += [row, np.where(np.arange(len(tokens)) == 0, 0.0, -8.0)]
    return _log_softmax(np.array(rows) + rng.normal(0, 0.01, (len(rows), len(tokens))))


def test_lexicon_keeps_the_spelling_to_known_words(rng):
    tokens = ["<b>", "|", "c", "a", "t", "o", "g", "d"]
    lp = _spell("cat|dog|", tokens, rng, confuse={1: "o"})  # acoustics say "cot"
    assert ctc_prefix_beam_search(lp, tokens, unit="char")[0].words == ["cot", "dog"]
    lex = Lexicon(["cat", "dog", "cog"])
    hyp = ctc_prefix_beam_search(lp, tokens, unit="char", lexicon=lex, nbest=3)
    assert hyp[0].words == ["cat", "dog"]
    assert all(set(h.words) <= lex.words for h in hyp)
    # a plain list of words works too, and word units are checked whole
    words = ["<b>", "cat", "cot"]
    lp = _log_softmax(np.array([[-5, -1, 0.0], [0, -5, -5.0]]))
    assert ctc_prefix_beam_search(lp, words, lexicon=["cat"])[0].words == ["cat"]


def test_lexicon_drops_hypotheses_ending_inside_a_word(rng):
    tokens = ["<b>", "|", "c", "a", "t"]
    lp = _spell("ca", tokens, rng)
    hyps = ctc_prefix_beam_search(lp, tokens, unit="char", lexicon=["cat"], nbest=5)
    assert hyps[0].words == ["cat"]
    assert all(set(h.words) <= {"cat"} for h in hyps)  # "ca" is not a word: never kept
    assert ctc_prefix_beam_search(lp, tokens, unit="char", lexicon=["ca"])[0].words == ["ca"]


def test_score_beam_prunes_weak_prefixes(rng):
    lp = _log_softmax(rng.normal(size=(15, 4)) * 2).astype(np.float32)
    wide = ctc_prefix_beam_search(lp, beam=50, nbest=50)
    narrow = ctc_prefix_beam_search(lp, beam=50, nbest=50, score_beam=2.0)
    assert narrow[0].tokens == wide[0].tokens
    assert len(narrow) < len(wide)
    assert all(h.score >= narrow[0].score - 2.0 - 1e-9 for h in narrow)


def test_lm_fusion_with_a_lexicon_uses_word_scores(rng):
    tokens = ["<b>", "|", "a", "b"]
    lp = _spell("ab|", tokens, rng)

    class Unigram:
        def begin_state(self):
            return ()

        def score_word(self, state, word):
            return {"ab": -1.0, "</s>": -0.5}.get(word, -3.0), ()

    h = ctc_prefix_beam_search(lp, tokens, unit="char", lm=Unigram(), lm_weight=1.0,
                               lexicon=["ab", "ba"])[0]
    assert h.words == ["ab"] and h.lm == pytest.approx(-1.5 * math.log(10))


def test_lexicon_needs_tokens():
    with pytest.raises(ValueError, match="token strings"):
        ctc_prefix_beam_search(np.zeros((2, 3)), lexicon=["a"])


def test_unfinished_words_are_returned_when_nothing_else_is(rng):
    tokens = ["<b>", "|", "c", "a", "t"]
    lp = _spell("ca", tokens, rng)
    hyps = ctc_prefix_beam_search(lp, tokens, unit="char", lexicon=["cat"], beam=1)
    assert [h.words for h in hyps] == [["ca"]]


def test_a_frame_whose_likely_tokens_are_all_forbidden_does_not_end_the_search():
    tokens = ["<b>", "|", "a", "b"]
    lp = _log_softmax(np.array([[-20.0, -20, 0, -20], [-20, -20, -20, 0], [0, -20, -20, -20]]))
    hyps = ctc_prefix_beam_search(lp, tokens, unit="char", lexicon=["a"], token_beam=5.0)
    assert hyps and hyps[0].words == ["a"]
