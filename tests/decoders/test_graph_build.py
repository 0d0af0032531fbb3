"""Graph building: T, L, G and TLG on the small fixtures in data/graph, checked against
brute-force computations (CTC collapse, lexicon segmentation) and against KenLM's scores."""

import math
import pathlib

import numpy as np
import pytest

from asrkit.decoders.fst import (
    accept,
    compose,
    determinize,
    linear_fst,
    paths,
    remove_disambig,
    shortest_path,
)
from asrkit.decoders.graph import (
    LN10,
    add_disambig,
    arpa_to_fst,
    ctc_topology,
    grammar_fst,
    lexicon_fst,
    make_graph,
    read_lexicon,
    read_tokens,
    tlg_weight,
    word_symbols,
)

DATA = pathlib.Path(__file__).resolve().parents[2] / "data" / "graph"
TOKENS = DATA / "tokens.txt"
LEXICON = DATA / "lexicon.txt"
ARPA = DATA / "G.arpa"


@pytest.fixture(scope="module")
def toks():
    return read_tokens(TOKENS)


@pytest.fixture(scope="module")
def lm():
    from asrkit.lm import NgramLM

    return NgramLM.from_arpa(ARPA)


@pytest.fixture(scope="module")
def lm_graph():
    return make_graph(TOKENS, LEXICON, lm=str(ARPA))


def collapse(seq, blank="<blk>"):
    out, prev = [], None
    for t in seq:
        if t != prev and t != blank:
            out.append(t)
        prev = t
    return out


def transduce(fst, ilabels):
    """{output label tuple: best weight} for one input string."""
    res = {}
    for _, outs, w in paths(compose(linear_fst(ilabels, dtype=fst.dtype), fst)):
        res[outs] = min(res.get(outs, math.inf), w)
    return res


# -- T -----------------------------------------------------------------------------------------


def test_ctc_topology_collapses_like_ctc(toks):
    T = ctc_topology(toks)
    sym = toks.symbols
    rng = np.random.default_rng(0)
    cases = [["a", "a", "<blk>", "a", "b"], ["a", "a"], ["<blk>", "a", "<blk>", "<blk>", "b", "b"],
             ["<blk>"], []]
    cases += [[sym[i] for i in rng.integers(0, len(sym), size=rng.integers(1, 8))]
              for _ in range(60)]
    for seq in cases:
        out = transduce(T, [toks.graph_label(t) for t in seq])
        expected = tuple(toks.graph_label(t) for t in collapse(seq))
        assert list(out) == [expected], seq  # exactly one output: T is unambiguous
    # "a a <blk> a b" -> "a a b"
    assert list(transduce(T, [toks.graph_label(t) for t in "a a <blk> a b".split()])) == [
        tuple(toks.graph_label(t) for t in "a a b".split())]
    assert T.num_arcs == 1 + 8 + 8 + 8 + 8 * 7


def test_read_tokens_errors(tmp_path):
    p = tmp_path / "tokens.txt"
    p.write_text("<blk> 0\na 2\n")
    with pytest.raises(ValueError, match="without gaps"):
        read_tokens(p)
    p.write_text("<blk> 0\na one\n")
    with pytest.raises(ValueError, match=r"tokens.txt:2"):
        read_tokens(p)
    p.write_text("a 0\nb 1\n")
    with pytest.raises(ValueError, match="no blank"):
        read_tokens(p)
    p.write_text("<eps> 0\n<blk> 1\n#0 2\n")
    with pytest.raises(ValueError, match="reserved"):
        read_tokens(p)


# -- L -----------------------------------------------------------------------------------------


def test_add_disambig_follows_kaldi(toks):
    lex = read_lexicon(LEXICON, tokens=toks)
    top = add_disambig(lex)
    got = {(p.word, p.tokens): p.disambig for p in lex}
    # prefixes: "a" of "a t"; "t o" of "t o o"/"t o t"; "g o" of "g o d"; homophones ok/okay
    expected = {"a": 1, "to": 1, "go": 1, "ok": 1, "okay": 2}
    for (word, _), k in got.items():
        assert k == expected.get(word, 0), word
    assert top == 2


def test_read_lexicon_probs_and_errors(tmp_path, toks):
    lexp = read_lexicon(DATA / "lexiconp.txt", tokens=toks)
    assert [(p.word, p.prob, p.tokens) for p in lexp[2:4]] == [
        ("cat", 1.0, ("c", "a", "t")), ("cat", 0.5, ("k", "a", "t"))]
    bad = tmp_path / "lexicon.txt"
    bad.write_text("cat c a t\ndog d o x\n")
    with pytest.raises(ValueError, match=r"lexicon.txt:2: token 'x' of word 'dog'"):
        read_lexicon(bad, tokens=toks)
    bad.write_text("cat\n")
    with pytest.raises(ValueError, match="empty pronunciation"):
        read_lexicon(bad)


