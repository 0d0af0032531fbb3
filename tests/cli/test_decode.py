"""asrkit decode on a table of log-probabilities with a graph built by asrkit graph build."""

import json
import subprocess
import sys

import numpy as np

from asrkit.io import TableWriter

TOKENS = ["<blk>", "one", "two", "three"]


def _peaked(seq, rng, frames_per_token=3):
    """Log-probs that spell ``seq`` (token names) with blanks between tokens, plus noise."""
    rows = []
    for tok in seq:
        for _ in range(frames_per_token):
            p = rng.dirichlet(np.ones(len(TOKENS)) * 0.3) * 0.2
            p[TOKENS.index(tok)] += 0.8
            rows.append(p)
        p = rng.dirichlet(np.ones(len(TOKENS))) * 0.2
        p[0] += 0.8
        rows.append(p)
    return np.log(np.array(rows, np.float32))


def _asrkit(*args):
    return subprocess.run([sys.executable, "-m", "asrkit", *args], capture_output=True,
                          text=True)


def test_decode_logprobs_with_word_loop_and_lm(tmp_path, rng):
    (tmp_path / "tokens.txt").write_text("".join(f"{t} {i}\n" for i, t in enumerate(TOKENS)))
    (tmp_path / "lexicon.txt").write_text("one one\ntwo two\nthree three\n")
    (tmp_path / "lm.txt").write_text("one two three\ntwo two\nthree one\n" * 5)
    r = _asrkit("lm", "train", "--order", "2", "--text", str(tmp_path / "lm.txt"),
                "--output", str(tmp_path / "G.arpa"))
    assert r.returncode == 0, r.stderr
    utts = {"u1": ["one", "two", "three"], "u2": ["two", "two"], "u3": ["three"],
            "u4": ["one", "one", "two"]}
    data = tmp_path / "data"
    data.mkdir()
    (data / "text").write_text("".join(f"{u} {' '.join(w)}\n" for u, w in utts.items()))
    with TableWriter(f"ark:{tmp_path / 'logp.ark'}") as w:
        for u, words in utts.items():
            w.write(u, _peaked(words, rng))
        w.write("bad", np.zeros((5, 7), np.float32))  # wrong token count: reported, skipped
    for name, grammar in (("loop", ["--word-loop"]), ("lm", ["--lm", str(tmp_path / "G.arpa")])):
        r = _asrkit("graph", "build", "--tokens", str(tmp_path / "tokens.txt"), "--lexicon",
                    str(tmp_path / "lexicon.txt"), *grammar, "--out", str(tmp_path / name))
        assert r.returncode == 0, r.stderr
        out = tmp_path / f"dec_{name}"
        r = _asrkit("decode", "--graph", str(tmp_path / name), "--logprobs",
                    f"ark:{tmp_path / 'logp.ark'}", str(data), "--out", str(out), "--json")
        assert r.returncode == 0, r.stderr
        summary = json.loads(r.stdout)
        assert summary["decoded"] == 4 and summary["failed"] == 1 and summary["wer"] == 0.0
        assert "bad: scores have shape (5, 7)" in r.stderr
        hyp = dict(line.split(" ", 1) for line in (out / "hyp.txt").read_text().splitlines())
        assert hyp["u2"] == "two two" and hyp["u4"] == "one one two"
        ctm = (out / "ctm").read_text().splitlines()
        assert ctm[0].startswith("u1 1 0.000 ") and ctm[0].split()[4] == "one"
        assert 0.0 < float(ctm[0].split()[5]) <= 1.0
        assert (out / "nbest.txt").read_text().startswith("u1-1 ")
        assert "%WER 0.00" in (out / "wer.txt").read_text()
        _check_nbest_split(out / "nbest.txt", tmp_path / name, utts, tmp_path / "G.arpa",
                           with_lm=name == "lm")


def _check_nbest_split(path, graph_dir, utts, arpa, with_lm):
    """nbest.txt lines are 'utt-N ac_cost graph_cost words' (what asrkit nnlm rescore reads):
    ac + graph is the decoder's total cost, and with an LM graph the graph cost is the LM's."""
    import math

    import pytest

    from asrkit.decoders.decode import DecodeOptions, DecodingGraph, decode_utterance
    from asrkit.io import read_table
    from asrkit.lm import NgramLM
    from asrkit.nnlm import read_nbest

    nbest = read_nbest(path)
    assert set(nbest) == set(utts)
    graph = DecodingGraph.load(str(graph_dir))
    lm = NgramLM.load(str(arpa))
    logp = {u: m for u, m in read_table(f"ark:{path.parent.parent / 'logp.ark'}")}
    for utt, hyps in nbest.items():
        res = decode_utterance(graph, logp[utt], DecodeOptions())
        assert [h.words for h in hyps] == [w for w, _ in res.nbest]
        for h, (_, total) in zip(hyps, res.nbest):
            assert h.ac_cost + h.lm_cost == pytest.approx(total, abs=2e-4)
            assert h.ac_cost > 0
            if with_lm:  # no pronunciation probabilities: the graph cost is G's, -ln P(words)
                assert h.lm_cost == pytest.approx(-math.log(10) * lm.score(" ".join(h.words)),
                                                  abs=1e-3)


