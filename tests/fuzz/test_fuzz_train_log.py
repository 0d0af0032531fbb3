"""Fuzzing what ``asrkit report`` reads: ``train_log.jsonl`` lines, the experiment's model file
and the files named on the command line. A bad line fails cleanly naming ``file:line``; each case
is a child process with a time limit."""

from __future__ import annotations

import json

import pytest

from tests.fuzz.harness import assert_clean_failure, assert_clean_outcome, mutations, run_cli

slow = pytest.mark.slow


def _log_text(n: int = 6) -> str:
    recs = []
    for step in range(1, n + 1):
        recs.append({"step": step, "kind": "train", "epoch": 1, "loss": 3.0 / step, "lr": 0.01,
                     "frames_per_s": 1000.0 + step, "bytes_per_step": 0, "skipped_steps": 0})
    recs.append({"step": n, "kind": "cv", "epoch": 1, "loss": 0.9, "cv_error": 0.3, "lr": 0.01})
    return "".join(json.dumps(r) + "\n" for r in recs)


def _exp(tmp_path, log: str | bytes):
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "train_log.jsonl").write_bytes(log.encode() if isinstance(log, str) else log)
    return exp


BAD_LINES = {
    "torn-json": '{"step": 3, "kind": "tr',
    "a-list": "[1, 2, 3]",
    "a-number": "5",
    "loss-a-string": '{"step": 3, "kind": "train", "loss": "low"}',
    "step-a-dict": '{"step": {"a": 1}, "kind": "train", "loss": 1.0}',
    "lr-a-list": '{"step": 3, "kind": "train", "loss": 1.0, "lr": [1]}',
    "kind-a-number": '{"step": 3, "kind": 7, "loss": 1.0}',
}


@pytest.mark.parametrize("case", [c if c in ("torn-json", "loss-a-string")
                                  else pytest.param(c, marks=slow) for c in BAD_LINES])
def test_a_malformed_line_names_the_file_and_line(tmp_path, case):
    lines = _log_text().splitlines()
    lines[2] = BAD_LINES[case]
    exp = _exp(tmp_path, "\n".join(lines) + "\n")
    log = str(exp / "train_log.jsonl")
    res = run_cli(["report", str(exp)])
    assert_clean_failure(res, names=f"{log}:3")


@slow
def test_a_non_utf8_log_names_the_file(tmp_path):
    exp = _exp(tmp_path, _log_text().encode() + b'{"step": 9, "kind": "\xff"}\n')
    assert_clean_failure(run_cli(["report", str(exp)]), names=str(exp / "train_log.jsonl"))


@slow
def test_a_broken_model_or_missing_inputs_fail_cleanly(tmp_path):
    exp = _exp(tmp_path, _log_text())
    (exp / "final.mdl").write_bytes(b"PK\x03\x04 torn")
    assert_clean_failure(run_cli(["report", str(exp)]), names=str(exp / "final.mdl"))
    (exp / "final.mdl").unlink()
    missing = str(tmp_path / "nope.toml")
    assert_clean_failure(run_cli(["report", str(exp), "--config", missing]), names=missing)
    (tmp_path / "bad.toml").write_bytes(b"\xff\xfe")
    assert_clean_failure(run_cli(["report", str(exp), "--config", str(tmp_path / "bad.toml")]),
                         names=str(tmp_path / "bad.toml"))
    res = run_cli(["report", str(exp), "--out", str(tmp_path)])  # a folder where a file goes
    assert_clean_failure(res, names=str(tmp_path))


@pytest.mark.parametrize("seed", [0, *[pytest.param(s, marks=slow) for s in range(1, 25)]])
def test_log_mutants_fail_cleanly_or_report(tmp_path, seed):
    (text,) = mutations(_log_text().encode(), seed, 1)
    exp = _exp(tmp_path, text)
    res = run_cli(["report", str(exp)])
    assert_clean_outcome(res, names=str(exp / "train_log.jsonl"))
    if res.returncode == 0:
        assert (exp / "report.html").is_file()
