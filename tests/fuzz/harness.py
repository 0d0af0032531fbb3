"""Run an ``asrkit`` command on bad input in a child process and check that it fails cleanly.

A clean failure (the README's promise): a non-zero exit status that is not a signal, no Python
traceback, no hang (the child is killed after ``timeout`` seconds), and a one-line message on
stderr that names the file (or key, line, utterance) at fault. The fuzz tests build mutated inputs
from a seeded generator and call ``assert_clean_failure`` on each; ``mutations`` gives the shared
byte- and text-level mutators so every parser is fuzzed the same way.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys

import numpy as np

TIMEOUT_S = 60.0


@dataclasses.dataclass
class Result:
    """What a child ``asrkit`` run did."""

    argv: list[str]
    returncode: int | None      # None: killed at the time limit
    stdout: str
    stderr: str

    @property
    def signal(self) -> int | None:
        """The signal that ended the child, if any (returncode < 0)."""
        return -self.returncode if self.returncode is not None and self.returncode < 0 else None

    def describe(self) -> str:
        """The command and its output, for assertion messages."""
        return (f"asrkit {' '.join(self.argv)} -> {self.returncode}\n--- stdout\n"
                f"{self.stdout[-2000:]}\n--- stderr\n{self.stderr[-4000:]}")


def run_cli(argv: list[str], timeout: float = TIMEOUT_S, cwd: str | None = None,
            env: dict | None = None, stdin: bytes | None = None) -> Result:
    """Run ``python -m asrkit ARGV`` in a child process with a time limit."""
    return _run_child(["-m", "asrkit"], list(argv), timeout, cwd, env, stdin)


def run_python(code: str, argv: list[str], timeout: float = TIMEOUT_S, cwd: str | None = None,
               env: dict | None = None) -> Result:
    """Run ``python -c CODE ARGV`` in a child process with a time limit: for public Python
    APIs that no command reaches (``sys.argv[1:]`` is ``argv``). The code reports a clean
    failure by printing one line to stderr and exiting non-zero."""
    return _run_child(["-c", code], list(argv), timeout, cwd, env, None)


def _run_child(head: list[str], argv: list[str], timeout: float, cwd: str | None,
               env: dict | None, stdin: bytes | None) -> Result:
    child_env = {**os.environ, "ASRKIT_NO_PROGRESS": "1", **(env or {})}
    p = subprocess.Popen([sys.executable, *head, *argv], cwd=cwd, env=child_env,
                         stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = p.communicate(stdin, timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        rc = None
    return Result(list(argv), rc, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))


def outcome(res: Result, names: str | list[str] | None = None, zero_ok: bool = False) -> str:
    """What a run did, in one word: ``hang``, ``signal``, ``traceback``, ``exit0`` (status 0
    where a failure was due), ``unnamed`` (a failure whose message names none of ``names``),
    ``clean`` (a clean failure) or ``ok`` (status 0 where that is allowed)."""
    if res.returncode is None:
        return "hang"
    if res.signal is not None:
        return "signal"
    if "Traceback (most recent call last)" in res.stderr:
        return "traceback"
    if res.returncode == 0:
        return "ok" if zero_ok else "exit0"
    text = res.stderr.strip()
    if not text:
        return "unnamed"
    if names:
        names = [names] if isinstance(names, str) else names
        if not any(n in text for n in names):
            return "unnamed"
    return "clean"


def _log_outcome(res: Result, names, zero_ok: bool) -> None:
    """Append the run's outcome to the file named by ``ASRKIT_FUZZ_LOG`` (one JSON line per
    case), so a whole fuzz pass can be tallied before and after a fix."""
    path = os.environ.get("ASRKIT_FUZZ_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"argv": res.argv, "outcome": outcome(res, names, zero_ok),
                                "returncode": res.returncode,
                                "stderr": res.stderr.strip().splitlines()[-1:]}) + "\n")


def assert_clean_failure(res: Result, names: str | list[str] | None = None) -> None:
    """The run failed cleanly: exited (no hang, no signal) with a non-zero status, printed no
    traceback, and its last stderr line mentions one of ``names`` (file names, keys, ...)."""
    _log_outcome(res, names, zero_ok=False)
    assert res.returncode is not None, "hung (killed at the time limit)\n" + res.describe()
    assert res.signal is None, f"killed by signal {res.signal}\n" + res.describe()
    assert res.returncode != 0, "exit status 0 on bad input\n" + res.describe()
    assert "Traceback (most recent call last)" not in res.stderr, res.describe()
    lines = [ln for ln in res.stderr.strip().splitlines() if ln.strip()]
    assert lines, "no error message\n" + res.describe()
    if names:
        names = [names] if isinstance(names, str) else names
        text = "\n".join(lines)
        assert any(n in text for n in names), (f"message names none of {names}\n"
                                               + res.describe())


def assert_clean_outcome(res: Result, names: str | list[str] | None = None) -> None:
    """Either a success (status 0) or a clean failure: for mutations that may leave the input
    valid. Never a hang, signal or traceback."""
    if outcome(res, names, zero_ok=True) not in ("clean", "unnamed"):  # else logged below
        _log_outcome(res, names, zero_ok=True)
    assert res.returncode is not None, "hung (killed at the time limit)\n" + res.describe()
    assert res.signal is None, f"killed by signal {res.signal}\n" + res.describe()
    assert "Traceback (most recent call last)" not in res.stderr, res.describe()
    if res.returncode != 0:
        assert_clean_failure(res, names)


# --- mutators (seeded) -----------------------------------------------------------------------

def flip_bytes(data: bytes, rng: np.random.Generator, n: int = 1) -> bytes:
    """``n`` random bytes replaced by random values."""
    b = bytearray(data)
    for _ in range(n):
        if b:
            b[int(rng.integers(len(b)))] = int(rng.integers(256))
    return bytes(b)


def truncate(data: bytes, rng: np.random.Generator) -> bytes:
    """The data cut at a random point (possibly empty)."""
    return data[: int(rng.integers(len(data) + 1))]


def mutate_text(text: str, rng: np.random.Generator) -> str:
    """One text-level mutation: a field replaced by an odd token (nan, inf, -1, a huge number,
    non-ASCII, empty), a line dropped or duplicated, or a line cut."""
    lines = text.split("\n")
    if not lines:
        return text
    i = int(rng.integers(len(lines)))
    kind = int(rng.integers(5))
    if kind == 0:
        fields = lines[i].split()
        if fields:
            j = int(rng.integers(len(fields)))
            fields[j] = str(rng.choice(["nan", "inf", "-inf", "-1", "99999999999", "1e308",
                                         "\u00e9\u00e8", "", "0x10", "--"]))
            lines[i] = " ".join(fields)
    elif kind == 1:
        del lines[i]
    elif kind == 2:
        lines.insert(i, lines[i])
    elif kind == 3:
        lines[i] = lines[i][: int(rng.integers(len(lines[i]) + 1))]
    else:
        lines[i] = lines[i].replace(" ", "\t", 1)
    return "\n".join(lines)


def mutations(data: bytes, seed: int, count: int, text: bool | None = None) -> list[bytes]:
    """``count`` seeded mutants of ``data``: text mutations for UTF-8 text (unless ``text`` is
    False), else byte flips and truncations."""
    rng = np.random.default_rng(seed)
    if text is None:
        try:
            data.decode("utf-8")
            text = True
        except UnicodeDecodeError:
            text = False
    out = []
    for _ in range(count):
        r = rng.random()
        if text and r < 0.6:
            out.append(mutate_text(data.decode("utf-8"), rng).encode("utf-8"))
        elif r < 0.85:
            out.append(flip_bytes(data, rng, n=int(rng.integers(1, 4))))
        else:
            out.append(truncate(data, rng))
    return out
