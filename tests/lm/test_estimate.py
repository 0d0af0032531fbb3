"""Estimation: normalisation of every context, and probabilities against a plain-Python
implementation of the formulas (Chen & Goodman's interpolated modified Kneser-Ney with lmplz's
conventions, Witten-Bell, absolute discounting) written with dicts, independent of the
vectorised code."""

import collections
import math
import warnings

import numpy as np
import pytest

from asrkit.lm import NgramLM, count_ngrams, estimate, train

TEXT = ["a b c a", "b c", "a a b", "c b a b c", "a c", "d <unk> a", "b b b c a", "c a b"]


def _normalisation_errors(lm):
    words = [w for w in lm.vocab if w != "<s>"]
    contexts = [()] + [tuple(lm.word_id(w) for w in ws)
                       for n in range(1, lm.order) for ws, _, _ in lm.iter_ngrams(n)]
    worst = 0.0
    for ctx in contexts:
        total = sum(10 ** lm.score_id(ctx, lm.word_id(w))[0] for w in words)
        worst = max(worst, abs(total - 1.0))
    return worst


@pytest.mark.parametrize("discount", ["kneser-ney", "witten-bell", "absolute"])
@pytest.mark.parametrize("cutoffs", [None, [0, 1], [0, 0, 1]])
def test_every_context_sums_to_one(test_text, discount, cutoffs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for text, order in ((TEXT, 3), (str(test_text), 3), (str(test_text), 4)):
            lm = train(text, order, discount=discount, cutoffs=cutoffs)
            assert _normalisation_errors(lm) < 1e-5


def _reference(lines, order, method, discounts=None):
    """p(w | h) for every counted n-gram, straight from the formulas with dicts."""
    counts = [collections.Counter() for _ in range(order)]
    vocab = {"<unk>", "</s>"}
    for line in lines:
        toks = ["<s>"] + line.split() + ["</s>"]
        vocab.update(toks[1:])
        for n in range(1, order + 1):
            for i in range(len(toks) - n + 1):
                counts[n - 1][tuple(toks[i:i + n])] += 1
    adj = [dict(c) for c in counts]
    if method == "kneser-ney":
        for n in range(1, order):
            cont = collections.Counter(g[1:] for g in counts[n])
            adj[n - 1] = {g: (c if g[0] == "<s>" else cont[g]) for g, c in counts[n - 1].items()}
    adj[0][("<s>",)] = 0
    for w in vocab:
        adj[0].setdefault((w,), 0)
    prob = {}
    for n in range(1, order + 1):
        a = {g: c for g, c in adj[n - 1].items() if g != ("<s>",)}
        by_ctx = collections.defaultdict(list)
        for g, c in a.items():
            by_ctx[g[:-1]].append((g, c))
        for items in by_ctx.values():
            total = sum(c for _, c in items)
            if method == "witten-bell":
                types = sum(1 for _, c in items if c > 0)
                u = {g: c / (total + types) for g, c in items}
            elif method == "absolute":
                d = discounts[n - 1][0]
                u = {g: max(c - d, 0) / total for g, c in items}
            else:
                d = (0.0, *discounts[n - 1])
                u = {g: (c - d[min(c, 3)]) / total for g, c in items}
            gamma = 1.0 - sum(u.values())
            for g in u:
                # the uniform distribution is over the vocabulary without <s>
                lower = 1.0 / len(vocab) if n == 1 else prob[g[1:]]
                prob[g] = u[g] + gamma * lower
    return prob


@pytest.mark.parametrize("discount", ["kneser-ney", "witten-bell", "absolute"])
def test_probabilities_match_reference_formulas(test_text, discount):
    lines = test_text.read_text().splitlines() + TEXT
    counts = count_ngrams(lines, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        lm = estimate(counts, discount=discount)
    ref = _reference(lines, 3, discount, lm.meta["discounts"])
    checked = 0
    for n in (1, 2, 3):
        for words, logp, _ in lm.iter_ngrams(n):
            if words == ("<s>",):
                assert logp == -99.0
                continue
            assert logp == pytest.approx(math.log10(ref[words]), abs=2e-6), words
            checked += 1
    assert checked == len(ref)  # every n-gram but <s>, which ref leaves out


def test_kneser_ney_discounts_follow_chen_goodman(test_text):
    counts = count_ngrams(str(test_text), 3)
    lm = estimate(counts)
    adj3 = counts.counts[2]
    n = [int(np.sum(adj3 == j)) for j in (1, 2, 3, 4)]
    y = n[0] / (n[0] + 2 * n[1])
    expect = (1 - 2 * y * n[1] / n[0], 2 - 3 * y * n[2] / n[1], 3 - 4 * y * n[3] / n[2])
    assert lm.meta["discounts"][2] == pytest.approx(expect)


def test_shipped_arpa_is_what_train_produces(test_arpa, test_text):
    lm = train(str(test_text), 3)
    shipped = NgramLM.load(test_arpa)
    assert lm.counts == shipped.counts
    for n in (1, 2, 3):
        a, b = list(lm.iter_ngrams(n)), list(shipped.iter_ngrams(n))
        assert [w for w, _, _ in a] == [w for w, _, _ in b]
        assert np.allclose([p for _, p, _ in a], [p for _, p, _ in b], atol=1e-6)
        assert np.allclose([x for _, _, x in a], [x for _, _, x in b], atol=1e-6)


def test_unk_gets_interpolated_mass_and_oov_scores_as_unk():
    lm = train(["a b", "b a", "a a b b"], 2, discount="witten-bell")
    p_unk = lm.score_id((), lm.unk_id)[0]
    assert -10 < p_unk < 0
    assert lm.score("zebra", bos=False, eos=False) == pytest.approx(p_unk)


def test_cutoffs_drop_rare_ngrams(test_text):
    full = train(str(test_text), 3)
    cut = train(str(test_text), 3, cutoffs=[0, 1, 1])
    assert cut.counts[0] == full.counts[0]
    assert cut.counts[1] < full.counts[1] and cut.counts[2] < full.counts[2]
    with pytest.raises(ValueError, match="must not decrease"):
        train(str(test_text), 3, cutoffs=[0, 2, 1])
    with pytest.raises(ValueError, match="first cut-off must be 0"):
        train(str(test_text), 3, cutoffs=[1])


def test_kn_fallback_warns_on_tiny_data():
    with pytest.warns(RuntimeWarning, match="fallback"):
        train(["a b c"], 3)