def test_lexicon_fst_maps_spellings_to_words(toks):
    lex = read_lexicon(DATA / "lexiconp.txt", tokens=toks)
    nd = add_disambig(lex)
    words = word_symbols([p.word for p in lex])
    L = lexicon_fst(lex, toks, words, nd)
    isym = L.isymbols

    def spell(s):
        return [isym.id(t) for t in s.split()]

    assert transduce(L, spell("c a t")) == {(words.id("cat"),): 0.0}
    assert transduce(L, spell("k a t"))[(words.id("cat"),)] == pytest.approx(math.log(2))
    # "t o" is a prefix of "t o o": it needs its #1
    assert transduce(L, spell("t o")) == {}
    assert (words.id("to"),) in transduce(L, spell("t o #1"))
    two = transduce(L, spell("d o g g o #1"))
    assert list(two) == [(words.id("dog"), words.id("go"))]
    # optional silence: "sil" is not a token here, so it must be refused
    with pytest.raises(ValueError, match="silence token"):
        lexicon_fst(lex, toks, words, nd, sil_token="sil")


def test_optional_silence(toks):
    lex = read_lexicon(LEXICON, tokens=toks)
    nd = add_disambig(lex)
    words = word_symbols([p.word for p in lex])
    L = lexicon_fst(lex, toks, words, nd, sil_token="k", sil_prob=0.25)
    spell = [L.isymbols.id(t) for t in "k c a t k".split()]
    w = transduce(L, spell)[(words.id("cat"),)]
    assert w == pytest.approx(-2 * math.log(0.25))
    w = transduce(L, [L.isymbols.id(t) for t in "c a t".split()])[(words.id("cat"),)]
    assert w == pytest.approx(-2 * math.log(0.75))


def test_lg_determinizable_only_with_disambig(toks, lm):
    from asrkit.decoders.fst.determinization import NonFunctionalError

    lex = read_lexicon(LEXICON, tokens=toks)
    nd = add_disambig(lex)
    words = word_symbols([p.word for p in lex], extra=lm.vocab)
    G = arpa_to_fst(lm, words)
    lg = determinize(compose(lexicon_fst(lex, toks, words, nd), G), max_states=10000)
    assert lg.is_ideterministic()
    for p in lex:
        p.disambig = 0
    with pytest.raises((NonFunctionalError, ValueError)):
        determinize(compose(lexicon_fst(lex, toks, words, nd), G), max_states=10000)


# -- G -----------------------------------------------------------------------------------------


def arpa_path_cost(G, words, sentence):
    """Cost of the sentence along G taking a backoff arc only where no arc has the word (the
    ARPA semantics), plus the final cost (backing off for </s> too)."""
    backoff = words.id("#0")
    s = G.start
    cost = 0.0
    for w in [*sentence.split(), "</s>"]:
        while True:
            arcs = G.arcs(s)
            if w == "</s>" and np.isfinite(G.final[s]):
                cost += float(G.final[s])
                break
            hit = [a for a in arcs if w != "</s>" and a[0] == words.id(w)]
            if hit:
                cost += hit[0][2]
                s = hit[0][3]
                break
            bo = [a for a in arcs if a[0] == backoff]
            assert bo, (sentence, w)
            cost += bo[0][2]
            s = bo[0][3]
    return cost


SENTENCES = ["a cat at a tab", "go to a cab", "okay a dog", "the the the", "tab cat go",
             "a", "", "to go go to a god", "ate a bat at a cab too"]


def test_g_scores_equal_kenlm(lm):
    kenlm = pytest.importorskip("kenlm")
    ref = kenlm.Model(str(ARPA))
    words = word_symbols(lm.vocab)
    G = arpa_to_fst(lm, words)
    G64 = arpa_to_fst(lm, words, dtype=np.float64)
    G_eps = remove_disambig(G64, ilabels=[words.id("#0")])
    for sent in SENTENCES:
        expected = -LN10 * ref.score(sent, bos=True, eos=True)
        assert arpa_path_cost(G64, words, sent) == pytest.approx(expected, abs=1e-4), sent
        assert arpa_path_cost(G, words, sent) == pytest.approx(expected, abs=1e-3), sent
        # the best path may only be cheaper, and it is the LM score on this well-smoothed model
        ids = [words.id(w) for w in sent.split()]
        best = accept(G_eps, ids)
        assert best <= expected + 1e-4
        assert best == pytest.approx(expected, abs=1e-3), sent


