"""LstmLM scoring: normalisation, stateful vs batched scores, agreement with torch."""

import numpy as np
import pytest

from asrkit.lm import NgramLM
from asrkit.nnlm import LstmLM, Vocabulary

WORDS = "the a some cat cats dog dogs sees see sleeps sleep big near".split()


@pytest.fixture(params=[(1, False), (2, False), (2, True)], ids=["1layer", "2layers",
                                                                 "tied-proj"])
def lm(request):
    layers, tied = request.param
    return LstmLM.create(Vocabulary(["<unk>", "<s>", "</s>", *WORDS]), embed_dim=6,
                         hidden_dim=8, num_layers=layers, tie_embeddings=tied, seed=7)


SENTENCES = ["the cat sees a dog", "some dogs sleep", "a", "", "the zebra sleeps",
             "<unk> cat near near near the dogs see some big cats"]


def test_next_word_distribution_sums_to_one(lm):
    state = lm.begin_state()
    for w in ["the", "cat", "zebra", "sees"]:
        p = 10.0 ** lm.next_logprobs([state])[0]
        assert p.sum() == pytest.approx(1.0, abs=1e-9)
        assert p[lm.bos_id] == 0.0  # <s> is never predicted
        _, state = lm.score_word(state, w)


def test_batched_sentence_scores_are_normalised(lm):
    # sum over every next word w of p(prefix w) / p(prefix) = 1, through the graph path
    prefix = "the big cat"
    base = lm.score(prefix, eos=False)
    nexts = [" ".join([prefix, w]) for w in lm.vocab if w not in ("<s>", "</s>")]
    total = np.sum(10.0 ** (lm.score_sentences(nexts, eos=False) - base))
    total += 10.0 ** (lm.score(prefix, eos=True) - base)
    assert total == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("bos,eos", [(True, True), (True, False), (False, True)])
def test_score_is_the_sum_of_score_word_steps(lm, bos, eos):
    for s in SENTENCES:
        state = lm.begin_state() if bos else lm.null_state()
        total = 0.0
        for w in s.split() + (["</s>"] if eos else []):
            logp, state = lm.score_word(state, w)
            total += logp
        assert lm.score(s, bos=bos, eos=eos) == pytest.approx(total, abs=1e-4), s


def test_batched_scores_equal_single_scores(lm):
    single = np.array([lm.score(s) for s in SENTENCES])
    for batch in (1, 2, 64):
        np.testing.assert_allclose(lm.score_sentences(SENTENCES, batch_size=batch), single,
                                   atol=1e-5)


def test_states_batch_and_branch(lm):
    s0 = lm.begin_state()
    _, a = lm.score_word(s0, "the")
    _, b = lm.score_word(s0, "a")
    _, aa = lm.score_word(a, "cat")
    batched = lm.next_logprobs([aa, b, s0, aa])  # lazy parents are computed on the way
    one = [lm.next_logprobs([s])[0] for s in (aa, b, s0)]
    np.testing.assert_allclose(batched[:3], np.stack(one), atol=1e-12)
    np.testing.assert_array_equal(batched[3], batched[0])
    assert aa.length == 3


def test_full_scores_and_unknown_words(lm):
    rows = list(lm.full_scores("the zebra sleeps"))
    assert [r[2] for r in rows] == [False, True, False, False]
    assert [r[1] for r in rows] == [2, 3, 4, 5]
    assert sum(r[0] for r in rows) == pytest.approx(lm.score("the zebra sleeps"), abs=1e-6)
    # an unknown word scores as <unk>
    assert lm.score("the zebra") == pytest.approx(lm.score("the <unk>"), abs=1e-9)


def test_perplexity_skips_oovs_like_srilm(lm):
    stats = lm.evaluate(["the zebra sleeps", "", "a dog"])
    assert (stats.sentences, stats.words, stats.oovs) == (2, 5, 1)
    rows = list(lm.full_scores("the zebra sleeps")) + list(lm.full_scores("a dog"))
    assert stats.logprob == pytest.approx(sum(r[0] for r in rows if not r[2]), abs=1e-6)
    assert lm.perplexity(["the zebra sleeps", "a dog"]) == pytest.approx(
        10 ** (-stats.logprob / (5 - 1 + 2)))


def test_same_interface_as_ngram_lm(lm):
    for name in ("score", "score_sentences", "full_scores", "perplexity", "begin_state",
                 "null_state", "score_word", "score_id", "word_id"):
        assert hasattr(NgramLM, name) and hasattr(lm, name), name
    assert lm.vocab[:3] == ["<unk>", "<s>", "</s>"]  # NgramLM.vocab: words, ids = positions


@pytest.mark.filterwarnings("ignore:LSTM with projections")
def test_log_probabilities_match_torch(lm):
    torch = pytest.importorskip("torch")
    c = lm.config
    vals = {k: torch.from_numpy(v.copy()) for k, v in lm.network.values().items()}
    rnn = torch.nn.LSTM(c.embed_dim, c.hidden_dim, c.num_layers, proj_size=c.proj_dim or 0)
    rnn.load_state_dict({k[len("lstm."):]: v for k, v in vals.items() if k.startswith("lstm.")})
    out_w = vals["embedding.E"] if c.tie_embeddings else vals["output.W"].T
    sentences = ["the cat sees a dog", "some dogs sleep", "a"]
    got = lm.word_scores(sentences)
    with torch.no_grad():
        for s, mine in zip(sentences, got):
            ids = [lm.bos_id] + [lm.word_id(w) for w in s.split()] + [lm.eos_id]
            x = torch.nn.functional.embedding(torch.tensor(ids[:-1]), vals["embedding.E"])
            h, _ = rnn(x[:, None, :])
            z = h[:, 0] @ out_w.T + vals["output.b"]
            z[:, lm.bos_id] = -torch.inf
            logp = torch.log_softmax(z.double(), -1)[torch.arange(len(ids) - 1), ids[1:]]
            np.testing.assert_allclose(mine, logp.numpy() / np.log(10), rtol=1e-5, atol=1e-5)


def test_scoring_batches_bounded_by_memory(lm, monkeypatch):
    import asrkit.nnlm.model as M

    want = lm.score_sentences(SENTENCES)
    monkeypatch.setattr(M, "SCORE_FLOATS", 3 * len(lm.vocab))  # at most 3 tokens a batch
    np.testing.assert_allclose(lm.score_sentences(SENTENCES), want, atol=1e-5)


def test_dropout_only_in_training():
    from asrkit.nnlm import TrainOptions

    voc = Vocabulary(["<unk>", "<s>", "</s>", *WORDS])
    lm = LstmLM.create(voc, 4, 4, dropout=0.5, seed=2)
    lm.fit(["the cat sees a dog", "some dogs sleep"] * 5, ["a cat sleeps"],
           TrainOptions(epochs=1, lr=0.01))
    assert lm.score("the dog") == lm.score("the dog")  # evaluation is deterministic
    state = lm.begin_state()
    lp, _ = lm.score_word(state, "the")
    assert lp == pytest.approx(lm.score("the", eos=False), abs=1e-5)
