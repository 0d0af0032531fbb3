"""asrkit decode --nj: worker processes give the outputs of one process, in input order, and a
table damaged mid-way still keeps what was decoded before the damage."""

import json

import numpy as np
import pytest

from asrkit.io import TableWriter
from tests.cli.test_decode import TOKENS, _asrkit, _peaked


@pytest.fixture(scope="module")
def graph_and_scores(tmp_path_factory):
    root = tmp_path_factory.mktemp("nj")
    rng = np.random.default_rng(3)
    (root / "tokens.txt").write_text("".join(f"{t} {i}\n" for i, t in enumerate(TOKENS)))
    (root / "lexicon.txt").write_text("one one\ntwo two\nthree three\n")
    r = _asrkit("graph", "build", "--tokens", str(root / "tokens.txt"), "--lexicon",
                str(root / "lexicon.txt"), "--word-loop", "--out", str(root / "graph"))
    assert r.returncode == 0, r.stderr
    words = TOKENS[1:]
    utts = {f"u{i:02d}": [words[j] for j in rng.integers(0, 3, size=rng.integers(1, 6))]
            for i in range(24)}
    data = root / "data"
    data.mkdir()
    (data / "text").write_text("".join(f"{u} {' '.join(w)}\n" for u, w in utts.items()))
    with TableWriter(f"ark:{root / 'logp.ark'}") as w:
        for i, (u, seq) in enumerate(utts.items()):
            w.write(u, _peaked(seq, rng))
            if i == 10:
                w.write("u10bad", np.full((4, 4), np.nan, np.float32))  # a failed utterance
    return root, data


def _decode(root, data, out, *extra):
    return _asrkit("decode", "--graph", str(root / "graph"), "--logprobs",
                   f"ark:{root / 'logp.ark'}", str(data), "--out", str(out), "--json", *extra)


def test_nj_gives_the_outputs_of_one_process(graph_and_scores):
    root, data = graph_and_scores
    one = _decode(root, data, root / "one")
    three = _decode(root, data, root / "three", "--nj", "3")
    assert one.returncode == 0 and three.returncode == 0, (one.stderr, three.stderr)
    a, b = json.loads(one.stdout), json.loads(three.stdout)
    assert a["decoded"] == b["decoded"] == 24 and a["failed"] == b["failed"] == 1
    assert a["wer"] == b["wer"] == 0.0
    for name in ("hyp.txt", "ctm", "nbest.txt", "wer.txt"):
        assert (root / "one" / name).read_text() == (root / "three" / name).read_text(), name
    # the ctm follows the input order, which a parallel run must keep
    utts = [line.split()[0] for line in (root / "three" / "ctm").read_text().splitlines()]
    assert utts == sorted(utts)
    assert "u10bad: log-probabilities are not finite" in three.stderr


def test_nj_keeps_what_was_decoded_before_a_damaged_archive(graph_and_scores, tmp_path):
    root, _ = graph_and_scores
    ark = (root / "logp.ark").read_bytes()
    cut = tmp_path / "cut.ark"
    cut.write_bytes(ark[: len(ark) * 2 // 3])
    outs = []
    for nj in ("1", "2"):
        r = _asrkit("decode", "--graph", str(root / "graph"), "--logprobs", f"ark:{cut}",
                    "--out", str(tmp_path / nj), "--json", "--nj", nj)
        assert r.returncode == 1, r.stderr
        summary = json.loads(r.stdout)
        assert not summary["complete"] and summary["decoded"] >= 10
        outs.append((summary["decoded"], (tmp_path / nj / "hyp.txt").read_text()))
    assert outs[0] == outs[1]


@pytest.mark.parametrize("nj", ["0", "-3", "100000"])
def test_nj_must_be_a_sane_count(graph_and_scores, nj):
    root, data = graph_and_scores
    r = _decode(root, data, root / "bad", "--nj", nj)
    assert r.returncode == 2
    assert r.stderr.strip().endswith(f"--nj must be a number of processes in [1, 256], got {nj}")
    assert "Traceback" not in r.stderr and not (root / "bad").exists()
