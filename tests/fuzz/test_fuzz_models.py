"""Fuzzing acoustic model files (``.mdl``) through ``asrkit model info|torch-state|plot``.

Each case is a child process with a time limit (tests/fuzz/harness.py): a bad file must fail
cleanly, naming the file; a mutant that still reads must describe exactly the original model
(the zip CRCs cover every byte that matters). Seeded; the default run takes a few cases of each
kind, ``--runslow`` many more.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.fuzz.harness import assert_clean_failure, assert_clean_outcome, mutations, run_cli
from tests.fuzz.npz_files import (
    HEADER,
    header_of,
    npy_bytes,
    npy_header,
    read_members,
    with_header,
    write_members,
)

slow = pytest.mark.slow
F4 = "'descr': '<f4', 'fortran_order': False"


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    """A tiny model file (LSTM 4 cells, 3 inputs, 3 tokens) and its ``model info`` output."""
    from asrkit.models import Model, save

    path = tmp_path_factory.mktemp("mdl") / "good.mdl"
    save(path, Model({"layers": [{"type": "lstm", "hidden": 4}]}, 3, ["<blk>", "a", "b"]))
    res = run_cli(["model", "info", str(path), "--json"])
    assert res.returncode == 0, res.describe()
    return path, json.loads(res.stdout)


def _header_edit(**changes):
    def edit(members):
        h = header_of(members)
        for k, v in changes.items():
            if v is KeyError:
                h.pop(k)
            else:
                h[k] = v
        return with_header(members, h)
    return edit


def _member(name, data):
    return lambda members: {**members, name: data}


def _net(hidden):
    return {"layers": [{"type": "lstm", "hidden": hidden}], "seed": 0, "stack_frames": 1,
            "subsample_frames": 1}


HUGE = npy_header(f"{{{F4}, 'shape': (100000, 100000), }}", b"\0" * 64)

# id -> members edit (None: raw bytes below); every one must fail cleanly naming the file
BAD = {
    "zip-without-header": lambda m: {k: v for k, v in m.items() if k != HEADER},
    "header-not-utf8": lambda m: with_header(m, b"\xff\xfe{\"format\": 1}"),
    "header-not-json": lambda m: with_header(m, "{'format': "),
    "header-a-list": lambda m: with_header(m, "[1, 2, 3]"),
    "header-no-network": _header_edit(network=KeyError),
    "header-no-input-dim": _header_edit(input_dim=KeyError),
    "header-no-tokens": _header_edit(tokens=KeyError),
    "header-no-blank": _header_edit(blank=KeyError),
    "header-no-params": _header_edit(params=KeyError),
    "input-dim-negative": _header_edit(input_dim=-3),
    "input-dim-a-string": _header_edit(input_dim="three"),
    "input-dim-a-float": _header_edit(input_dim=3.5),
    "input-dim-huge": _header_edit(input_dim=10**12),
    "tokens-a-string": _header_edit(tokens="abc"),
    "tokens-numbers": _header_edit(tokens=[1, 2, 3]),
    "blank-99": _header_edit(blank=99),
    "network-a-list": _header_edit(network=[1]),
    "network-layer-type-a-list": _header_edit(network={"layers": [{"type": ["lstm"]}]}),
    "network-hidden-1e9": _header_edit(network=_net(10**9)),
    "params-not-a-list": _header_edit(params="output.W"),
    "param-declared-1e5-x-1e5": _member("output.W", HUGE),
    "param-object-dtype": _member("output.W", npy_header(
        "{'descr': '|O', 'fortran_order': False, 'shape': (4, 3), }", b"\0" * 96)),
    "param-npy-header-unterminated": _member("output.W", npy_header(
        f"{{{F4}, 'shape': (4, 3), ", b"\0" * 48)),
    "param-npy-header-negative-shape": _member("output.W", npy_header(
        f"{{{F4}, 'shape': (-4, 3), }}", b"\0" * 48)),
    "param-npy-header-short-data": _member("output.W", npy_header(
        f"{{{F4}, 'shape': (4, 3), }}", b"\0" * 20)),
    "param-npy-bad-magic": _member("output.W", b"\x93NUMPZ" + npy_bytes(np.zeros((4, 3)))[6:]),
    "param-wrong-shape": _member("output.b", npy_bytes(np.zeros(5, np.float32))),
    "param-int-dtype": _member("output.b", npy_bytes(np.zeros(3, np.int64))),
    "param-string-dtype": _member("output.b", npy_bytes(np.array(["a", "b", "c"]))),
    "param-nan": _member("output.b", npy_bytes(np.array([0, np.nan, 0], np.float32))),
    "param-missing": lambda m: {k: v for k, v in m.items() if k != "output.b"},
}
DEFAULT_BAD = {"header-no-tokens", "blank-99", "network-hidden-1e9", "param-declared-1e5-x-1e5",
               "param-npy-header-unterminated", "param-nan"}


@pytest.mark.parametrize("case", [c if c in DEFAULT_BAD else pytest.param(c, marks=slow)
                                  for c in BAD])
def test_a_bad_model_file_fails_cleanly(model_file, tmp_path, case):
    good, _ = model_file
    path = tmp_path / "bad.mdl"
    write_members(path, BAD[case](read_members(good)))
    assert_clean_failure(run_cli(["model", "info", str(path)]), names=str(path))


@pytest.mark.parametrize("data", [
    b"",
    pytest.param(b"not a model file\n", marks=slow),
    pytest.param(b"PK\x03\x04" + b"\0" * 40, marks=slow),
], ids=["empty", "text", "zip-magic-only"])
def test_a_file_that_is_no_archive_fails_cleanly(tmp_path, data):
    path = tmp_path / "x.mdl"
    path.write_bytes(data)
    assert_clean_failure(run_cli(["model", "info", str(path)]), names=str(path))


@slow
def test_a_directory_or_a_truncated_file_fails_cleanly(model_file, tmp_path):
    assert_clean_failure(run_cli(["model", "info", str(tmp_path)]), names=str(tmp_path))
    good, _ = model_file
    path = tmp_path / "cut.mdl"
    path.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    for action in (["info", str(path)], ["torch-state", str(path), str(tmp_path / "sd.npz")],
                   ["plot", str(path), "-o", str(tmp_path / "net.dot")]):
        assert_clean_failure(run_cli(["model", *action]), names=str(path))


def test_an_extra_member_is_never_read(model_file, tmp_path):
    """Only the parameters the header names are read: an extra member declaring 40 GB (and
    holding 64 bytes) changes nothing."""
    good, info = model_file
    path = tmp_path / "extra.mdl"
    write_members(path, {**read_members(good), "junk": HUGE})
    res = run_cli(["model", "info", str(path), "--json"], timeout=60)
    assert res.returncode == 0, res.describe()
    assert json.loads(res.stdout) == info


def _same_or_clean(res, info, path):
    """A mutant may still read (a byte the format ignores); then it must be the same model."""
    if res.returncode == 0:
        try:
            same = json.loads(res.stdout) == info
        except json.JSONDecodeError:
            same = False
        if not same:
            assert_clean_failure(res, names=str(path))  # reports "exit status 0 on bad input"
        return
    assert_clean_outcome(res, names=str(path))


@pytest.mark.parametrize("seed", [0, *[pytest.param(s, marks=slow) for s in range(1, 40)]])
def test_byte_mutants_fail_cleanly_or_read_the_same_model(model_file, tmp_path, seed):
    good, info = model_file
    for i, data in enumerate(mutations(good.read_bytes(), seed, 2, text=False)):
        path = tmp_path / f"m{i}.mdl"
        path.write_bytes(data)
        _same_or_clean(run_cli(["model", "info", str(path), "--json"]), info, path)


@pytest.mark.parametrize("seed", [0, *[pytest.param(s, marks=slow) for s in range(1, 40)]])
def test_header_text_mutants_fail_cleanly(model_file, tmp_path, seed):
    """The JSON header edited as text (valid zip, correct CRCs): fields become nan, inf, -1,
    huge numbers, odd strings; lines vanish or repeat."""
    good, _ = model_file
    members = read_members(good)
    text = json.dumps(header_of(members), indent=1)
    for i, mutant in enumerate(mutations(text.encode(), seed, 2, text=True)):
        path = tmp_path / f"h{i}.mdl"
        write_members(path, with_header(members, mutant))
        assert_clean_outcome(run_cli(["model", "info", str(path)]), names=str(path))


@slow
@pytest.mark.parametrize("seed", range(20))
def test_npy_header_mutants_fail_cleanly(model_file, tmp_path, seed):
    """Bytes of one parameter's npy header changed (valid zip, correct CRCs)."""
    good, info = model_file
    members = read_members(good)
    rng = np.random.default_rng(seed)
    names = [k for k in members if k != HEADER]
    name = names[int(rng.integers(len(names)))]
    raw = bytearray(members[name])
    for _ in range(int(rng.integers(1, 4))):
        raw[int(rng.integers(8, 128))] = int(rng.integers(32, 127))
    path = tmp_path / "n.mdl"
    write_members(path, {**members, name: bytes(raw)})
    _same_or_clean(run_cli(["model", "info", str(path), "--json"]), info, path)
