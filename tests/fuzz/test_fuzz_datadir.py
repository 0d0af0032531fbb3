"""Kaldi data directories on bad input, through ``asrkit data validate|fix|subset|split`` and
``asrkit compute-features`` in child processes.

Seeded text and byte mutations of every file of a small valid data dir (utt2spk, spk2utt, text,
wav.scp, segments, utt2dur, utt2num_frames, feats.scp, cmvn.scp, spk2gender), and hand-made
cases: CR line endings, a feats.scp whose archive is missing or whose offset lies past its end,
numbers that are not numbers. Each run ends cleanly; every problem names its file and line.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from asrkit.io import write_table
from tests.fuzz.harness import assert_clean_outcome, mutations, run_cli
from tests.io.synth import tone, write_kaldi_files

FILES = ("utt2spk", "spk2utt", "text", "wav.scp", "segments", "utt2dur", "utt2num_frames",
         "feats.scp", "cmvn.scp", "spk2gender")
ACTIONS = ("validate", "fix", "subset", "split", "compute-features")


@pytest.fixture
def datadir(tmp_path):
    import soundfile as sf

    rng = np.random.default_rng(0)
    root = tmp_path / "src"
    recs = {"a-r1": 8000, "b-r1": 9600}
    wav = {}
    for reco, n in recs.items():
        sf.write(root.parent / f"{reco}.wav", tone(n, rng), 16000, subtype="PCM_16")
        wav[reco] = str(root.parent / f"{reco}.wav")
    segments = {"a-1": "a-r1 0.0 0.2", "a-2": "a-r1 0.2 0.5", "b-1": "b-r1 0.0 0.6"}
    utts = list(segments)
    feats = {u: rng.standard_normal((20, 4)).astype(np.float32) for u in utts}
    cmvn = {s: rng.standard_normal((2, 5)) for s in ("a", "b")}
    root.mkdir()
    write_table(f"ark,scp:{root / 'feats.ark'},{root / 'feats.scp'}", feats)
    write_table(f"ark,scp:{root / 'cmvn.ark'},{root / 'cmvn.scp'}", cmvn)
    write_kaldi_files(str(root), {
        "wav.scp": wav, "segments": segments, "utt2spk": {u: u[0] for u in utts},
        "text": {u: "hello world" for u in utts}, "utt2dur": {u: "0.2" for u in utts},
        "utt2num_frames": {u: "20" for u in utts}, "spk2gender": {"a": "f", "b": "m"}})
    res = run_cli(["data", "validate", str(root)])
    assert res.returncode == 0, res.describe()
    return root


def _act(action: str, d, tmp_path):
    if action == "validate":
        return run_cli(["data", "validate", str(d), "--json"])
    if action == "fix":
        return run_cli(["data", "fix", str(d)])
    if action == "subset":
        return run_cli(["data", "subset", str(d), str(tmp_path / "sub"), "--first", "2"])
    if action == "split":
        return run_cli(["data", "split", str(d), "2", "--per-utt"])
    conf = tmp_path / "fbank.toml"
    conf.write_text('[features]\ntype = "fbank"\ndither = 0.0\n')
    return run_cli(["compute-features", str(d), "--config", str(conf), "--out",
                    str(tmp_path / "feats"), "--max-fail-fraction", "1"],
                   timeout=180)  # room for a numba recompile on a loaded machine


def _check(datadir, tmp_path, name, seed, action):
    path = datadir / name
    mutant = mutations(path.read_bytes(), seed=seed, count=1)[0]
    path.write_bytes(mutant)
    res = _act(action, datadir, tmp_path)
    if action != "validate":
        assert_clean_outcome(res, names=[name, str(datadir)])
        return
    # validate --json reports on stdout: exit 1 with every problem placed, or 0 with none
    assert res.returncode in (0, 1) and "Traceback" not in res.stderr, res.describe()
    report = json.loads(res.stdout)
    errors = [p for p in report["problems"] if p["severity"] == "error"]
    assert bool(errors) == (res.returncode == 1), res.describe()
    assert all(p["file"].startswith(str(datadir)) for p in report["problems"]), res.describe()


@pytest.mark.parametrize("name", FILES)
def test_mutated_files_validate(datadir, tmp_path, name):
    _check(datadir, tmp_path, name, 1, "validate")


@pytest.mark.parametrize("name,action", [("segments", "compute-features"),
                                         ("wav.scp", "compute-features"),
                                         ("utt2dur", "fix"), ("segments", "split"),
                                         ("utt2spk", "subset")])
def test_mutated_files_other_actions(datadir, tmp_path, name, action):
    _check(datadir, tmp_path, name, 2, action)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3, 5))
@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("name", FILES)
def test_mutated_files_long(datadir, tmp_path, name, action, seed):
    _check(datadir, tmp_path, name, seed, action)


def _problems(d) -> list[dict]:
    res = run_cli(["data", "validate", str(d), "--json"])
    assert res.returncode in (0, 1) and "Traceback" not in res.stderr, res.describe()
    return json.loads(res.stdout)["problems"]


def _errors_at(d, name: str) -> list[dict]:
    return [p for p in _problems(d) if p["file"].endswith("/" + name)
            and p["severity"] == "error"]


def test_cr_line_endings_are_reported(datadir):
    text = datadir / "text"
    text.write_bytes(text.read_bytes().replace(b"\n", b"\r\n"))
    errors = _errors_at(datadir, "text")
    assert errors and errors[0]["line"] == 1 and "CR" in errors[0]["message"], errors


def test_feats_scp_with_a_missing_archive_is_reported(datadir):
    shutil.move(datadir / "feats.ark", datadir / "moved.ark")
    errors = _errors_at(datadir, "feats.scp")
    assert [e["line"] for e in errors] == [1, 2, 3], errors
    assert all("feats.ark" in e["message"] for e in errors), errors


def test_feats_scp_offset_past_the_end_is_reported(datadir):
    scp = datadir / "feats.scp"
    lines = scp.read_text().splitlines()
    lines[1] = lines[1].rsplit(":", 1)[0] + ":999999"
    scp.write_text("\n".join(lines) + "\n")
    errors = _errors_at(datadir, "feats.scp")
    assert [e["line"] for e in errors] == [2], errors


def test_cmvn_scp_with_a_missing_archive_is_reported(datadir):
    (datadir / "cmvn.ark").unlink()
    assert [e["line"] for e in _errors_at(datadir, "cmvn.scp")] == [1, 2]


@pytest.mark.parametrize("name,value,action", [
    ("utt2dur", "nan", "fix"), ("utt2dur", "inf", "subset"), ("utt2dur", "-1", "split"),
    ("utt2num_frames", "1.5", "subset"), ("segments", "a-r1 nan 0.2", "compute-features"),
    ("segments", "a-r1 0.0 inf", "split")])
def test_bad_numbers_are_named_by_file_and_line(datadir, tmp_path, name, value, action):
    path = datadir / name
    lines = path.read_text().splitlines()
    lines[0] = lines[0].split()[0] + " " + value
    path.write_text("\n".join(lines) + "\n")
    assert [e["line"] for e in _errors_at(datadir, name)] == [1]
    assert_clean_outcome(_act(action, datadir, tmp_path), names=[name])
