"""Relative-entropy pruning: the criterion against a brute-force relative entropy, and the
pruned model's normalisation and KenLM compatibility."""

import math

import numpy as np
import pytest

from asrkit.lm import NgramLM, prune_entropy, train
from tests.lm.test_estimate import _normalisation_errors


def _brute_force_change(lm, ctx_words, w):
    """10**D - 1 for dropping the top-order n-gram (ctx, w): D = P(h) KL(p(.|h) || p'(.|h))."""
    vocab = [v for v in lm.vocab if v != "<s>"]
    ctx = tuple(lm.word_id(x) for x in ctx_words)
    listed = {ws[-1]: p for ws, p, _ in lm.iter_ngrams(lm.order) if ws[:-1] == ctx_words}
    lower = {v: lm.score_id(ctx[1:], lm.word_id(v))[0] for v in vocab}
    p = {v: lm.score_id(ctx, lm.word_id(v))[0] for v in vocab}
    rest = [v for v in listed if v != w]
    bo = (1 - sum(10 ** listed[v] for v in rest)) / (1 - sum(10 ** lower[v] for v in rest))
    q = {v: listed[v] if v in rest else math.log10(bo) + lower[v] for v in vocab}
    kl = sum(10 ** p[v] * (p[v] - q[v]) for v in vocab)
    # P(h): chain rule, <s> has probability 1
    state, logp = lm.null_state(), 0.0
    for i, x in enumerate(ctx_words):
        if i == 0 and x == "<s>":
            state = lm.begin_state()
            continue
        lp, state = lm.score_word(state, x)
        logp += lp
    return 10 ** (10 ** logp * kl) - 1


def test_top_order_pruning_follows_brute_force_relative_entropy(test_arpa):
    lm = NgramLM.load(test_arpa)
    changes = {ws: _brute_force_change(lm, ws[:-1], ws[-1]) for ws, _, _ in lm.iter_ngrams(3)}
    threshold = float(np.median(list(changes.values())))
    pruned = prune_entropy(lm, threshold)
    kept = {ws for ws, _, _ in pruned.iter_ngrams(3)}
    expect = {ws for ws, c in changes.items() if c >= threshold}
    assert kept == expect


@pytest.mark.parametrize("threshold", [1e-4, 1e-3, 1e-2, 0.1])
def test_pruned_models_stay_normalised_and_shrink(test_text, threshold):
    lm = train(str(test_text), 3)
    pruned = prune_entropy(lm, threshold)
    assert sum(pruned.counts) < sum(lm.counts)
    assert pruned.counts[0] == lm.counts[0]
    assert _normalisation_errors(pruned) < 1e-5
    # closure: every prefix and suffix of a listed n-gram is listed
    listed = {ws for n in (1, 2, 3) for ws, _, _ in pruned.iter_ngrams(n)}
    for ws in listed:
        if len(ws) > 1:
            assert ws[:-1] in listed and ws[1:] in listed


def test_pruned_arpa_scores_alike_in_kenlm(test_text, kenlm, tmp_path):
    pruned = train(str(test_text), 3, prune=1e-3)
    path = tmp_path / "pruned.arpa"
    pruned.write_arpa(path)
    ref = kenlm.Model(str(path))
    for s in test_text.read_text().splitlines()[:20] + ["zebra the cat", "she she she"]:
        assert pruned.score(s) == pytest.approx(ref.score(s), abs=1e-4)


def test_zero_threshold_keeps_everything(test_arpa):
    lm = NgramLM.load(test_arpa)
    assert prune_entropy(lm, 0.0).counts == lm.counts
    with pytest.raises(ValueError):
        prune_entropy(lm, -1.0)
