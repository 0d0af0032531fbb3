"""Training on the grammar corpus: against n-gram baselines, newbob, batching, reproducibility."""

import numpy as np
import pytest

from asrkit.nnlm import LstmLM, TrainOptions, Vocabulary, bucket_batches
from tests.nnlm.conftest import ngram


def test_lstm_beats_unigram_and_approaches_trigram(trained_lm, train_text, dev_text):
    lstm = trained_lm.perplexity(dev_text)
    unigram = ngram(train_text, 1).perplexity(dev_text)
    trigram = ngram(train_text, 3).perplexity(dev_text)
    assert lstm < 0.5 * unigram
    # the grammar's subject-verb agreement spans more than two words, so the LSTM may even win
    assert lstm < 1.1 * trigram, (lstm, trigram, unigram)


def test_history_follows_newbob(trained_lm):
    h = trained_lm.history
    assert 1 <= len(h) <= 8
    lrs = [e["lr"] for e in h]
    assert all(b <= a for a, b in zip(lrs, lrs[1:]))  # the rate never grows
    accepted = [e["valid_ppl"] for e in h if e["accepted"]]
    assert accepted == sorted(accepted, reverse=True)  # only improvements are kept
    # the model holds the best epoch's parameters
    assert trained_lm.history[-1]["epoch"] == len(h)


def test_training_is_seeded_and_writes_the_best_model(tmp_path, train_text, dev_text):
    opts = TrainOptions(epochs=2, lr=0.01, batch_size=32, seed=5)
    out = tmp_path / "lm.npz"
    a = LstmLM.train(train_text[:200], dev_text[:50], embed_dim=8, hidden_dim=8, options=opts,
                     output=out)
    b = LstmLM.train(train_text[:200], dev_text[:50], embed_dim=8, hidden_dim=8, options=opts)
    for k, v in a.network.values().items():
        np.testing.assert_array_equal(v, b.network.values()[k], err_msg=k)
    assert [e["valid_ppl"] for e in a.history] == [e["valid_ppl"] for e in b.history]
    loaded = LstmLM.load(out)
    assert loaded.score("the cat sleeps") == a.score("the cat sleeps")
    assert [e["epoch"] for e in loaded.history] == [1, 2]


def test_rejected_epoch_restores_the_previous_parameters(train_text, dev_text):
    # an absurd learning rate makes the epoch worse: newbob rejects it and halves the rate
    lm = LstmLM.train(train_text[:100], dev_text[:30], embed_dim=8, hidden_dim=8,
                      options=TrainOptions(epochs=2, lr=0.01, seed=0))
    before = {k: v.copy() for k, v in lm.network.values().items()}
    opts = TrainOptions(epochs=1, optimizer="sgd", lr=1e3, clip_norm=0.0, seed=1)
    hist = lm.fit(train_text[:100], dev_text[:30], opts)
    assert hist[-1]["accepted"] is False
    for k, v in lm.network.values().items():
        np.testing.assert_array_equal(v, before[k], err_msg=k)


def test_held_out_validation_when_none_is_given(train_text):
    lm = LstmLM.create(Vocabulary.from_sentences(s.split() for s in train_text), 4, 4)
    hist = lm.fit(train_text[:60], None, TrainOptions(epochs=1, valid_fraction=0.1))
    assert hist[0]["tokens"] < sum(len(s.split()) + 1 for s in train_text[:60])


def test_bucket_batches_cover_everything_with_similar_lengths():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 30, 200)
    batches = bucket_batches(lengths, 16, 0, np.random.default_rng(1))
    assert sorted(np.concatenate(batches).tolist()) == list(range(200))
    assert all(len(b) <= 16 for b in batches)
    spread = np.mean([lengths[b].max() - lengths[b].min() for b in batches])
    assert spread <= 3  # sorted runs: little padding
    capped = bucket_batches(lengths, 16, 60, np.random.default_rng(1))
    assert all(len(b) * lengths[b].max() <= 60 or len(b) == 1 for b in capped)
    again = bucket_batches(lengths, 16, 0, np.random.default_rng(1))
    assert all(np.array_equal(x, y) for x, y in zip(batches, again))


def test_bad_options_are_rejected():
    with pytest.raises(ValueError, match="optimizer"):
        TrainOptions(optimizer="adagrad")
    with pytest.raises(ValueError, match="lr_decay"):
        TrainOptions(lr_decay=0.0)


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_resumed_training_ends_exactly_as_an_uninterrupted_run(tmp_path, train_text, dev_text,
                                                                optimizer):
    data = (train_text[:150], dev_text[:40])
    kw = dict(embed_dim=8, hidden_dim=8, dropout=0.1)
    opts = dict(lr=0.02 if optimizer == "adam" else 0.5, momentum=0.5 if optimizer == "sgd"
                else 0.0, optimizer=optimizer, batch_size=16, seed=3)
    whole = LstmLM.train(*data, options=TrainOptions(epochs=4, **opts), **kw)
    ckpt = tmp_path / "state.npz"
    part = LstmLM.train(*data, options=TrainOptions(epochs=2, **opts), checkpoint=ckpt, **kw)
    assert len(part.history) == 2
    resumed = LstmLM.create(part.vocabulary, seed=99, **kw)  # other initial weights: replaced
    resumed.fit(*data, TrainOptions(epochs=4, **opts), checkpoint=ckpt, resume=True)
    assert [e["valid_ppl"] for e in resumed.history] == [e["valid_ppl"] for e in whole.history]
    for k, v in whole.network.values().items():
        np.testing.assert_array_equal(resumed.network.values()[k], v, err_msg=k)
    # the training state also loads as a model
    assert LstmLM.load(ckpt).score("the cat sleeps") == resumed.score("the cat sleeps")


def test_resume_refuses_another_network(tmp_path, train_text):
    from asrkit.nnlm import ModelFileError

    ckpt = tmp_path / "state.npz"
    a = LstmLM.train(train_text[:30], embed_dim=4, hidden_dim=4,
                     options=TrainOptions(epochs=1), checkpoint=ckpt)
    b = LstmLM.create(a.vocabulary, embed_dim=4, hidden_dim=6)
    with pytest.raises(ModelFileError, match="state.npz.*differs"):
        b.fit(train_text[:30], None, TrainOptions(epochs=2), checkpoint=ckpt, resume=True)
