"""The stateful query API decoders use, checked against KenLM's and against ``score``."""

import numpy as np
import pytest

from asrkit.lm import NgramLM
from tests.lm.conftest import sentences_with_oovs


@pytest.fixture(scope="module")
def lm(test_arpa):
    return NgramLM.load(test_arpa)


def test_state_walk_equals_sentence_score(lm, test_text, rng):
    for s in sentences_with_oovs(test_text.read_text().splitlines(), rng, 30):
        state, total = lm.begin_state(), 0.0
        for w in s.split() + ["</s>"]:
            lp, state = lm.score_word(state, w)
            total += lp
            assert isinstance(state, tuple) and len(state) <= lm.order - 1
            assert hash(state) is not None
        assert total == pytest.approx(lm.score(s), abs=1e-9)
        state, total = lm.null_state(), 0.0
        for w in s.split():
            lp, state = lm.score_id(state, lm.word_id(w))
            total += lp
        assert total == pytest.approx(lm.score(s, bos=False, eos=False), abs=1e-9)


def test_kenlm_base_score_matches_per_word(lm, test_arpa, kenlm):
    ref = kenlm.Model(str(test_arpa))
    ours, theirs = lm.begin_state(), kenlm.State()
    ref.BeginSentenceWrite(theirs)
    for w in "the cat sees zebra the red ball </s>".split():
        out = kenlm.State()
        expect = ref.BaseScore(theirs, w, out)
        got, ours = lm.score_word(ours, w)
        assert got == pytest.approx(expect, abs=1e-5), w
        theirs = out


def test_states_are_minimal_so_equal_futures_share_a_state(lm):
    _, s1 = lm.score_word(lm.begin_state(), "zebra")
    _, s2 = lm.score_word(lm.null_state(), "zebra")
    assert s1 == s2 == (lm.unk_id,)
    _, s = lm.score_word(lm.begin_state(), "the")
    assert s == (lm.bos_id, lm.word_id("the"))  # "<s> the" is listed


def test_vocab_ids_and_listing(lm):
    assert lm.vocab[:3] == ["<unk>", "<s>", "</s>"]
    assert all(lm.word_id(w) == i for i, w in enumerate(lm.vocab))
    assert lm.word_id("never-seen") == lm.unk_id
    grams = list(lm.iter_ngrams(2))
    assert len(grams) == lm.counts[1]
    words, logp, bow = grams[0]
    assert len(words) == 2 and logp < 0 and isinstance(bow, float)
    with pytest.raises(ValueError):
        list(lm.iter_ngrams(4))


def test_perplexity_counts_oovs_as_srilm(lm):
    from asrkit.lm import evaluate

    st = evaluate(lm, ["the cat sees zebra", "", "she"])
    assert (st.sentences, st.words, st.oovs) == (2, 5, 1)
    scored = [lp for s in ("the cat sees zebra", "she") for lp, _, oov in lm.full_scores(s)
              if not oov]
    assert st.logprob == pytest.approx(sum(scored))
    assert st.ppl == pytest.approx(10 ** (-st.logprob / (5 - 1 + 2)))
    assert st.ppl1 == pytest.approx(10 ** (-st.logprob / (5 - 1)))
    assert lm.perplexity(["the cat sees zebra", "she"]) == pytest.approx(st.ppl)


def _kenlm_walks(lm, ref, kenlm, sentences):
    """Every (our state, kenlm state, word) on the sentences' walks from <s>, with KenLM's
    BaseScore of the word."""
    pairs = []
    for s in sentences:
        ours, theirs = lm.begin_state(), kenlm.State()
        ref.BeginSentenceWrite(theirs)
        for w in s.split() + ["</s>"]:
            out = kenlm.State()
            pairs.append((ours, w, ref.BaseScore(theirs, w, out)))
            _, ours = lm.score_word(ours, w)
            theirs = out
    return pairs


def test_batch_scores_equal_kenlm_base_score(lm, test_arpa, test_text, rng, kenlm):
    ref = kenlm.Model(str(test_arpa))
    sents = sentences_with_oovs(test_text.read_text().splitlines(), rng, 40)
    pairs = _kenlm_walks(lm, ref, kenlm, sents)
    states, words, expect = (list(x) for x in zip(*pairs, strict=True))
    logp, nxt = lm.score_words(states, words)
    np.testing.assert_allclose(logp, expect, atol=1e-4)
    assert nxt == [lm.score_word(s, w)[1] for s, w in zip(states, words, strict=True)]
    # the same through state rows and word ids: no Python object per state
    rows = lm.state_rows(states)
    assert rows.dtype == np.int32 and rows.shape == (len(states), lm.order)
    assert lm.state_tuples(rows) == states
    logp2, rows2 = lm.score_ids(rows, [lm.word_id(w) for w in words])
    np.testing.assert_array_equal(logp2, logp)
    assert lm.state_tuples(rows2) == nxt
    # rows are zero-padded, so equal states are equal rows
    assert all((r[1 + r[0]:] == 0).all() for r in rows2)


def test_score_word_equals_kenlm_on_many_walks(lm, test_arpa, test_text, rng, kenlm):
    ref = kenlm.Model(str(test_arpa))
    sents = sentences_with_oovs(test_text.read_text().splitlines(), rng, 40)
    for state, w, expect in _kenlm_walks(lm, ref, kenlm, sents):
        assert lm.score_word(state, w)[0] == pytest.approx(expect, abs=1e-4)


def test_batch_api_rejects_bad_input(lm):
    with pytest.raises(ValueError, match="vocabulary"):
        lm.score_ids([lm.begin_state()], [len(lm.vocab)])
    with pytest.raises(ValueError, match="shape"):
        lm.score_ids(np.zeros((2, lm.order), np.int32), [0])
    with pytest.raises(ValueError, match="lengths"):
        lm.score_ids(np.full((1, lm.order), 7, np.int32), [0])
    with pytest.raises(ValueError, match="at most"):
        lm.state_rows([(1, 2, 3, 4)])
    with pytest.raises(ValueError, match="vocabulary"):
        lm.score_id((), -1)
    logp, rows = lm.score_ids(np.zeros((0, lm.order), np.int32), [])
    assert logp.shape == (0,) and rows.shape == (0, lm.order)


@pytest.mark.filterwarnings("ignore:cannot estimate Kneser-Ney")
def test_long_states_and_high_orders_follow_the_backoff_rule(tmp_path, kenlm):
    # a 6-gram model: states of five words take the array path of score_id
    from asrkit.lm import train

    text = ["a b c d e f g", "a b c d e f h", "b c d e f g", "c d e f g a"] * 3
    lm6 = train(text, order=6)
    arpa = tmp_path / "six.arpa"
    lm6.write_arpa(arpa)
    ref = kenlm.Model(str(arpa))
    for s in ["a b c d e f g", "a b c d e f h a b", "c d e f g a b c d e f"]:
        state, theirs = lm6.begin_state(), kenlm.State()
        ref.BeginSentenceWrite(theirs)
        for w in s.split() + ["</s>"]:
            out = kenlm.State()
            expect = ref.BaseScore(theirs, w, out)
            lp, state = lm6.score_word(state, w)
            assert lp == pytest.approx(expect, abs=1e-4)
            theirs = out
        assert len(state) <= 5
