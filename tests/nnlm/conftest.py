"""Shared fixtures: a corpus from the test grammar, an n-gram baseline and a trained LSTM LM."""

import io
import warnings

import pytest

from asrkit.nnlm import LstmLM, TrainOptions
from tests.nnlm.grammar import corpus


@pytest.fixture(scope="session")
def train_text():
    return corpus(800, seed=1)


@pytest.fixture(scope="session")
def dev_text():
    return corpus(200, seed=2)


def ngram(text, order):
    """An asrkit.lm Kneser-Ney model of ``order`` trained on the sentences ``text``."""
    from asrkit.lm import train

    with warnings.catch_warnings():  # tiny data: KN discounts fall back, which is fine here
        warnings.simplefilter("ignore", RuntimeWarning)
        return train(io.StringIO("\n".join(text) + "\n"), order=order)


@pytest.fixture(scope="session")
def trained_lm(train_text, dev_text):
    """A small LSTM LM trained on the grammar (about 2 s)."""
    return LstmLM.train(train_text, dev_text, embed_dim=16, hidden_dim=32,
                        options=TrainOptions(epochs=8, lr=0.01, batch_size=16, seed=0))
