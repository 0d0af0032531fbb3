"""CTC greedy and prefix beam search: exact against brute force, and LM shallow fusion."""

import itertools
import math

import numpy as np
import pytest

from asrkit.decoders.ctc import ctc_greedy, ctc_greedy_batch, ctc_prefix_beam_search
from asrkit.decoders.decodable import MatrixDecodable


def _log_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def _collapse(path, blank=0):
    out, prev = [], None
    for p in path:
        if p != prev and p != blank:
            out.append(p)
        prev = p
    return tuple(out)


def _brute_force(lp, blank=0):
    totals = {}
    T, C = lp.shape
    for path in itertools.product(range(C), repeat=T):
        s = sum(lp[t, c] for t, c in enumerate(path))
        key = _collapse(path, blank)
        totals[key] = np.logaddexp(totals.get(key, -np.inf), s)
    return totals


def test_greedy_collapses_repeats_and_blanks():
    lp = np.log(np.eye(4)[[1, 1, 0, 1, 2, 2, 3, 0]] * 0.97 + 0.01)
    assert ctc_greedy(lp) == [1, 1, 2, 3]
    assert ctc_greedy(lp, length=3) == [1]
    batch = np.stack([lp, lp[::-1]], axis=1)
    assert ctc_greedy_batch(batch, np.array([8, 8])) == [[1, 1, 2, 3], [3, 2, 1, 1]]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("blank", [0, 2])
def test_prefix_beam_search_is_exact_with_a_wide_beam(seed, blank):
    rng = np.random.default_rng(seed)
    lp = _log_softmax(rng.normal(size=(5, 3)) * 2)
    exact = _brute_force(lp, blank)
    hyps = ctc_prefix_beam_search(lp, blank=blank, beam=1000, token_beam=1e9, nbest=5)
    best = max(exact, key=exact.get)
    assert tuple(hyps[0].tokens) == best
    for h in hyps:
        assert h.score == pytest.approx(exact[tuple(h.tokens)], abs=1e-5)


def test_decodable_and_array_agree(rng):
    lp = _log_softmax(rng.normal(size=(20, 6)))
    a = ctc_prefix_beam_search(lp, beam=8)
    b = ctc_prefix_beam_search(MatrixDecodable(lp), beam=8)
    assert a[0].tokens == b[0].tokens and a[0].score == pytest.approx(b[0].score)


class BigramLM:
    """A tiny log10 bigram LM with the asrkit.lm state API, for testing fusion alone."""

    def __init__(self, probs, unk=1e-4):
        self.probs, self.unk = probs, unk

    def begin_state(self):
        return "<s>"

    def score_word(self, state, word):
        return math.log10(self.probs.get((state, word), self.unk)), word


def _spell(chars, tokens, frames_per_char=2, confusions=None):
    """Peaked log-probs spelling ``chars``; ``confusions[i] = (other, p)`` blurs char i."""
    idx = {t: i for i, t in enumerate(tokens)}
    rows = []
    for i, ch in enumerate(chars):
        for _ in range(frames_per_char):
            p = np.full(len(tokens), 1e-4)
            p[idx[ch]] = 1.0
            if confusions and i in confusions:
                other, w = confusions[i]
                p[idx[ch]], p[idx[other]] = 1 - w, w
            rows.append(p / p.sum())
        p = np.full(len(tokens), 1e-4)
        p[0] = 1.0
        rows.append(p / p.sum())
    return np.log(np.array(rows))


def test_char_lm_fusion_fixes_an_acoustically_ambiguous_word():
    tokens = ["<blk>", "|", "t", "w", "o", "n", "e"]
    # acoustics slightly prefer "tw e" over "two" at the last letter
    lp = _spell("one|two", tokens, confusions={6: ("e", 0.55)})
    plain = ctc_prefix_beam_search(lp, tokens, unit="char")
    assert plain[0].words == ["one", "twe"]
    lm = BigramLM({("<s>", "one"): 0.5, ("one", "two"): 0.5, ("two", "</s>"): 0.9,
                   ("twe", "</s>"): 0.9})
    fused = ctc_prefix_beam_search(lp, tokens, unit="char", lm=lm, lm_weight=1.0)
    assert fused[0].words == ["one", "two"]
    assert fused[0].lm == pytest.approx(math.log(0.5 * 0.5 * 0.9))


def test_word_and_bpe_units():
    words = ["<blk>", "one", "two"]
    lp = _spell(["one", "two", "two"], words, frames_per_char=1)
    assert ctc_prefix_beam_search(lp, words, unit="word")[0].words == ["one", "two", "two"]
    pieces = ["<blk>", "\u2581o", "ne", "\u2581t", "wo"]
    lp = _spell(["\u2581o", "ne", "\u2581t", "wo"], pieces)
    assert ctc_prefix_beam_search(lp, pieces, unit="bpe")[0].words == ["one", "two"]


def test_lm_without_tokens_is_an_error():
    with pytest.raises(ValueError, match="token strings"):
        ctc_prefix_beam_search(np.zeros((2, 3)), lm=BigramLM({}))
