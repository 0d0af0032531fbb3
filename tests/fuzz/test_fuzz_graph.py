"""Fuzzing the graph-building inputs and graph folders: tokens, lexicons, word-loop weights,
grammars, OpenFst text and symbol tables, and what ``asrkit decode`` reads from a graph folder.

Each case is a child process with a time limit on one seeded mutant. It must fail cleanly
(non-zero exit, one line naming the file, no signal, traceback or hang) or, where the mutant is
still valid input, give the right answer: a word-loop TLG must accept every pronunciation with
the cost a direct computation from the (mutated) lexicon gives, checked with OpenFst; FST text
must read as OpenFst's ``fstcompile`` reads it; a decode must give the intact graph's words.
A few cases run by default, many under ``--runslow``.
"""

from __future__ import annotations

import json
import math
import pathlib
import shutil

import numpy as np
import pytest

from tests.fuzz.harness import (
    assert_clean_failure,
    assert_clean_outcome,
    mutations,
    run_cli,
    run_python,
)

DATA = pathlib.Path(__file__).resolve().parents[2] / "data" / "graph"
TOKENS = DATA / "tokens.txt"
LEXICON = DATA / "lexicon.txt"
LEXICONP = DATA / "lexiconp.txt"
GRAMMAR = DATA / "commands.jsgf"
TIMEOUT = 90.0
slow = pytest.mark.slow


# -- word-loop graphs, checked against a direct computation with OpenFst ------------------------


def _simple_table(text: str) -> dict[str, int]:
    """'symbol id' lines of an accepted tokens.txt (``#`` lines skipped)."""
    out = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) == 2 and not f[0].startswith("#"):
            out[f[0]] = int(f[1])
    return out


def _lexicon(text: str, with_probs: bool) -> list[tuple[str, float, tuple[str, ...]]]:
    rows = [line.split() for line in text.splitlines() if line.split()]
    if with_probs:
        return [(r[0], float(r[1]), tuple(r[2:])) for r in rows]
    return [(r[0], 1.0, tuple(r[1:])) for r in rows]


def expected_cost(tokens: tuple[str, ...], lexicon, loop_cost: dict[str, float]) -> float:
    """The best cost of reading ``tokens`` as a sequence of lexicon words (word-loop cost plus
    -ln prob of the pronunciation): a direct dynamic programme over token positions."""
    n = len(tokens)
    best = [math.inf] * (n + 1)
    best[0] = 0.0
    for i in range(n):
        if best[i] == math.inf:
            continue
        for word, prob, pron in lexicon:
            j = i + len(pron)
            if tokens[i:j] == pron:
                best[j] = min(best[j], best[i] + loop_cost[word] - math.log(prob))
    return best[n]


def check_word_loop_graph(folder: pathlib.Path, tokens_text: str, lexicon_text: str,
                          with_probs: bool = False, weights: dict[str, float] | None = None):
    """The built folder is right for the inputs it accepted: its tokens are the input tokens,
    its words the lexicon's, and TLG (compiled by OpenFst from TLG.fst.txt) reads each
    pronunciation, frame by frame, with the cost the lexicon and the loop weights give."""
    import pynini
    import pywrapfst

    toks = _simple_table(tokens_text)
    lexicon = _lexicon(lexicon_text, with_probs)
    words = sorted({w for w, _, _ in lexicon})
    if weights is None:
        loop_cost = {w: math.log(len(words)) for w in words}
    else:  # words without a weight are not in the loop
        total = sum(weights.values())
        loop_cost = {w: -math.log(weights[w] / total) for w in weights}
        lexicon = [e for e in lexicon if e[0] in loop_cost]
    graph_tokens = _simple_table((folder / "tokens.txt").read_text())
    assert {s: i - 1 for s, i in graph_tokens.items() if s != "<eps>"} == toks
    graph_words = set(_simple_table((folder / "words.txt").read_text()))
    assert graph_words - {"<eps>", "#0", "<s>", "</s>"} == set(words)
    isyms = pywrapfst.SymbolTable.read_text(str(folder / "tokens.txt"))
    osyms = pywrapfst.SymbolTable.read_text(str(folder / "words.txt"))
    compiler = pywrapfst.Compiler(isymbols=isyms, osymbols=osyms, keep_isymbols=True,
                                  keep_osymbols=True)
    compiler.write((folder / "TLG.fst.txt").read_text())
    tlg = pynini.Fst.from_pywrapfst(compiler.compile())
    blank = next(s for s in ("<blk>", "<blank>") if s in toks)
    for _, _, pron in _lexicon(lexicon_text, with_probs):
        frames = []
        for t in pron:
            if frames and frames[-1] == t:
                frames.append(blank)
            frames.append(t)
        acc = pynini.accep(" ".join(frames), token_type=isyms)
        lattice = pynini.compose(acc, tlg)
        dist = pynini.shortestdistance(lattice, reverse=True)
        got = float(dist[lattice.start()]) if lattice.start() >= 0 and dist else math.inf
        want = expected_cost(pron, lexicon, loop_cost)
        assert got == pytest.approx(want, abs=1e-3), (
            f"wrong output: TLG reads {pron} with cost {got}, the lexicon gives {want}")


