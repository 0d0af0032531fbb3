"""WER/CER scoring against jiwer, and the sclite-style report and command."""

import collections
import json
import subprocess
import sys

import jiwer
import numpy as np
import pytest

from asrkit.decoders.scoring import align, score_texts, split_report, tokenize

VOCAB = ["one", "two", "three", "four", "oh", "five"]


def _random_sentence(rng, max_len=8):
    return " ".join(rng.choice(VOCAB, size=rng.integers(0, max_len + 1)))


def test_alignment_counts_match_edit_distance_of_jiwer(rng):
    refs, hyps = [], []
    for _ in range(200):
        r = _random_sentence(rng) or "one"
        h = _random_sentence(rng)
        refs.append(r)
        hyps.append(h)
        a = align(r.split(), h.split())
        out = jiwer.process_words(r, h)
        assert a.errors == out.substitutions + out.deletions + out.insertions
        # the alignment is consistent: removing Nones from each side gives the inputs back
        assert [t for t in a.ref if t is not None] == r.split()
        assert [t for t in a.hyp if t is not None] == h.split()
    rep = score_texts({str(i): r for i, r in enumerate(refs)},
                      {str(i): h for i, h in enumerate(hyps)})
    assert rep.error_rate == pytest.approx(100 * jiwer.wer(refs, hyps))


def test_cer_matches_jiwer_without_spaces(rng):
    refs = [_random_sentence(rng) or "oh" for _ in range(50)]
    hyps = [_random_sentence(rng) for _ in range(50)]
    rep = score_texts(dict(enumerate(refs)), dict(enumerate(hyps)), unit="char")
    expect = jiwer.cer([r.replace(" ", "") for r in refs], [h.replace(" ", "") for h in hyps])
    assert rep.error_rate == pytest.approx(100 * expect)
    assert tokenize("ab c", "char", keep_spaces=True) == ["a", "b", " ", "c"]


def test_known_alignment_and_report():
    a = align("the cat sat on the mat".split(), "the cat sat in mat mat too".split())
    assert (a.count("S"), a.count("D"), a.count("I")) == (2, 0, 1)
    rep = score_texts({"u1": "the cat sat on the mat", "u2": "one two"}, {"u1":
                      "the cat sat in mat mat too"})
    assert rep.missing_hyps == ["u2"]
    assert rep.deletions == 2 and rep.num_ref == 8
    assert rep.summary_line() == "%WER 62.50 [ 5 / 8, 1 ins, 2 del, 2 sub ]"
    text = rep.report()
    assert "id: u1" in text and "REF:" in text and "%SER 100.00 [ 2 / 2 ]" in text


def _jiwer_confusions(ref: str, hyp: str) -> dict:
    """jiwer's error counts, its multi-word chunks split into words."""
    subs, ins, dels = jiwer.collect_error_counts(jiwer.process_words(ref, hyp))
    out = {"substitutions": collections.Counter(), "insertions": collections.Counter(),
           "deletions": collections.Counter()}
    for (r, h), n in subs.items():
        for pair in zip(r.split(), h.split(), strict=True):
            out["substitutions"][pair] += n
    for kind, counts in (("insertions", ins), ("deletions", dels)):
        for words, n in counts.items():
            for w in words.split():
                out[kind][w] += n
    return out


def test_confusion_pairs_insertions_and_deletions_match_jiwer(rng):
    # edits kept apart by two correct words, substituted and inserted words never in the reference:
    # one best alignment, so both tools must count the same pairs
    base, other = [f"w{i}" for i in range(12)], [f"x{i}" for i in range(4)]
    refs, hyps, total = {}, {}, {"substitutions": collections.Counter(),
                                 "insertions": collections.Counter(),
                                 "deletions": collections.Counter()}
    for k in range(150):
        ref = list(rng.choice(base, size=int(rng.integers(4, 13)), replace=False))
        hyp = []
        for i, w in enumerate(ref):
            op = rng.choice(["C", "S", "D", "I"], p=[0.55, 0.15, 0.15, 0.15]) \
                if i % 3 == 0 else "C"
            hyp += {"C": [w], "S": [str(rng.choice(other))], "D": [],
                    "I": [w, str(rng.choice(other))]}[op]
        refs[f"u{k}"], hyps[f"u{k}"] = " ".join(ref), " ".join(hyp)
        expected = _jiwer_confusions(refs[f"u{k}"], hyps[f"u{k}"])
        one = score_texts({"u": refs[f"u{k}"]}, {"u": hyps[f"u{k}"]}).confusions()
        assert one == expected, (refs[f"u{k}"], hyps[f"u{k}"])
        for kind in total:
            total[kind] += expected[kind]
    rep = score_texts(refs, hyps)
    assert rep.confusions() == total
    assert sum(total["substitutions"].values()) == rep.substitutions > 20
    d = rep.as_dict()["confusions"]
    assert {(r, h): n for r, h, n in d["substitutions"]} == total["substitutions"]
    assert [n for _, _, n in d["substitutions"]] == sorted(total["substitutions"].values(),
                                                            reverse=True)
    assert {w: n for w, n in d["deletions"]} == total["deletions"]
    top = rep.top_errors(3)
    everything = [(f"{r} -> {h}", n) for (r, h), n in total["substitutions"].items()] + \
        [(f"+ {w}", n) for w, n in total["insertions"].items()] + \
        [(f"- {w}", n) for w, n in total["deletions"].items()]
    assert top == sorted(everything, key=lambda x: (-x[1], x[0]))[:3]


