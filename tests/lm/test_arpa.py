"""ARPA reading and writing: agreement with KenLM and clear errors on malformed files."""

import gzip
import math

import numpy as np
import pytest

from asrkit.lm import ArpaFormatError, NgramLM
from tests.lm.conftest import sentences_with_oovs

GOOD = """\
\\data\\
ngram 1=5
ngram 2=3

\\1-grams:
-1.5\t<unk>
-99\t<s>\t-0.5
-0.8\t</s>
-0.7\ta\t-0.3
-0.9\tb

\\2-grams:
-0.3\t<s> a
-0.4\ta b
-0.5\tb </s>

\\end\\
"""


def _write(tmp_path, text, name="m.arpa"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_scores_match_kenlm_on_shipped_model(test_arpa, test_text, kenlm, rng):
    lm = NgramLM.from_arpa(test_arpa)
    ref = kenlm.Model(str(test_arpa))
    assert lm.order == ref.order == 3
    lines = test_text.read_text().splitlines()
    for s in sentences_with_oovs(lines, rng):
        for bos in (True, False):
            for eos in (True, False):
                assert lm.score(s, bos=bos, eos=eos) == pytest.approx(
                    ref.score(s, bos=bos, eos=eos), abs=1e-4), (s, bos, eos)
        ours = list(lm.full_scores(s))
        theirs = list(ref.full_scores(s))
        assert [(n, o) for _, n, o in ours] == [(n, o) for _, n, o in theirs]


def test_written_arpa_loads_in_kenlm_with_same_scores(test_arpa, test_text, kenlm, rng,
                                                      tmp_path):
    lm = NgramLM.from_arpa(test_arpa)
    for name in ("copy.arpa", "copy.arpa.gz"):
        out = tmp_path / name
        lm.write_arpa(out)
        again = NgramLM.load(out)
        assert again.counts == lm.counts
        if name.endswith(".arpa"):
            ref = kenlm.Model(str(out))
            for s in sentences_with_oovs(test_text.read_text().splitlines(), rng, 20):
                assert again.score(s) == pytest.approx(ref.score(s), abs=1e-4)
                assert lm.score(s) == pytest.approx(again.score(s), abs=1e-6)
    assert list(again.iter_ngrams(2)) == list(lm.iter_ngrams(2))


def test_reads_kenlm_style_file_and_keeps_its_order(tmp_path, kenlm):
    # lmplz writes '# Input file' comments before \data\ and omits zero back-offs
    path = _write(tmp_path, "# Input file: corpus.txt\n# Token count: 3\n" + GOOD)
    lm = NgramLM.load(path)
    assert lm.vocab == ["<unk>", "<s>", "</s>", "a", "b"]
    assert [w for w, _, _ in lm.iter_ngrams(2)] == [("<s>", "a"), ("a", "b"), ("b", "</s>")]
    assert list(lm.iter_ngrams(1))[1] == (("<s>",), -99.0, -0.5)
    ref = kenlm.Model(str(path))
    for s in ["a b", "b a a", "c"]:
        assert lm.score(s) == pytest.approx(ref.score(s), abs=1e-5)


def test_missing_unk_gets_minus_100_like_kenlm(tmp_path, kenlm):
    text = GOOD.replace("ngram 1=5", "ngram 1=4").replace("-1.5\t<unk>\n", "")
    path = _write(tmp_path, text)
    lm = NgramLM.load(path)
    assert lm.vocab[-1] == "<unk>"
    assert lm.score("zebra", bos=False, eos=False) == pytest.approx(-100.0)
    assert lm.score("a zebra b") == pytest.approx(kenlm.Model(str(path)).score("a zebra b"),
                                                  abs=1e-4)


@pytest.mark.parametrize("old,new,message,line", [
    ("ngram 2=3", "ngram 2=x", "bad count header", 3),
    ("ngram 2=3", "ngram 2=4", "count mismatch", 16),
    ("-0.4\ta b", "-0.4\ta b c d", "wrong number of fields", 14),
    ("-0.5\tb </s>", "-0.5\tb </s>\t-0.1", "wrong number of fields", 15),
    ("-0.7\ta\t-0.3", "-0.7x\ta\t-0.3", "non-numeric", 9),
    ("-0.3\t<s> a", "-0.3\t<s> zz", "not among the unigrams", 13),
    ("\\end\\\n", "", "missing \\end\\", 16),
    ("\\2-grams:", "\\3-grams:", "expected \\2-grams:", 12),
    ("-0.4\ta b", "nan\ta b", "log10 probability 'nan' is not a number <= 0", 14),
    ("-0.4\ta b", "inf\ta b", "log10 probability 'inf' is not a number <= 0", 14),
    ("-0.4\ta b", "0.25\ta b", "log10 probability '0.25' is not a number <= 0", 14),
    ("-0.7\ta\t-0.3", "-0.7\ta\tnan", "back-off weight 'nan' is not a finite", 9),
    ("-0.7\ta\t-0.3", "-0.7\ta\t-1e39", "back-off weight '-1e39' is not a finite", 9),
])
def test_malformed_arpa_errors_name_the_line(tmp_path, old, new, message, line):
    path = _write(tmp_path, GOOD.replace(old, new))
    with pytest.raises(ArpaFormatError) as err:
        NgramLM.load(path)
    assert message in str(err.value)
    assert f"{path}:{line}:" in str(err.value)


def test_duplicate_ngram_is_an_error(tmp_path):
    path = _write(tmp_path, GOOD.replace("ngram 2=3", "ngram 2=4").replace(
        "-0.4\ta b\n", "-0.4\ta b\n-0.4\ta b\n"))
    with pytest.raises(ArpaFormatError, match=f"{path}:15: 2-gram 'a b' is listed twice "
                       r"\(also at line 14\)"):
        NgramLM.load(path)


def test_minus_infinity_is_a_probability_of_zero(tmp_path, kenlm):
    path = _write(tmp_path, GOOD.replace("-0.4\ta b", "-inf\ta b"))
    lm = NgramLM.load(path)
    assert lm.score("a b", bos=False, eos=False) == -math.inf
    assert kenlm.Model(str(path)).score("a b", bos=False, eos=False) == -math.inf


@pytest.mark.parametrize("damage", [lambda d: d[: len(d) // 2], lambda d: d[:10] + b"x" * 40])
def test_damaged_gzip_names_the_file(tmp_path, damage):
    path = tmp_path / "lm.arpa.gz"
    path.write_bytes(damage(gzip.compress(GOOD.encode())))
    with pytest.raises(ArpaFormatError, match=f"{path}:\\d+: cannot decompress"):
        NgramLM.load(path)


def test_not_an_arpa_file(tmp_path):
    with pytest.raises(ArpaFormatError, match="no \\\\data\\\\"):
        NgramLM.load(_write(tmp_path, "hello\nworld\n"))


def test_iter_ngrams_round_trips_through_tables(test_arpa):
    lm = NgramLM.from_arpa(test_arpa)
    for n in range(1, lm.order + 1):
        listed = list(lm.iter_ngrams(n))
        assert len(listed) == lm.counts[n - 1]
        words, prob, bow = lm.ngram_arrays(n)
        assert np.allclose([p for _, p, _ in listed], prob)
        assert [w for w, _, _ in listed] == [tuple(lm.vocab[i] for i in r) for r in words]
        if n == lm.order:
            assert all(b == 0.0 for _, _, b in listed)


@pytest.mark.parametrize("order,discount,prune", [
    (2, "kneser-ney", None), (4, "kneser-ney", None), (3, "witten-bell", None),
    (3, "absolute", None), (4, "kneser-ney", 1e-3)])
def test_trained_models_score_alike_in_kenlm(test_text, kenlm, rng, tmp_path, order, discount,
                                             prune):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        from asrkit.lm import train

        lm = train(str(test_text), order, discount=discount, prune=prune)
    path = tmp_path / "lm.arpa"
    lm.write_arpa(path)
    ref = kenlm.Model(str(path))
    sents = sentences_with_oovs(test_text.read_text().splitlines(), rng, 100)
    ours = lm.score_sentences(sents)
    theirs = np.array([ref.score(s) for s in sents])
    np.testing.assert_allclose(ours, theirs, atol=1e-4)