def build(tmp_path, tokens: pathlib.Path, lexicon: pathlib.Path, *grammar: str):
    out = tmp_path / "graph"
    return out, run_cli(["graph", "build", "--tokens", str(tokens), "--lexicon", str(lexicon),
                         *grammar, "--out", str(out)], timeout=TIMEOUT)


def tokens_case(tmp_path, seed: int) -> None:
    mutant = mutations(TOKENS.read_bytes(), 100 + seed, 1)[0]
    path = tmp_path / "tokens.txt"
    path.write_bytes(mutant)
    out, res = build(tmp_path, path, LEXICON, "--word-loop")
    # a token the lexicon needs may be gone: then the lexicon line is at fault
    assert_clean_outcome(res, names=[str(path), str(LEXICON)])
    if res.returncode == 0:
        check_word_loop_graph(out, mutant.decode(), LEXICON.read_text())


def lexicon_case(tmp_path, seed: int, probs: bool) -> None:
    source = LEXICONP if probs else LEXICON
    mutant = mutations(source.read_bytes(), 200 + seed, 1)[0]
    path = tmp_path / source.name
    path.write_bytes(mutant)
    flag = "--lexiconp" if probs else "--no-lexiconp"
    out, res = build(tmp_path, TOKENS, path, "--word-loop", flag)
    assert_clean_outcome(res, names=[str(path)])
    if res.returncode == 0:
        check_word_loop_graph(out, TOKENS.read_text(), mutant.decode(), with_probs=probs)


WEIGHTS = "".join(f"{w} {i + 1}\n" for i, w in enumerate(
    sorted({line.split()[0] for line in LEXICON.read_text().splitlines()})))


def weights_case(tmp_path, seed: int) -> None:
    mutant = mutations(WEIGHTS.encode(), 300 + seed, 1)[0]
    path = tmp_path / "weights.txt"
    path.write_bytes(mutant)
    out, res = build(tmp_path, TOKENS, LEXICON, "--word-loop-weights", str(path))
    assert_clean_outcome(res, names=[str(path)])
    if res.returncode == 0:
        weights = {f[0]: float(f[1]) for f in map(str.split, mutant.decode().splitlines()) if f}
        check_word_loop_graph(out, TOKENS.read_text(), LEXICON.read_text(), weights=weights)


def grammar_case(tmp_path, seed: int) -> None:
    mutant = mutations(GRAMMAR.read_bytes(), 400 + seed, 1)[0]
    path = tmp_path / "commands.jsgf"
    path.write_bytes(mutant)
    _, res = build(tmp_path, TOKENS, LEXICON, "--grammar", str(path))
    assert_clean_outcome(res, names=[str(path)])


@pytest.mark.parametrize("seed", range(4))
def test_mutated_tokens(tmp_path, seed):
    tokens_case(tmp_path, seed)


@pytest.mark.parametrize("seed", range(3))
def test_mutated_lexicon(tmp_path, seed):
    lexicon_case(tmp_path, seed, probs=False)


@pytest.mark.parametrize("seed", range(2))
def test_mutated_lexiconp(tmp_path, seed):
    lexicon_case(tmp_path, seed, probs=True)