def test_tune_wip_rescoring_equals_decoding_at_each_penalty(tmp_path, rng):
    (tmp_path / "tokens.txt").write_text("".join(f"{t} {i}\n" for i, t in enumerate(TOKENS)))
    (tmp_path / "lexicon.txt").write_text("one one\ntwo two\nthree three\n")
    r = _asrkit("graph", "build", "--tokens", str(tmp_path / "tokens.txt"), "--lexicon",
                str(tmp_path / "lexicon.txt"), "--word-loop", "--out", str(tmp_path / "g"))
    assert r.returncode == 0, r.stderr
    data = tmp_path / "data"
    data.mkdir()
    refs = {}
    with TableWriter(f"ark:{tmp_path / 'logp.ark'}") as w:
        for i in range(30):
            words = [str(x) for x in rng.choice(TOKENS[1:], size=int(rng.integers(1, 5)))]
            logp = _peaked(words, rng)
            # blips of other words, weak enough that the penalty decides whether they count
            for t in rng.choice(len(logp), size=3, replace=False):
                p = np.full(len(TOKENS), 0.05)
                p[int(rng.integers(1, len(TOKENS)))] = 0.45 + 0.2 * rng.random()
                p[0] = 1.0 - p.sum() + p[0]
                logp[t] = np.log(p / p.sum())
            w.write(f"u{i:02d}", logp.astype(np.float32))
            refs[f"u{i:02d}"] = " ".join(words)
    (data / "text").write_text("".join(f"{u} {t}\n" for u, t in refs.items()))
    out = tmp_path / "tuned"
    r = _asrkit("decode", "--graph", str(tmp_path / "g"), "--logprobs",
                f"ark:{tmp_path / 'logp.ark'}", str(data), "--out", str(out),
                "--tune-wip=-2:2:1", "--json")
    assert r.returncode == 0, r.stderr
    tuning = json.loads((out / "tune_wip.json").read_text())
    assert tuning["searched_at"] == 0.0 and list(tuning["wer"]) == ["-2", "-1", "0", "1", "2"]
    best = float((out / "best_wip").read_text())
    assert tuning["wer"][f"{best:g}"] == min(tuning["wer"].values())
    assert len(set(tuning["wer"].values())) > 1  # the penalty matters on this set
    for v in (-1, 0, 1):   # near the searched value the n-best holds the same best paths
        d = tmp_path / f"direct{v}"
        r = _asrkit("decode", "--graph", str(tmp_path / "g"), "--logprobs",
                    f"ark:{tmp_path / 'logp.ark'}", str(data), "--out", str(d), "--json",
                    f"--word-insertion-penalty={v}")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["wer"] == round(tuning["wer"][f"{v:g}"], 3)
    direct = (tmp_path / f"direct{int(best)}" / "hyp.txt")
    if direct.exists():
        assert (out / "hyp.txt").read_text() == direct.read_text()
    r = _asrkit("decode", "--graph", str(tmp_path / "g"), "--logprobs",
                f"ark:{tmp_path / 'logp.ark'}", "--out", str(tmp_path / "x"), "--tune-wip=1:0:1")
    assert r.returncode == 2 and "--tune-wip" in r.stderr


def test_penalty_values_and_pick():
    import pytest

    from asrkit.decoders.tuning import penalty_values, pick

    assert penalty_values("-1:1:0.5") == [-1.0, -0.5, 0.0, 0.5, 1.0]
    assert penalty_values("0:0:1") == [0.0]
    for bad in ("1:0:1", "0:1:0", "a:b:c", "0:1", "0:nan:1", "0:1e9:1e-3"):
        with pytest.raises(ValueError):
            penalty_values(bad)
    nb = [(["one"], 5.0, 1.0), (["one", "two"], 4.0, 1.5)]
    assert pick(nb, 0.0) == ["one", "two"] and pick(nb, 1.0) == ["one"]