def test_g_structure(lm):
    words = word_symbols(lm.vocab)
    G = arpa_to_fst(lm, words)
    start_bo = [a for a in G.arcs(G.start) if a[0] == words.id("#0")]
    assert len(start_bo) == 1 and start_bo[0][1] == 0  # #0 on input, epsilon on output
    assert start_bo[0][2] == pytest.approx(-LN10 * -0.38021123, abs=1e-5)
    assert not np.any(G.ilabel == words.id("<s>"))
    assert not np.any(G.ilabel == words.id("</s>"))


# -- TLG ---------------------------------------------------------------------------------------


def segmentations(tokens, lexicon):
    """All word sequences whose concatenated spellings equal ``tokens``, with pron costs."""
    prons = [(p.word, list(p.tokens), -math.log(p.prob)) for p in lexicon]
    out = []

    def rec(i, ws, c):
        if i == len(tokens):
            out.append((ws, c))
            return
        for w, t, pc in prons:
            if tokens[i:i + len(t)] == t:
                rec(i + len(t), ws + [w], c + pc)

    rec(0, [], 0.0)
    return out


def brute_force_tlg(graph, frames, lexicon, G):
    G_eps = remove_disambig(G.astype(np.float64), ilabels=[graph.words.id("#0")])
    best = math.inf
    for ws, pc in segmentations(collapse(frames), lexicon):
        best = min(best, pc + accept(G_eps, [graph.words.id(w) for w in ws]))
    return best


def test_tlg_accepts_and_rejects(lm_graph, toks):
    lexicon = read_lexicon(LEXICON, tokens=toks)
    frames_list = [
        "c c a <blk> t", "t o <blk> o", "t o o", "g o d", "g o <blk> o d", "b b b",
        "<blk> a <blk> c a b", "o k", "d o g g o t o", "a t a t", "c a t c a t t",
        "g o <blk> g o <blk> g o", "t o t", "x",
    ]
    for frames in frames_list:
        seq = frames.split()
        if any(t not in toks for t in seq):
            with pytest.raises(KeyError):
                tlg_weight(lm_graph, seq)
            continue
        got = tlg_weight(lm_graph, seq)
        want = brute_force_tlg(lm_graph, seq, lexicon, lm_graph.G)
        if math.isinf(want):
            assert math.isinf(got), frames
        else:
            assert got == pytest.approx(want, abs=2e-3), frames
    assert math.isinf(tlg_weight(lm_graph, "b b b".split()))
    assert math.isfinite(tlg_weight(lm_graph, "t o <blk> o".split()))


def test_tlg_best_path_words(lm_graph):
    toks = lm_graph.tokens
    frames = "<blk> c c a a t <blk> <blk> a t <blk> a <blk>".split()
    lin = linear_fst([toks.graph_label(t) for t in frames], dtype=lm_graph.TLG.dtype)
    best = shortest_path(compose(lin, lm_graph.TLG))
    (_, outs, _), = list(paths(best))
    assert [lm_graph.words.symbol(o) for o in outs] == ["cat", "at", "a"]
    # no disambiguation symbol survives in TLG
    from asrkit.decoders.graph import disambig_ids

    assert not np.isin(lm_graph.TLG.ilabel, disambig_ids(lm_graph.token_symbols)).any()
    assert not np.isin(lm_graph.TLG.olabel, disambig_ids(lm_graph.words)).any()
    assert lm_graph.TLG.ilabel.max() <= toks.num_tokens


def test_word_loop_and_grammar_graphs(toks):
    loop = make_graph(TOKENS, LEXICON, word_loop=True)
    V = 16
    # the CTC example: "a a <blk> a b" spells "a a b", the word "aab"; "a a b" spells "a b"
    frames = "a a <blk> a b".split()
    assert tlg_weight(loop, frames) == pytest.approx(math.log(V), abs=1e-4)
    lin = linear_fst([toks.graph_label(t) for t in frames], dtype=loop.TLG.dtype)
    (_, outs, _), = list(paths(shortest_path(compose(lin, loop.TLG))))
    assert [loop.words.symbol(o) for o in outs] == ["aab"]
    assert math.isinf(tlg_weight(loop, "a a b".split()))
    assert tlg_weight(loop, "c a t".split()) == pytest.approx(math.log(V), abs=1e-4)
    assert tlg_weight(loop, "c a t <blk> t o".split()) == pytest.approx(2 * math.log(V), abs=1e-4)
    gram = make_graph(TOKENS, LEXICON, grammar_path=DATA / "commands.jsgf")
    ok = [("g o t o c a t", math.log(5)), ("g o t o a c a b", -math.log(2 / 5)),
          ("g o t o g o d o k", 0.0), ("g o t o a c o d", math.log(5))]
    for spelled, cost in ok:
        assert tlg_weight(gram, spelled.split()) == pytest.approx(cost, abs=1e-4), spelled
    for spelled in ("g o t o", "c a t", "g o t o c a t c a t"):
        assert math.isinf(tlg_weight(gram, spelled.split())), spelled