@pytest.mark.parametrize("seed", range(3))
def test_mutated_word_loop_weights(tmp_path, seed):
    weights_case(tmp_path, seed)


@pytest.mark.parametrize("seed", range(1))
def test_mutated_grammar(tmp_path, seed):
    grammar_case(tmp_path, seed)


@slow
@pytest.mark.parametrize("seed", range(4, 30))
def test_mutated_tokens_long(tmp_path, seed):
    tokens_case(tmp_path, seed)


@slow
@pytest.mark.parametrize("seed", range(3, 30))
def test_mutated_lexicon_long(tmp_path, seed):
    lexicon_case(tmp_path, seed, probs=False)


@slow
@pytest.mark.parametrize("seed", range(2, 20))
def test_mutated_lexiconp_long(tmp_path, seed):
    lexicon_case(tmp_path, seed, probs=True)


@slow
@pytest.mark.parametrize("seed", range(3, 20))
def test_mutated_word_loop_weights_long(tmp_path, seed):
    weights_case(tmp_path, seed)


@slow
@pytest.mark.parametrize("seed", range(1, 20))
def test_mutated_grammar_long(tmp_path, seed):
    grammar_case(tmp_path, seed)


# -- bad paths and numbers of graph build ---------------------------------------------------------


def test_huge_token_id_is_refused_at_once(tmp_path):
    path = tmp_path / "tokens.txt"
    path.write_text(TOKENS.read_text() + "z 99999999999\n")
    _, res = build(tmp_path, path, LEXICON, "--word-loop")
    assert_clean_failure(res, names=str(path))


UNREADABLE = [(which, problem) for which in ("tokens", "lexicon", "weights", "grammar")
              for problem in ("directory", "not-utf8", "missing")]
DEFAULT_UNREADABLE = {("tokens", "directory"), ("lexicon", "directory"), ("lexicon", "not-utf8"),
                      ("weights", "not-utf8"), ("grammar", "not-utf8"), ("weights", "missing")}


@pytest.mark.parametrize("which,problem", [
    pytest.param(w, p, marks=[] if (w, p) in DEFAULT_UNREADABLE else [slow])
    for w, p in UNREADABLE])
def test_unreadable_inputs(tmp_path, which, problem):
    source = {"tokens": TOKENS, "lexicon": LEXICON, "grammar": GRAMMAR}.get(which)
    data = source.read_bytes() if source else WEIGHTS.encode()
    path = tmp_path / f"{which}.txt"
    if problem == "directory":
        path.mkdir()
    elif problem == "not-utf8":
        path.write_bytes(data.replace(b"a", b"\xe9", 1))
    args = {"tokens": str(TOKENS), "lexicon": str(LEXICON)}
    grammar = ["--word-loop"]
    if which in args:
        args[which] = str(path)
    elif which == "weights":
        grammar = ["--word-loop-weights", str(path)]
    else:
        grammar = ["--grammar", str(path)]
    _, res = build(tmp_path, pathlib.Path(args["tokens"]), pathlib.Path(args["lexicon"]),
                   *grammar)
    assert_clean_failure(res, names=str(path))


def test_out_is_an_existing_file(tmp_path):
    out = tmp_path / "graph"
    out.write_text("precious\n")
    res = run_cli(["graph", "build", "--tokens", str(TOKENS), "--lexicon", str(LEXICON),
                   "--word-loop", "--out", str(out)], timeout=TIMEOUT)
    assert_clean_failure(res, names=str(out))
    assert out.read_text() == "precious\n"


@pytest.mark.parametrize("weight", ["nan", "inf", "-1", "0"])
def test_word_loop_weights_must_be_finite_and_positive(tmp_path, weight):
    path = tmp_path / "weights.txt"
    lines = WEIGHTS.splitlines()
    lineno = next(i for i, line in enumerate(lines, 1) if line.startswith("cat "))
    lines[lineno - 1] = f"cat {weight}"
    path.write_text("\n".join(lines) + "\n")
    _, res = build(tmp_path, TOKENS, LEXICON, "--word-loop-weights", str(path))
    assert_clean_failure(res, names=f"{path}:{lineno}")


