"""Fuzzing the n-gram LM files (ARPA, gzipped ARPA, asrkit binary) through ``asrkit lm``.

Each case runs ``asrkit lm ppl`` or ``asrkit lm prune`` in a child process with a time limit on
one seeded mutant. A mutant must fail cleanly (non-zero exit, one line naming the file, no
signal, traceback or hang) or, where it is still a valid model, give the right answer: for
ARPA the log-probability KenLM gives on the same file; for the binary form (whose arrays carry
checksums) exactly what the intact model gives. A few cases run by default, many under
``--runslow``.
"""

from __future__ import annotations

import gzip
import json
import pathlib
import struct
import zlib

import numpy as np
import pytest

from tests.fuzz.harness import (
    assert_clean_failure,
    assert_clean_outcome,
    mutations,
    run_cli,
    run_python,
)

DATA = pathlib.Path(__file__).resolve().parents[2] / "data" / "lm"
ARPA = DATA / "test.arpa"
TEXT = DATA / "test.txt"
TIMEOUT = 60.0
PRUNE = "1e-3"
slow = pytest.mark.slow

# -- references ----------------------------------------------------------------------------------

# KenLM wants exactly one tab between an n-gram line's fields and nothing after \\end\\; asrkit
# (like SRILM) takes any whitespace and stops at \\end\\. So the reference reads a copy with
# KenLM's spacing: the same model.
KENLM_LOGPROB = """
import gzip, re, sys
import kenlm
out, order = [], 0
with open(sys.argv[1], "rb") as f:
    zipped = f.read(2) == b"\\x1f\\x8b"
with (gzip.open if zipped else open)(sys.argv[1], "rt", encoding="utf-8") as f:
    for line in f:
        fields = line.split()
        m = re.match(r"^\\\\(\\d+)-grams:$", line.strip())
        if m:
            order = int(m.group(1))
        elif fields and fields[0].startswith("ngram") and order == 0:
            line = " ".join(fields) + "\\n"
        elif order and len(fields) > order:
            line = "\\t".join([fields[0], " ".join(fields[1:order + 1])]
                               + fields[order + 1:]) + "\\n"
        out.append(line)
        if line.strip() == "\\\\end\\\\":
            break
with open(sys.argv[1] + ".kenlm", "w", encoding="utf-8") as f:
    f.write("".join(out))
try:
    m = kenlm.Model(sys.argv[1] + ".kenlm")
except Exception as e:
    print("kenlm rejects:", str(e).splitlines()[0] if str(e) else type(e).__name__,
          file=sys.stderr)
    sys.exit(3)
total = 0.0
with open(sys.argv[2], encoding="utf-8") as f:
    for line in f:
        if line.split():
            total += sum(p for p, _, oov in m.full_scores(line) if not oov)
print(repr(total))
"""


