"""WFST graph building against OpenFst (pynini): L o G, det, min and T o LG on a synthetic
lexicon (random spellings over a-z) and a trigram LM trained by asrkit.lm on a synthetic corpus
(optionally entropy-pruned, ``--prune``; ``--words 200000 --sentences 400000 --prune 1e-7``
is a LibriSpeech-size lexicon with a pruned trigram).

The machines are built once here and saved; each side is then timed alone in a fresh process
(``asrkit.bench.sides``): median and quartiles of ``--repeat`` runs after a warm-up, and for
determinisation the peak growth of the resident set (both sides) and tracemalloc's peak (numpy
allocations; numba's and OpenFst's own are not traced).

The minimisation case is not like for like: OpenFst minimises a transducer in the Gallic
semiring (it also moves output labels), asrkit the way Kaldi's fstminimizeencoded does.
"""

from __future__ import annotations

import os
import tempfile
import warnings

import numpy as np

from asrkit.bench import Case
from asrkit.bench.sides import measure_step, run_side

NAME = "fst"
HELP = "L o G / determinize / minimize / T o LG against OpenFst (pynini)"


def add_arguments(parser) -> None:
    """Sizes of the synthetic lexicon and corpus."""
    parser.add_argument("--words", type=int, default=3000, help="lexicon size")
    parser.add_argument("--sentences", type=int, default=30000, help="LM training sentences")
    parser.add_argument("--order", type=int, default=3, help="LM order")
    parser.add_argument("--prune", type=float, default=0.0,
                        help="entropy-prune the LM with this threshold (0: no pruning)")
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))


CASES = {"compose": "compose L o G", "determinize": "determinize L o G",
         "minimize": "minimize det(L o G)", "tlg": "compose T o LG"}


def synthetic_lang(folder: str, words: int, sentences: int, order: int, seed: int = 0,
                   prune: float = 0.0):
    """Write tokens.txt, lexicon.txt and an ARPA LM into ``folder``; return their paths."""
    from asrkit.lm import train

    rng = np.random.default_rng(seed)
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    vocab: set[str] = set()
    while len(vocab) < words:
        vocab.add("".join(rng.choice(letters, int(rng.integers(2, 9)))))
    vocab_list = sorted(vocab)
    tokens = os.path.join(folder, "tokens.txt")
    with open(tokens, "w") as f:
        f.write("<blk> 0\n" + "".join(f"{c} {i + 1}\n" for i, c in enumerate(letters)))
    lexicon = os.path.join(folder, "lexicon.txt")
    with open(lexicon, "w") as f:
        f.write("".join(f"{w} {' '.join(w)}\n" for w in vocab_list))
    # Zipfian words, each with 20 preferred successors (a bigram structure for the trigram LM)
    zipf = 1.0 / np.arange(1, words + 1)
    cdf = np.cumsum(zipf / zipf.sum())
    succ = rng.integers(0, words, size=(words, 20))
    lines = []
    for _ in range(sentences):
        n = int(rng.integers(3, 15))
        free = np.minimum(np.searchsorted(cdf, rng.random(n)), words - 1)
        follow = rng.random(n) < 0.6
        pick = rng.integers(0, 20, size=n)
        s = [int(free[0])]
        for k in range(1, n):
            s.append(int(succ[s[-1], pick[k]]) if follow[k] else int(free[k]))
        lines.append(" ".join(vocab_list[i] for i in s))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lm = train(lines, order=order)
    if prune > 0:
        from asrkit.lm import prune_entropy

        lm = prune_entropy(lm, prune)
    arpa = os.path.join(folder, "G.arpa")
    lm.write_arpa(arpa)
    return tokens, lexicon, arpa