@pytest.mark.parametrize("option,value", [("--sil-prob", "nan"), ("--max-states", "-1"),
                                          ("--max-states", "0")])
def test_bad_numbers(tmp_path, option, value):
    _, res = build(tmp_path, TOKENS, LEXICON, "--word-loop", "--sil-token", "o", option, value)
    assert_clean_failure(res, names=option.lstrip("-").replace("-", "_"))


# -- OpenFst text and symbol tables (Python API, in a child) ------------------------------------

READ_FST = """
import json, sys
from asrkit.decoders.fst import SymbolTable, read_fst_text
try:
    isyms = SymbolTable.read_text(sys.argv[2]) if sys.argv[2] != "-" else None
    osyms = SymbolTable.read_text(sys.argv[3]) if sys.argv[3] != "-" else None
    fst = read_fst_text(sys.argv[1], isyms, osyms)
except (OSError, ValueError) as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
arcs = sorted(zip(fst.src.tolist(), fst.dst.tolist(), fst.ilabel.tolist(), fst.olabel.tolist(),
                  [round(w, 4) for w in fst.weight.tolist()]))
finals = {int(s): round(float(fst.final[s]), 4) for s in fst.final_states()}
print(json.dumps({"start": fst.start, "states": fst.num_states, "arcs": arcs,
                  "finals": finals}))
"""

OPENFST_READ = """
import json, sys
import pywrapfst
try:
    isyms = pywrapfst.SymbolTable.read_text(sys.argv[2])
    osyms = pywrapfst.SymbolTable.read_text(sys.argv[3])
    c = pywrapfst.Compiler(isymbols=isyms, osymbols=osyms, keep_state_numbering=True)
    c.write(open(sys.argv[1], encoding="utf-8").read())
    f = c.compile()
except Exception as e:
    print(f"openfst rejects: {e}", file=sys.stderr)
    sys.exit(3)
if f.properties(pywrapfst.ERROR, True):
    sys.exit(3)
arcs, finals = [], {}
for s in f.states():
    for a in f.arcs(s):
        arcs.append([s, a.nextstate, a.ilabel, a.olabel, round(float(a.weight), 4)])
    w = float(f.final(s))
    if w != float("inf"):
        finals[str(s)] = round(w, 4)
print(json.dumps({"start": f.start(), "states": f.num_states(), "arcs": sorted(arcs),
                  "finals": finals}))
"""


@pytest.fixture(scope="session")
def word_loop_folder(tmp_path_factory):
    """A word-loop graph folder built from the shipped tokens and lexicon."""
    from asrkit.decoders.graph import make_graph

    folder = tmp_path_factory.mktemp("graph") / "loop"
    make_graph(TOKENS, LEXICON, word_loop=True).write(folder)
    return folder


def fst_text_case(tmp_path, folder, seed: int, part: str) -> None:
    files = {"fst": folder / "TLG.fst.txt", "isyms": folder / "tokens.txt",
             "osyms": folder / "words.txt"}
    source = files[part]
    mutant = mutations(source.read_bytes(), 500 + seed, 1)[0]
    path = tmp_path / source.name
    path.write_bytes(mutant)
    files[part] = path
    argv = [str(files["fst"]), str(files["isyms"]), str(files["osyms"])]
    res = run_python(READ_FST, argv, timeout=TIMEOUT)
    assert_clean_outcome(res, names=str(path))
    if res.returncode != 0:
        return
    ref = run_python(OPENFST_READ, argv, timeout=TIMEOUT)
    assert ref.returncode in (0, 3) and ref.signal is None, ref.describe()
    assert ref.returncode == 0, f"we accept what OpenFst rejects\n{ref.describe()}"
    ours, theirs = json.loads(res.stdout), json.loads(ref.stdout)
    theirs["finals"] = {int(k): v for k, v in theirs["finals"].items()}
    ours["finals"] = {int(k): v for k, v in ours["finals"].items()}
    assert ours == theirs, f"wrong output: read differently from OpenFst\n{res.describe()}"


@pytest.mark.parametrize("part,seed", [("fst", 0), ("fst", 1), ("fst", 2), ("isyms", 0),
                                       ("osyms", 0)])