def test_jsgf_syntax(toks):
    from asrkit.decoders.graph import GrammarError

    lex = read_lexicon(LEXICON, tokens=toks)
    words = word_symbols([p.word for p in lex])

    def strings(text):
        return {tuple(words.symbol(i) for i in ins): w
                for ins, _, w in paths(grammar_fst(text, words))}

    assert set(strings("go [to] (cat | dog)\ntab")) == {
        ("go", "to", "cat"), ("go", "cat"), ("go", "to", "dog"), ("go", "dog"), ("tab",)}
    assert strings("<x> = /1/ a | /3/ at ;\npublic <y> = go <x> ;") == pytest.approx(
        {("go", "a"): -math.log(0.25), ("go", "at"): -math.log(0.75)})
    plus = grammar_fst("(go)+ ok", words)
    assert math.isfinite(accept(plus, [words.id("go")] * 3 + [words.id("ok")]))
    assert math.isinf(accept(plus, [words.id("ok")]))
    with pytest.raises(GrammarError, match=r"<g>:2: word 'zebra'"):
        grammar_fst("go\ngo zebra", words, name="<g>")
    with pytest.raises(GrammarError, match="recursive"):
        grammar_fst("public <a> = go <a>", words)
    with pytest.raises(GrammarError, match=r"expected '\)'"):
        grammar_fst("go (to", words)


def test_graph_folder_and_openfst_compile(lm_graph, tmp_path):
    pynini = pytest.importorskip("pynini")
    import pywrapfst

    lm_graph.write(tmp_path)
    names = {p.name for p in tmp_path.iterdir()}
    assert {"TLG.npz", "TLG.fst.txt", "tokens.txt", "words.txt", "graph.json",
            "disambig_tokens.int", "disambig_words.int"} <= names
    from asrkit.decoders.fst import Fst, SymbolTable

    tlg = Fst.load(tmp_path / "TLG.npz")
    np.testing.assert_array_equal(tlg.ilabel, lm_graph.TLG.ilabel)
    assert tlg.isymbols == lm_graph.token_symbols
    isyms = pywrapfst.SymbolTable.read_text(str(tmp_path / "tokens.txt"))
    osyms = pywrapfst.SymbolTable.read_text(str(tmp_path / "words.txt"))
    compiler = pywrapfst.Compiler(isymbols=isyms, osymbols=osyms, keep_isymbols=True,
                                  keep_osymbols=True)
    compiler.write((tmp_path / "TLG.fst.txt").read_text())
    ref = pynini.Fst.from_pywrapfst(compiler.compile())
    assert ref.num_states() == tlg.num_states
    frames = "c c a <blk> t".split()
    acc = pynini.accep(" ".join(frames), token_type=isyms)
    d = pynini.shortestdistance(pynini.compose(acc, ref), reverse=True)[0]
    assert float(d) == pytest.approx(tlg_weight(lm_graph, frames), abs=1e-3)
    read_back = SymbolTable.read_text(tmp_path / "words.txt")
    assert read_back == lm_graph.words


def test_cli_graph_build(tmp_path, capsys):
    from asrkit.cli.main import main

    out = tmp_path / "graph"
    rc = main(["graph", "build", "--tokens", str(TOKENS), "--lexicon", str(LEXICON),
               "--lm", str(ARPA), "--out", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "TLG" in text and "states" in text and (out / "TLG.npz").exists()
    bad = tmp_path / "lexicon.txt"
    bad.write_text("cat c a t\ndog d o q\n")
    rc = main(["graph", "build", "--tokens", str(TOKENS), "--lexicon", str(bad),
               "--word-loop", "--out", str(out)])
    assert rc == 2
    assert "lexicon.txt:2" in capsys.readouterr().err


def test_segmentation_helper_is_exhaustive(toks):
    lex = read_lexicon(LEXICON, tokens=toks)
    assert [ws for ws, _ in segmentations(list("atat"), lex)] == [["at", "at"]]
    assert sorted(ws for ws, _ in segmentations(list("okgo"), lex)) == [["ok", "go"],
                                                                         ["okay", "go"]]