def run(args) -> list[Case]:
    """Build the synthetic graph parts, then time each step here and in OpenFst, each side in
    its own process."""
    from asrkit.decoders.fst import compose, determinize, minimize
    from asrkit.decoders.graph import (
        add_disambig,
        arpa_to_fst,
        ctc_topology,
        disambig_ids,
        graph_symbols,
        lexicon_fst,
        read_lexicon,
        read_tokens,
        word_symbols,
    )
    from asrkit.decoders.graph.tlg import compose_tlg
    from asrkit.lm import NgramLM

    try:
        import pynini  # noqa: F401  (the reference is a dev dependency)
        have_ref = True
    except ImportError:
        have_ref = False
    with tempfile.TemporaryDirectory() as tmp:
        tokens_p, lexicon_p, arpa_p = synthetic_lang(tmp, args.words, args.sentences,
                                                     args.order, prune=args.prune)
        toks = read_tokens(tokens_p)
        lex = read_lexicon(lexicon_p, tokens=toks)
        nd = add_disambig(lex)
        lm = NgramLM.from_arpa(arpa_p)
        words = word_symbols([p.word for p in lex], extra=lm.vocab)
        G = arpa_to_fst(lm, words)
        L = lexicon_fst(lex, toks, words, nd)
        T = ctc_topology(toks)
        LG = compose(L, G)
        DLG = determinize(LG)
        # the later steps only when asked for (they are large at LibriSpeech size)
        MLG = minimize(DLG) if {"minimize", "tlg"} & set(args.cases) else DLG
        tok_dis, word_dis = disambig_ids(graph_symbols(toks, nd + 1)), disambig_ids(words)
        TLG = compose_tlg(T, MLG, tok_dis, word_dis) if "tlg" in args.cases else None
        sizes = {"L": L.num_arcs, "G": G.num_arcs, "LG": LG.num_arcs, "det(LG)": DLG.num_arcs,
                 "min(det(LG))": MLG.num_arcs, "TLG": TLG.num_arcs if TLG else None,
                 "lm": " ".join(map(str, lm.counts))}
        for name, f in (("L", L), ("G", G), ("LG", LG), ("DLG", DLG), ("MLG", MLG), ("T", T)):
            f.save(os.path.join(tmp, f"{name}.fst"))
        np.savez(os.path.join(tmp, "disambig.npz"), tok=np.asarray(list(tok_dis), np.int64),
                 word=np.asarray(list(word_dis), np.int64))
        p = {"folder": tmp, "cases": args.cases}
        ours = run_side(__name__, "asrkit", p, args.repeat)
        theirs = run_side(__name__, "openfst", p, args.repeat) if have_ref else {}
    states = {"compose": LG.num_states, "determinize": DLG.num_states,
              "minimize": MLG.num_states, "tlg": TLG.num_states if TLG else None}
    cases = []
    for key in args.cases:
        t, tt = ours[key], theirs.get(key)
        extra: dict = {"states": states[key]}
        if tt is not None:
            extra["openfst states"] = tt["states"]
        for side, m in (("asrkit", t), ("openfst", tt)):
            if m is not None and "peak_bytes" in m:
                extra[f"{side} peak RSS growth MB"] = round(m["peak_bytes"] / 1e6, 1)
            if m is not None and "traced_bytes" in m:
                extra[f"{side} tracemalloc peak MB"] = round(m["traced_bytes"] / 1e6, 1)
        if key == args.cases[-1]:
            extra["sizes"] = sizes
        ref_s = ref_q = None
        if tt is not None:
            ref_s, ref_q = tt["timing"]["median"], (tt["timing"]["q1"], tt["timing"]["q3"])
        cases.append(Case(CASES[key], t["timing"]["median"], "OpenFst", ref_s, extra,
                          asrkit_spread=(t["timing"]["q1"], t["timing"]["q3"]),
                          reference_spread=ref_q))
    return cases


def _load(folder: str):
    from asrkit.decoders.fst import Fst

    fsts = {n: Fst.load(os.path.join(folder, f"{n}.fst"))
            for n in ("L", "G", "LG", "DLG", "MLG", "T")}
    dis = np.load(os.path.join(folder, "disambig.npz"))
    return fsts, dis["tok"].tolist(), dis["word"].tolist()


def _asrkit_steps(f, tok_dis, word_dis):
    from asrkit.decoders.fst import compose, determinize, minimize
    from asrkit.decoders.graph.tlg import compose_tlg

    steps = {"compose": lambda: compose(f["L"], f["G"]),
             "determinize": lambda: determinize(f["LG"]),
             "minimize": lambda: minimize(f["DLG"]),
             "tlg": lambda: compose_tlg(f["T"], f["MLG"], tok_dis, word_dis)}
    return steps, lambda r: r.num_states


def _openfst_steps(f, tok_dis, word_dis):
    import pynini

    from asrkit.decoders.fst import remove_disambig

    pL, pG = f["L"].to_pynini().arcsort("olabel"), f["G"].to_pynini().arcsort("ilabel")
    pLG, pT = f["LG"].to_pynini(), f["T"].to_pynini().arcsort("olabel")
    made: dict = {}

    def det_lg():  # made on first use: large at LibriSpeech size
        if "D" not in made:
            made["D"] = pynini.determinize(pLG, delta=1.0 / 1024)
        return made["D"]

    def min_lg():
        if "M" not in made:
            made["M"] = remove_disambig(f["MLG"], tok_dis, word_dis).to_pynini().arcsort(
                "ilabel")
        return made["M"]

    steps = {"compose": lambda: pynini.compose(pL, pG),
             "determinize": lambda: pynini.determinize(pLG, delta=1.0 / 1024),
             "minimize": lambda: pynini.minimize(det_lg().copy()),
             "tlg": lambda: pynini.compose(pT, min_lg())}
    return steps, lambda r: r.num_states()


def measure_side(side: str, p: dict, repeat: int = 5) -> dict:
    """In a fresh process (``run_side``): each case's timing (median, quartiles), its result's
    state count and, for determinisation, its peak memory."""
    f, tok_dis, word_dis = _load(p["folder"])
    steps, n_states = (_asrkit_steps if side == "asrkit" else _openfst_steps)(f, tok_dis,
                                                                              word_dis)
    out = {}
    for key in p["cases"]:
        m = measure_step(steps[key], repeat=repeat, memory=key == "determinize",
                         trace_numpy=key == "determinize")
        m["states"] = n_states(steps[key]())
        out[key] = m
    return out