def test_mutated_fst_text_and_symbols(tmp_path, word_loop_folder, part, seed):
    fst_text_case(tmp_path, word_loop_folder, seed, part)


@slow
@pytest.mark.parametrize("part", ["fst", "isyms", "osyms"])
@pytest.mark.parametrize("seed", range(3, 25))
def test_mutated_fst_text_and_symbols_long(tmp_path, word_loop_folder, part, seed):
    fst_text_case(tmp_path, word_loop_folder, seed, part)


@pytest.mark.parametrize("line,symbols", [
    ("0 1 1 99999999999", False), ("0 1 2 3 nan", False), ("0 1 a cat", False),
    ("0 99999999999 a cat", True), ("0 1 a cat nan", True), ("0 1 a cat -inf", True),
    ("3000000000", True), ("40000000", True), ("0 1 a 99999999999", True)])
def test_fst_text_ids_and_weights_are_bounded(tmp_path, word_loop_folder, line, symbols):
    path = tmp_path / "bad.fst.txt"
    first = "0 1 <blk> <eps>" if symbols else "0 1 1 0"
    path.write_text(f"{first}\n1\n{line}\n")
    tables = [str(word_loop_folder / "tokens.txt"), str(word_loop_folder / "words.txt")]
    res = run_python(READ_FST, [str(path), *(tables if symbols else ["-", "-"])],
                     timeout=TIMEOUT)
    assert_clean_failure(res, names=f"{path}:3")


# -- graph folders read by asrkit decode --------------------------------------------------------


@pytest.fixture(scope="session")
def decode_setup(tmp_path_factory, word_loop_folder):
    """Log-probabilities of a few utterances and the intact graph's words for them (as word
    ids, so a relabelled words.txt can be checked)."""
    from asrkit.decoders.decode import DecodingGraph, decode_utterance
    from asrkit.io import TableWriter

    folder = tmp_path_factory.mktemp("decode")
    rng = np.random.default_rng(7)
    ark = folder / "logp.ark"
    graph = DecodingGraph.load(str(word_loop_folder))
    ids = {w: i for i, w in graph.words.items()}
    ref = {}
    with TableWriter(f"ark:{ark}") as w:
        for u in range(3):
            logits = rng.normal(size=(25, 9)).astype(np.float32) * 3
            logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
            w.write(f"utt{u}", logp.astype(np.float32))
            ref[f"utt{u}"] = [ids[x] for x in decode_utterance(graph, logp).words]
    return ark, ref


def decode_case(tmp_path, word_loop_folder, decode_setup, seed: int, part: str) -> None:
    ark, ref = decode_setup
    folder = tmp_path / "graph"
    shutil.copytree(word_loop_folder, folder)
    path = folder / part
    path.write_bytes(mutations(path.read_bytes(), 600 + seed, 1,
                               text=None if part != "TLG.npz" else False)[0])
    out = tmp_path / "dec"
    res = run_cli(["decode", "--graph", str(folder), "--logprobs", f"ark:{ark}", "--out",
                   str(out)], timeout=TIMEOUT)
    assert_clean_outcome(res, names=str(path))
    if res.returncode != 0:
        return
    table = {}
    for line in (folder / "words.txt").read_text().splitlines():
        f = line.split()
        if len(f) == 2:
            table[int(f[1])] = f[0]
    hyp = {}
    for line in (out / "hyp.txt").read_text().splitlines():
        utt, _, words = line.partition(" ")
        hyp[utt] = words.split()
    assert hyp == {u: [table[i] for i in ids] for u, ids in ref.items()}, "wrong output"


@pytest.mark.parametrize("part,seed", [("words.txt", 0), ("graph.json", 0), ("TLG.npz", 0)])
def test_mutated_graph_folder(tmp_path, word_loop_folder, decode_setup, part, seed):
    decode_case(tmp_path, word_loop_folder, decode_setup, seed, part)


@slow
@pytest.mark.parametrize("part", ["words.txt", "graph.json", "TLG.npz"])
@pytest.mark.parametrize("seed", range(1, 20))
def test_mutated_graph_folder_long(tmp_path, word_loop_folder, decode_setup, part, seed):
    decode_case(tmp_path, word_loop_folder, decode_setup, seed, part)