def test_report_lists_the_most_frequent_errors_as_sclite_does():
    rep = score_texts({"a": "six six three", "b": "six one", "c": "two"},
                      {"a": "eight eight three", "b": "eight one two", "c": ""})
    text = rep.report(confusions=2)
    assert text.split("\n%SER")[1].split("\n\n", 1)[1] == (
        "CONFUSION PAIRS                  Total (3)\n"
        "   1:    3  ->  six ==> eight\n\n"
        "INSERTIONS                       Total (1)\n"
        "   1:    1  ->  two\n\n"
        "DELETIONS                        Total (1)\n"
        "   1:    1  ->  two")
    assert rep.top_errors(5) == [("six -> eight", 3), ("+ two", 1), ("- two", 1)]
    assert "CONFUSION PAIRS" not in rep.report(confusions=0)
    perfect = score_texts({"a": "one"}, {"a": "one"})
    assert "CONFUSION" not in perfect.report() and perfect.top_errors() == []


def test_extra_hypothesis_is_an_error():
    with pytest.raises(ValueError, match="no reference"):
        score_texts({"a": "x"}, {"a": "x", "b": "y"})


def test_score_command(tmp_path):
    (tmp_path / "ref").write_text("u1 one two three\nu2 four five\n")
    (tmp_path / "hyp").write_text("u1 one too three\nu2 four five\n")
    cmd = [sys.executable, "-m", "asrkit", "score"]
    r = subprocess.run(cmd + [str(tmp_path / "ref"), str(tmp_path / "hyp")],
                       capture_output=True, text=True, check=True)
    assert "%WER 20.00 [ 1 / 5, 0 ins, 0 del, 1 sub ]" in r.stdout
    r = subprocess.run(cmd + ["--json", str(tmp_path / "ref"), str(tmp_path / "hyp")],
                       capture_output=True, text=True, check=True)
    d = json.loads(r.stdout)
    assert d["substitutions"] == 1 and np.isclose(d["error_rate"], 20.0)
    (tmp_path / "dup").write_text("u1 a\nu1 b\n")
    r = subprocess.run(cmd + [str(tmp_path / "dup"), str(tmp_path / "hyp")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "dup:2: duplicate utterance id 'u1'" in r.stderr
    r = subprocess.run(cmd + [str(tmp_path / "ref"), str(tmp_path / "hyp")],
                       capture_output=True, text=True, check=True)
    assert r.stdout.rstrip().endswith("CONFUSION PAIRS                  Total (1)\n"
                                      "   1:    1  ->  two ==> too\n\n"
                                      "INSERTIONS                       Total (0)\n\n"
                                      "DELETIONS                        Total (0)")
    r = subprocess.run(cmd + ["--confusions", "0", str(tmp_path / "ref"), str(tmp_path / "hyp")],
                       capture_output=True, text=True, check=True)
    assert "CONFUSION" not in r.stdout
    for bad in (["--confusions", "-1"], ["--worst", "-2"]):
        r = subprocess.run(cmd + bad + [str(tmp_path / "ref"), str(tmp_path / "hyp")],
                           capture_output=True, text=True)
        assert r.returncode == 2 and r.stderr.strip().endswith(
            f"{bad[0]} must be at least 0, got {bad[1]}") and "Traceback" not in r.stderr


def test_per_speaker_scores_match_jiwer_on_each_speaker(rng, tmp_path):
    refs = {f"s{i % 3}-u{i}": _random_sentence(rng) or "one" for i in range(60)}
    hyps = {u: _random_sentence(rng) for u in refs}
    hyps.pop("s1-u4")                           # a missing hypothesis: all deletions
    groups = {u: u.split("-")[0] for u in refs}
    parts = split_report(score_texts(refs, hyps), groups)
    assert sorted(parts) == ["s0", "s1", "s2"]
    for spk, rep in parts.items():
        utts = sorted(u for u in refs if groups[u] == spk)
        expected = jiwer.wer([refs[u] for u in utts], [hyps.get(u, "") for u in utts])
        assert rep.error_rate == pytest.approx(100 * expected)
        assert rep.num_sentences == len(utts)
    assert parts["s1"].missing_hyps == ["s1-u4"]
    (tmp_path / "ref").write_text("".join(f"{u} {t}\n" for u, t in refs.items()))
    (tmp_path / "hyp").write_text("".join(f"{u} {t}\n" for u, t in hyps.items()))
    (tmp_path / "utt2spk").write_text("".join(f"{u} {g}\n" for u, g in groups.items()))
    r = subprocess.run([sys.executable, "-m", "asrkit", "score", "--json", "--utt2spk",
                        str(tmp_path / "utt2spk"), str(tmp_path / "ref"), str(tmp_path / "hyp")],
                       capture_output=True, text=True, check=True)
    d = json.loads(r.stdout)
    assert {g: round(v["error_rate"], 6) for g, v in d["groups"].items()} == \
        {g: round(rep.error_rate, 6) for g, rep in parts.items()}
    r = subprocess.run([sys.executable, "-m", "asrkit", "score", "--summary-only", "--utt2spk",
                        str(tmp_path / "utt2spk"), str(tmp_path / "ref"), str(tmp_path / "hyp")],
                       capture_output=True, text=True, check=True)
    lines = r.stdout.splitlines()
    for spk, rep in parts.items():
        top = ", ".join(f"{t} x{n}" for t, n in rep.top_errors(3))
        assert f"{spk}: {rep.summary_line()}  most frequent: {top}" in lines
