"""Kaldi tables on bad input, through ``asrkit decode --logprobs`` in a child process.

Seeded mutations of binary, text and compressed (CM, CM2, CM3) archives and of script files, and
hand-made cases for each class of damage (truncated archive, bad header, negative dimension,
duplicate key, missing scp target, bad offset, range past the end, a pipe that never ends,
NaN/inf log-probabilities). Every run must end cleanly: no traceback, signal or hang; a damaged
utterance is reported by name and counted as failed, and what was decoded before it is kept.
"""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest

from tests.fuzz.harness import assert_clean_failure, assert_clean_outcome, mutations, run_cli
from tests.io.kaldi_compress import compressed_matrix_bytes

TOKENS = ["<blk>", "one", "two", "three"]
UTTS = ("u0", "u1", "u2")
PIPE_ENV = {"ASRKIT_PIPE_TIMEOUT": "2"}


def _logprobs(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.log(rng.dirichlet(np.ones(len(TOKENS)), size=12)).astype(np.float32)


def _fm(m: np.ndarray) -> bytes:
    return (b"\0BFM \x04" + struct.pack("<i", m.shape[0]) + b"\x04"
            + struct.pack("<i", m.shape[1]) + m.astype("<f4").tobytes())


def _text(m: np.ndarray) -> bytes:
    rows = "".join("\n  " + " ".join(f"{x:.6g}" for x in row) for row in m)
    return f" [{rows} ]\n".encode()


def _ark(values: dict[str, bytes]) -> bytes:
    return b"".join(k.encode() + b" " + v for k, v in values.items())


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    root = tmp_path_factory.mktemp("graph")
    (root / "tokens.txt").write_text("".join(f"{t} {i}\n" for i, t in enumerate(TOKENS)))
    (root / "lexicon.txt").write_text("one one\ntwo two\nthree three\n")
    res = run_cli(["graph", "build", "--tokens", str(root / "tokens.txt"), "--lexicon",
                   str(root / "lexicon.txt"), "--word-loop", "--out", str(root / "g")])
    assert res.returncode == 0, res.describe()
    return str(root / "g")


# generous: the first decode after a change to the decoder recompiles its numba kernels, which
# takes a minute on a loaded machine; a real hang is still caught
DECODE_TIMEOUT_S = 240


def _decode(graph, rspec, out, env=None, timeout=DECODE_TIMEOUT_S):
    return run_cli(["decode", "--graph", graph, "--logprobs", rspec, "--out", str(out),
                    "--json"], timeout=timeout, env=env)


def _summary(res) -> dict:
    return json.loads(res.stdout)


def _hyps(out) -> dict[str, str]:
    lines = (out / "hyp.txt").read_text().splitlines()
    return {line.split(" ", 1)[0]: line for line in lines}


MATS = {u: _logprobs(i) for i, u in enumerate(UTTS)}
FORMATS = {
    "binary": lambda m: _fm(m),
    "text": lambda m: _text(m),
    "cm": lambda m: compressed_matrix_bytes(m, 1),
    "cm2": lambda m: compressed_matrix_bytes(m, 2),
    "cm3": lambda m: compressed_matrix_bytes(m, 3),
}


def _good_ark(fmt: str) -> bytes:
    return _ark({u: FORMATS[fmt](m) for u, m in MATS.items()})


# ------------------------------------------------------------------------- seeded mutations

def _mutation_cases(count: int):
    return [(fmt, i) for fmt in (*FORMATS, "scp") for i in range(count)]


def _check_mutant(graph, tmp_path, fmt, i):
    good_ark = tmp_path / "good.ark"
    good_ark.write_bytes(_good_ark("binary"))
    if fmt == "scp":
        offsets, pos, data = [], 0, good_ark.read_bytes()
        for u in UTTS:
            pos = data.index(u.encode() + b" \0B", pos) + len(u) + 1
            offsets.append(f"{u} {good_ark}:{pos}\n")
        src = "".join(offsets).encode()
        mutant = mutations(src, seed=100 + i, count=1)[0]
        path = tmp_path / "m.scp"
        rspec = f"scp:{path}"
    else:
        src = _good_ark(fmt)
        mutant = mutations(src, seed=200 + i, count=1, text=False)[0]
        path = tmp_path / "m.ark"
        rspec = f"ark:{path}"
    path.write_bytes(mutant)
    res = _decode(graph, rspec, tmp_path / "out")
    assert_clean_outcome(res, names=[str(path), str(good_ark), *UTTS])
    if res.returncode == 0:  # what was reported adds up: every key decoded or counted
        s = _summary(res)
        assert s["decoded"] + s["failed"] >= 1, res.describe()


@pytest.mark.parametrize("fmt,i", _mutation_cases(1))
def test_mutated_tables(graph, tmp_path, fmt, i):
    _check_mutant(graph, tmp_path, fmt, i)


@pytest.mark.slow
@pytest.mark.parametrize("fmt,i", [c for c in _mutation_cases(10) if c[1] > 0])
def test_mutated_tables_long(graph, tmp_path, fmt, i):
    _check_mutant(graph, tmp_path, fmt, i)


# ------------------------------------------------------------------------- each class of damage

def test_compressed_archives_decode(graph, tmp_path):
    """copy-feats --compress=true output in all three formats, in one archive."""
    ark = tmp_path / "cm.ark"
    ark.write_bytes(_ark({u: FORMATS[fmt](MATS[u]) for u, fmt in zip(UTTS, ("cm", "cm2", "cm3"))}))
    res = _decode(graph, f"ark:{ark}", tmp_path / "out")
    assert res.returncode == 0, res.describe()
    assert _summary(res)["decoded"] == 3 and _summary(res)["failed"] == 0


def _damaged(graph, tmp_path, damage: bytes, names):
    ark = tmp_path / "bad.ark"
    ark.write_bytes(damage)
    out = tmp_path / "out"
    res = _decode(graph, f"ark:{ark}", out)
    assert_clean_failure(res, names=[str(ark)])
    assert all(n in res.stderr for n in names), res.describe()
    return res, out


def test_truncated_archive_keeps_what_was_decoded(graph, tmp_path):
    data = _good_ark("binary")
    cut = data.index(b"u2 ") - 20
    res, out = _damaged(graph, tmp_path, data[:cut], ["u1"])
    assert set(_hyps(out)) == {"u0"}


def test_bad_header(graph, tmp_path):
    data = _ark({"u0": _fm(MATS["u0"]), "u1": b"\0BXM " + _fm(MATS["u1"])[5:],
                 "u2": _fm(MATS["u2"])})
    res, out = _damaged(graph, tmp_path, data, ["u1"])
    assert set(_hyps(out)) == {"u0"}


def test_negative_dimension(graph, tmp_path):
    bad = bytearray(_fm(MATS["u1"]))
    struct.pack_into("<i", bad, 6, -3)
    _damaged(graph, tmp_path, _ark({"u0": _fm(MATS["u0"]), "u1": bytes(bad)}), ["u1"])


def test_duplicate_key_is_a_failed_utterance(graph, tmp_path):
    """The second value of a repeated key is refused (never a silent overwrite), by name."""
    ark = tmp_path / "dup.ark"
    ark.write_bytes(_ark({"u0": _fm(MATS["u0"]), "u1": _fm(MATS["u1"])}) + b"u0 "
                    + _fm(MATS["u2"]))
    res = _decode(graph, f"ark:{ark}", tmp_path / "out")
    assert res.returncode == 0, res.describe()
    assert _summary(res)["failed"] == 1 and "duplicate key 'u0'" in res.stderr, res.describe()


BAD_ENTRIES = {  # key: (scp value, what its error must say)
    "b1": ("{ark}.missing:{off}", "good.ark.missing: no such file"),
    "b2": ("{ark}:5", "cannot parse text value"),              # into the middle of a value
    "b3": ("{ark}:99999", "past the end"),
    "b4": ("{ark}:{off}[0:99]", "row range 0:99 is outside the matrix (12 rows)"),
    "b5": ("{ark}:{off}[0:3,2:9]", "column range 2:9 is outside the matrix (4 columns)"),
    "b6": ("sleep 30 |", "timed out"),                         # a pipe that never ends
    "b7": ("echo oops >&2; exit 3 |", "status 3: oops"),       # a pipe that fails
}


def test_bad_scp_entries_fail_their_utterance_only(graph, tmp_path):
    ark = tmp_path / "good.ark"
    data = _good_ark("binary")
    ark.write_bytes(data)
    offset = {u: data.index(u.encode() + b" \0B") + len(u) + 1 for u in UTTS}
    lines = {"u0": f"{ark}:{offset['u0']}", "u2": f"{ark}:{offset['u2']}"}
    lines.update({k: v.format(ark=ark, off=offset["u1"]) for k, (v, _) in BAD_ENTRIES.items()})
    scp = tmp_path / "l.scp"
    scp.write_text("".join(f"{u} {v}\n" for u, v in sorted(lines.items())))
    out = tmp_path / "out"
    res = _decode(graph, f"scp:{scp}", out, env=PIPE_ENV)
    assert res.returncode == 0, res.describe()
    s = _summary(res)
    assert s["decoded"] == 2 and s["failed"] == len(BAD_ENTRIES), res.describe()
    errors = {line.split(": ", 2)[1]: line for line in res.stderr.splitlines()
              if line.startswith("asrkit decode: b")}
    for key, (_, message) in BAD_ENTRIES.items():
        assert message in errors[key] and "l.scp:" in errors[key], (key, res.describe())
    assert set(_hyps(out)) == {"u0", "u2"}


def test_archive_pipe_that_never_ends(graph, tmp_path):
    res = _decode(graph, "ark:sleep 30 |", tmp_path / "out", env=PIPE_ENV, timeout=120)
    assert_clean_failure(res, names=["timed out"])


def test_non_finite_log_probs_are_failed_utterances(graph, tmp_path):
    values = {}
    for key, value in (("n1", np.nan), ("n2", np.inf), ("n3", -np.inf)):
        bad = MATS["u1"].copy()
        bad[4, 2] = value
        values[key] = _fm(bad)
    ark = tmp_path / "nan.ark"
    ark.write_bytes(_ark({"n1": values["n1"], "n2": values["n2"], "n3": values["n3"],
                          "u0": _fm(MATS["u0"]), "u2": _fm(MATS["u2"])}))
    res = _decode(graph, f"ark:{ark}", tmp_path / "out")
    assert res.returncode == 0, res.describe()
    s = _summary(res)
    assert s["decoded"] == 2 and s["failed"] == 3, res.describe()
    for key in ("n1", "n2", "n3"):
        assert f"asrkit decode: {key}: log-probabilities are not finite" in res.stderr


@pytest.mark.parametrize("target", ["missing", "dir"])
def test_unreadable_archive_is_named(graph, tmp_path, target):
    path = tmp_path / target
    if target == "dir":
        path.mkdir()
    res = _decode(graph, f"ark:{path}", tmp_path / "out")
    assert_clean_failure(res, names=[str(path)])


def test_out_is_a_file(graph, tmp_path):
    ark = tmp_path / "good.ark"
    ark.write_bytes(_good_ark("binary"))
    (tmp_path / "out").write_text("x")
    res = _decode(graph, f"ark:{ark}", tmp_path / "out")
    assert_clean_failure(res, names=[str(tmp_path / "out")])


def test_outputs_replace_the_previous_run_as_a_set(graph, tmp_path):
    """A run without a reference text leaves no score files of an earlier run behind."""
    ark = tmp_path / "good.ark"
    ark.write_bytes(_good_ark("binary"))
    out = tmp_path / "out"
    out.mkdir()
    (out / "wer.txt").write_text("stale\n")
    (out / "score.json").write_text("{}\n")
    res = _decode(graph, f"ark:{ark}", out)
    assert res.returncode == 0, res.describe()
    assert not (out / "wer.txt").exists() and not (out / "score.json").exists()
    assert set(_hyps(out)) == set(UTTS)
    assert not [p for p in os.listdir(out) if p.endswith(".tmp")]


def test_decode_with_a_model_counts_every_skipped_utterance(graph, tmp_path):
    """decode --model over a data dir: a bad feats.scp line, a missing archive, an offset past
    the end, NaN features and features of the wrong width each fail their own utterance by
    name; the rest are decoded; a missing data dir is a clean error."""
    from asrkit.io import write_table
    from asrkit.models import save
    from tests.recognizer.tones import BINS, tone_model

    model = tmp_path / "tone.mdl"
    save(str(model), tone_model())
    rng = np.random.default_rng(0)
    good = {}
    for utt, word in (("a-1", "one"), ("a-2", "two")):
        m = rng.uniform(5, 10, (30, 40)).astype(np.float32)
        m[10:20, BINS[word]] = 30.0
        good[utt] = m
    bad = dict(good)
    bad["a-nan"] = good["a-1"].copy()
    bad["a-nan"][3, 7] = np.nan
    bad["a-wide"] = rng.uniform(5, 10, (30, 41)).astype(np.float32)
    data = tmp_path / "data"
    data.mkdir()
    write_table(f"ark,scp:{tmp_path / 'f.ark'},{data / 'feats.scp'}", bad)
    lines = (data / "feats.scp").read_text().splitlines()
    lines += [f"a-gone {tmp_path / 'gone.ark'}:9", f"a-past {tmp_path / 'f.ark'}:99999",
              "a-noval"]
    (data / "feats.scp").write_text("\n".join(sorted(lines)) + "\n")
    utts = sorted(line.split()[0] for line in lines)
    (data / "utt2spk").write_text("".join(f"{u} a\n" for u in utts))
    (data / "text").write_text("a-1 one\na-2 two\n")
    res = run_cli(["decode", "--graph", graph, "--model", str(model), str(data), "--out",
                   str(tmp_path / "out"), "--json"], timeout=DECODE_TIMEOUT_S)
    assert res.returncode == 0, res.describe()
    s = _summary(res)
    assert s["decoded"] == 2 and s["failed"] == 5, res.describe()
    for utt, why in (("a-nan", "not finite"), ("a-wide", "do not fit the model"),
                     ("a-gone", "gone.ark: no such file"), ("a-past", "past the end"),
                     ("a-noval", "expected 'key rxfilename'")):
        assert any(line.startswith(f"asrkit decode: {utt}: ") and why in line
                   for line in res.stderr.splitlines()), (utt, res.describe())
    assert _hyps(tmp_path / "out") == {"a-1": "a-1 one", "a-2": "a-2 two"}

    res = run_cli(["decode", "--graph", graph, "--model", str(model), str(tmp_path / "nope"),
                   "--out", str(tmp_path / "out2")])
    assert_clean_failure(res, names=[str(tmp_path / "nope")])
