"""The stateful query API decoders use, checked against KenLM's and against ``score``."""

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