def kenlm_logprob(path) -> float | None:
    """KenLM's total log10 probability of the test text (OOVs excluded, ``</s>`` counted, as
    ``asrkit lm ppl`` reports it), or None when KenLM does not load the file. KenLM runs in a
    child process: a mutant must not be able to take the test run down with it."""
    res = run_python(KENLM_LOGPROB, [str(path), str(TEXT)], timeout=TIMEOUT)
    assert res.returncode is not None and res.signal is None, res.describe()
    if res.returncode == 3:
        return None
    assert res.returncode == 0, res.describe()
    return float(res.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def binary_lm(tmp_path_factory):
    """The shipped ARPA as an asrkit binary LM, with the outputs every intact copy gives:
    ``lm ppl --json`` figures and the ``lm prune`` ARPA text."""
    from asrkit.lm import NgramLM, evaluate, prune_entropy

    folder = tmp_path_factory.mktemp("binary_lm")
    lm = NgramLM.load(ARPA)
    path = folder / "lm.bin"
    lm.save_binary(path)
    with open(TEXT, encoding="utf-8") as f:
        ppl = evaluate(lm, f).as_dict()
    pruned = folder / "pruned.arpa"
    prune_entropy(lm, float(PRUNE)).write_arpa(pruned)
    return path, ppl, pruned.read_bytes()


def ppl_json(res) -> dict:
    """The figures of ``lm ppl --json`` (without the file names)."""
    d = json.loads(res.stdout)
    return {k: v for k, v in d.items() if k not in ("lm", "text")}


def same_figures(a: dict, b: dict) -> bool:
    """JSON figures equal, NaN equal to NaN."""
    return a.keys() == b.keys() and all(
        a[k] == b[k] or (isinstance(a[k], float) and a[k] != a[k] and b[k] != b[k]) for k in a)


# -- ARPA --------------------------------------------------------------------------------------


def check_arpa_mutant(tmp_path, data: bytes, name: str = "lm.arpa") -> None:
    """``lm ppl`` on a mutated ARPA file: a clean failure, or KenLM's log-probability."""
    path = tmp_path / name
    path.write_bytes(data)
    res = run_cli(["lm", "ppl", "--lm", str(path), "--text", str(TEXT), "--json"],
                  timeout=TIMEOUT)
    assert_clean_outcome(res, names=str(path))
    if res.returncode != 0:
        return
    ours = json.loads(res.stdout)["logprob"]
    ref = kenlm_logprob(path)
    assert ref is not None, f"we accept a file KenLM rejects\n{res.describe()}"
    assert ours == pytest.approx(ref, abs=2e-3), f"wrong output: {ours} vs KenLM {ref}"


def arpa_case(tmp_path, seed: int) -> None:
    check_arpa_mutant(tmp_path, mutations(ARPA.read_bytes(), seed, 1)[0])


@pytest.mark.parametrize("seed", range(6))
def test_mutated_arpa(tmp_path, seed):
    arpa_case(tmp_path, seed)


@slow
@pytest.mark.parametrize("seed", range(6, 80))
def test_mutated_arpa_long(tmp_path, seed):
    arpa_case(tmp_path, seed)


def gz_case(tmp_path, seed: int) -> None:
    data = gzip.compress(ARPA.read_bytes(), mtime=0)
    check_arpa_mutant(tmp_path, mutations(data, 1000 + seed, 1, text=False)[0], "lm.arpa.gz")


@pytest.mark.parametrize("seed", range(2))
def test_mutated_gzipped_arpa(tmp_path, seed):
    gz_case(tmp_path, seed)


@slow
@pytest.mark.parametrize("seed", range(2, 20))
def test_mutated_gzipped_arpa_long(tmp_path, seed):
    gz_case(tmp_path, seed)


def _replace_line(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)


ARPA_TEXT = ARPA.read_text(encoding="utf-8")
BAD_ARPAS = {
    "nan-prob": _replace_line(ARPA_TEXT, "-1.1132554\tsees", "nan\tsees"),
    "inf-prob": _replace_line(ARPA_TEXT, "-1.1132554\tsees", "inf\tsees"),
    "positive-prob": _replace_line(ARPA_TEXT, "-1.1132554\tsees", "0.5\tsees"),
    "nan-backoff": _replace_line(ARPA_TEXT, "sees\t-0.3756922", "sees\tnan"),
    "huge-prob": _replace_line(ARPA_TEXT, "-1.1132554\tsees", "1e308\tsees"),
}


@pytest.mark.parametrize("case", sorted(BAD_ARPAS))
def test_bad_arpa_values_name_the_line(tmp_path, case):
    path = tmp_path / "lm.arpa"
    path.write_text(BAD_ARPAS[case], encoding="utf-8")
    lineno = next(i for i, line in enumerate(BAD_ARPAS[case].splitlines(), 1)
                  if "sees\t" in line and line.startswith(("nan", "inf", "0.5", "1e308"))
                  or line.endswith("sees\tnan"))
    res = run_cli(["lm", "ppl", "--lm", str(path), "--text", str(TEXT)], timeout=TIMEOUT)
    assert_clean_failure(res, names=f"{path}:{lineno}")


def test_arpa_without_end_of_sentence_is_a_clean_error(tmp_path):
    from asrkit.lm import NgramLM

    lm = NgramLM.load(ARPA)
    tables = [[(w, p, b) for w, p, b in lm.iter_ngrams(n) if "</s>" not in w]
              for n in (1, 2, 3)]
    lines = ["\\data\\"] + [f"ngram {n}={len(t)}" for n, t in enumerate(tables, 1)] + [""]
    for n, t in enumerate(tables, 1):
        lines.append(f"\\{n}-grams:")
        lines += [f"{p}\t{' '.join(w)}" + (f"\t{b}" if b and n < 3 else "") for w, p, b in t]
        lines.append("")
    lines.append("\\end\\")
    path = tmp_path / "noeos.arpa"
    path.write_text("\n".join(lines) + "\n")
    res = run_cli(["lm", "ppl", "--lm", str(path), "--text", str(TEXT)], timeout=TIMEOUT)
    assert_clean_failure(res, names=str(path))
    assert "</s>" in res.stderr


@pytest.mark.parametrize("kind", ["directory", "empty", "not-utf8", "truncated-gz", "bad-gz"])
def test_unreadable_model_files(tmp_path, kind):
    path = tmp_path / "lm.arpa"
    if kind == "directory":
        path.mkdir()
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "not-utf8":
        path.write_bytes(ARPA.read_bytes().replace(b"sees", b"s\xffes", 1))
    elif kind == "truncated-gz":
        path.write_bytes(gzip.compress(ARPA.read_bytes())[:300])
    else:
        path.write_bytes(b"\x1f\x8b" + b"\x00" * 64)
    res = run_cli(["lm", "ppl", "--lm", str(path), "--text", str(TEXT)], timeout=TIMEOUT)
    assert_clean_failure(res, names=str(path))


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_prune_threshold_must_be_a_finite_non_negative_number(tmp_path, value):
    res = run_cli(["lm", "prune", "--lm", str(ARPA), "--threshold", value, "--output",
                   str(tmp_path / "o.arpa")], timeout=TIMEOUT)
    assert_clean_failure(res, names="threshold")
    assert not (tmp_path / "o.arpa").exists()


# -- binary LM ---------------------------------------------------------------------------------


def read_header(data: bytes) -> tuple[dict, int]:
    """(header dict, offset of the first array) of a binary LM's bytes."""
    (hlen,) = struct.unpack("<Q", data[8:16])
    return json.loads(data[16:16 + hlen]), -(-(16 + hlen) // 64) * 64


def rewrite_array(data: bytes, name: str, values: np.ndarray) -> bytes:
    """``data`` with array ``name`` overwritten by ``values`` (same byte size) and its checksum
    (when the format has one) updated, so the change reaches the loader's deeper checks."""
    header, start = read_header(data)
    spec = header["arrays"][name]
    raw = np.ascontiguousarray(values, dtype=np.dtype(spec["dtype"])).tobytes()
    off = start + spec["offset"]
    out = bytearray(data)
    out[off:off + len(raw)] = raw
    if "crc32" in spec:
        spec["crc32"] = zlib.crc32(raw)
        out = bytearray(with_header(bytes(out), json.dumps(header)))
    return bytes(out)


def with_header(data: bytes, header_text: str) -> bytes:
    """``data`` with its JSON header replaced by ``header_text``: padded with spaces to the old
    length so the arrays stay where they were, when it is not longer."""
    (hlen,) = struct.unpack("<Q", data[8:16])
    new = header_text.encode()
    if len(new) < hlen:
        new += b" " * (hlen - len(new))
    _, start = read_header(data)
    body = data[start:]
    head = data[:8] + struct.pack("<Q", len(new)) + new
    pad = -len(head) % 64
    return head + b"\0" * pad + body


def mutate_header(data: bytes, rng: np.random.Generator) -> bytes:
    """One change to the JSON header: a digit, a dtype, a number replaced by an odd one, or the
    header length field."""
    (hlen,) = struct.unpack("<Q", data[8:16])
    text = data[16:16 + hlen].decode()
    kind = int(rng.integers(4))
    if kind == 0:
        digits = [i for i, c in enumerate(text) if c.isdigit()]
        i = digits[int(rng.integers(len(digits)))]
        text = text[:i] + str(int(rng.integers(10))) + text[i + 1:]
    elif kind == 1:
        dtypes = [i for i in range(len(text)) if text.startswith('"dtype": "', i)]
        i = dtypes[int(rng.integers(len(dtypes)))] + len('"dtype": "')
        j = text.index('"', i)
        new = str(rng.choice(["|O8", "<f8", ">u8", "<i4", "|V8", "<U2", "|b1", "<c8", "x"]))
        text = text[:i] + new + text[j:]
    elif kind == 2:
        import re

        nums = [m.span() for m in re.finditer(r"-?\d+", text)]
        i, j = nums[int(rng.integers(len(nums)))]
        new = str(rng.choice(["-1", "-64", "99999999999999", "1e400", "0", "null", "[]",
                              "1.5", "true", "4611686018427387904"]))
        text = text[:i] + new + text[j:]
    else:
        n = int(rng.choice([0, 1, hlen - 1, hlen + 1, 2**40, 2**63, len(data)]))
        return data[:8] + struct.pack("<Q", n) + data[16:]
    return with_header(data, text)


def binary_case(tmp_path, binary_lm, seed: int) -> None:
    path, ref_ppl, ref_pruned = binary_lm
    rng = np.random.default_rng(2000 + seed)
    data = path.read_bytes()
    if rng.random() < 0.6:
        mutant = mutate_header(data, rng)
    else:
        mutant = mutations(data, 3000 + seed, 1, text=False)[0]
    bad = tmp_path / "lm.bin"
    bad.write_bytes(mutant)
    if seed % 2 == 0:
        res = run_cli(["lm", "ppl", "--lm", str(bad), "--text", str(TEXT), "--json"],
                      timeout=TIMEOUT)
        assert_clean_outcome(res, names=str(bad))
        if res.returncode == 0:
            assert same_figures(ppl_json(res), ref_ppl), f"wrong output\n{res.describe()}"
    else:
        out = tmp_path / "pruned.arpa"
        res = run_cli(["lm", "prune", "--lm", str(bad), "--threshold", PRUNE, "--output",
                       str(out)], timeout=TIMEOUT)
        assert_clean_outcome(res, names=str(bad))
        if res.returncode == 0:
            assert out.read_bytes() == ref_pruned, f"wrong output\n{res.describe()}"


@pytest.mark.parametrize("seed", range(8))
def test_mutated_binary_lm(tmp_path, binary_lm, seed):
    binary_case(tmp_path, binary_lm, seed)


@slow
@pytest.mark.parametrize("seed", range(8, 100))
def test_mutated_binary_lm_long(tmp_path, binary_lm, seed):
    binary_case(tmp_path, binary_lm, seed)


def _crafted(binary_lm, kind: str) -> bytes:
    path = binary_lm[0]
    data = path.read_bytes()
    header, _ = read_header(data)
    arrays = header["arrays"]
    if kind == "object-dtype":
        for name in ("keys", "rank2"):
            arrays[name]["dtype"] = "|O8"
        return with_header(data, json.dumps(header))
    if kind == "no-empty-slot":  # every slot taken: a probe for a missing n-gram never ends
        n = int(np.prod(arrays["table"]["shape"]))
        return rewrite_array(data, "table", np.zeros(n, np.uint64))
    if kind == "word-id-out-of-range":
        words = np.zeros(arrays["words3"]["shape"], np.int32)
        words[:] = 10**6
        return rewrite_array(data, "words3", words)
    if kind == "rank-out-of-range":
        return rewrite_array(data, "rank2", np.full(arrays["rank2"]["shape"], 10**9, np.int64))
    if kind == "vocab-longer-than-prob":
        spec = arrays["vocab"]
        vocab = np.frombuffer(data, np.uint8, count=spec["shape"][0],
                              offset=read_header(data)[1] + spec["offset"]).copy()
        vocab[vocab == ord("a")] = ord("\n")  # more words than unigram rows
        return rewrite_array(data, "vocab", vocab)
    if kind == "huge-shape":
        arrays["prob"]["shape"] = [10**15]
        return with_header(data, json.dumps(header))
    raise AssertionError(kind)


CRAFTED = ["object-dtype", "no-empty-slot", "word-id-out-of-range", "rank-out-of-range",
           "vocab-longer-than-prob", "huge-shape"]


# each kind once by default (ppl and prune take turns), both commands under --runslow
CRAFTED_CASES = [pytest.param(kind, command, marks=[slow] if (i + j) % 2 else [])
                 for i, kind in enumerate(CRAFTED) for j, command in enumerate(["ppl", "prune"])]


@pytest.mark.parametrize("kind,command", CRAFTED_CASES)
def test_crafted_binary_lm_fails_cleanly(tmp_path, binary_lm, kind, command):
    bad = tmp_path / "lm.bin"
    bad.write_bytes(_crafted(binary_lm, kind))
    if command == "ppl":
        argv = ["lm", "ppl", "--lm", str(bad), "--text", str(TEXT)]
    else:
        argv = ["lm", "prune", "--lm", str(bad), "--threshold", PRUNE, "--output",
                str(tmp_path / "o.arpa")]
    assert_clean_failure(run_cli(argv, timeout=TIMEOUT), names=str(bad))
