"""The CTC prefix search scores the words that new prefixes end in one batch per frame
(``NgramLM.score_words``): the same hypotheses and scores as word-by-word ``score_word``."""

import math
import pathlib

import numpy as np
import pytest

from asrkit.decoders.ctc import ctc_prefix_beam_search
from asrkit.lm import NgramLM

DATA = pathlib.Path(__file__).resolve().parents[2] / "data" / "lm"


class _OneByOne:
    """The same LM seen through ``score_word`` only (no batch API)."""

    def __init__(self, lm):
        self.lm, self.calls = lm, 0

    def begin_state(self):
        return self.lm.begin_state()

    def score_word(self, state, word):
        self.calls += 1
        return self.lm.score_word(state, word)


class _Batched(_OneByOne):
    """The LM with its batch API, counting the batches and the words in them."""

    def __init__(self, lm):
        super().__init__(lm)
        self.batches = self.batched = 0

    def score_words(self, states, words):
        self.batches += 1
        self.batched += len(words)
        return self.lm.score_words(states, words)


@pytest.fixture(scope="module")
def lm():
    return NgramLM.load(DATA / "test.arpa")


def _spelled(lm, rng, frames=60):
    """Char-level scores that roughly spell a training sentence, with noise."""
    words = (DATA / "test.txt").read_text().splitlines()[3].split()
    tokens = ["<b>", "|"] + sorted({c for w in lm.vocab if w.isalpha() for c in w})
    target = [tokens.index(c) for c in "|".join(words)]
    idx = np.linspace(0, len(target) - 1e-9, frames).astype(int)
    logits = rng.normal(0, 1.5, (frames, len(tokens)))
    logits[np.arange(frames), np.asarray(target)[idx]] += 4.0
    logits[::3, 0] += 3.0
    lp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    return lp.astype(np.float32), tokens


@pytest.mark.parametrize("batch_min", [1, 8])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_batch_lm_step_equals_word_by_word(lm, seed, batch_min, monkeypatch):
    from asrkit.decoders import ctc

    monkeypatch.setattr(ctc._LmScorer, "BATCH_MIN", batch_min)
    lp, tokens = _spelled(lm, np.random.default_rng(seed))
    kw = dict(tokens=tokens, unit="char", beam=12, nbest=5, lm_weight=0.8, word_bonus=0.5)
    one, many = _OneByOne(lm), _Batched(lm)
    batched = ctc_prefix_beam_search(lp, lm=many, **kw)
    single = ctc_prefix_beam_search(lp, lm=one, **kw)
    assert one.calls > 20
    if batch_min == 1:  # every frame's new words went through one batch call
        assert many.batches > 5 and many.batched + many.calls >= one.calls - 1
    assert [(h.tokens, h.words) for h in batched] == [(h.tokens, h.words) for h in single]
    np.testing.assert_allclose([h.score for h in batched], [h.score for h in single],
                               rtol=0, atol=1e-9)
    # the LM part is the sentence's LM score (with </s>) weighted, plus the word bonus
    for h in batched:
        expect = 0.8 * math.log(10) * lm.score(" ".join(h.words)) + 0.5 * len(h.words)
        assert h.lm == pytest.approx(expect, abs=1e-6)
