"""Fixtures shared by the LM tests: the tiny shipped ARPA and its training text."""

import pathlib

import pytest

DATA = pathlib.Path(__file__).resolve().parents[2] / "data" / "lm"


@pytest.fixture(scope="session")
def test_arpa() -> pathlib.Path:
    """data/lm/test.arpa: a trigram KN model of data/lm/test.txt made by ``asrkit lm train``."""
    return DATA / "test.arpa"


@pytest.fixture(scope="session")
def test_text() -> pathlib.Path:
    """data/lm/test.txt: 50 sentences, 29 word types."""
    return DATA / "test.txt"


@pytest.fixture(scope="session")
def kenlm():
    """The KenLM python module (the reference for scores)."""
    return pytest.importorskip("kenlm")


def sentences_with_oovs(lines, rng, n=60):
    """Random sentences from the words of ``lines`` plus unknown words, empty ones included."""
    vocab = sorted({w for line in lines for w in line.split()}) + ["zebra", "qux", "<unk>"]
    out = list(lines[:10]) + [""]
    for _ in range(n):
        k = int(rng.integers(1, 12))
        out.append(" ".join(vocab[int(i)] for i in rng.integers(0, len(vocab), k)))
    return out
