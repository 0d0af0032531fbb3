"""WFST graph building against OpenFst (pynini): L o G, det, min and T o LG on a synthetic
lexicon (random spellings over a-z) and a trigram LM trained by asrkit.lm on a synthetic corpus.

The minimisation case is not like for like: OpenFst minimises a transducer in the Gallic
semiring (it also moves output labels), asrkit the way Kaldi's fstminimizeencoded does.
"""

from __future__ import annotations

import os
import tempfile
import warnings

import numpy as np

from asrkit.bench import Case, median_time

NAME = "fst"
HELP = "L o G / determinize / minimize / T o LG against OpenFst (pynini)"


def add_arguments(parser) -> None:
    """Sizes of the synthetic lexicon and corpus."""
    parser.add_argument("--words", type=int, default=3000, help="lexicon size")
    parser.add_argument("--sentences", type=int, default=30000, help="LM training sentences")
    parser.add_argument("--order", type=int, default=3, help="LM order")


def synthetic_lang(folder: str, words: int, sentences: int, order: int, seed: int = 0):
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
    arpa = os.path.join(folder, "G.arpa")
    lm.write_arpa(arpa)
    return tokens, lexicon, arpa


def run(args) -> list[Case]:
    """Build the synthetic graph parts and time each step here and in OpenFst."""
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
        import pynini
    except ImportError:  # the reference is a dev dependency
        pynini = None
    with tempfile.TemporaryDirectory() as tmp:
        tokens_p, lexicon_p, arpa_p = synthetic_lang(tmp, args.words, args.sentences, args.order)
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
    MLG = minimize(DLG)
    tok_dis, word_dis = disambig_ids(graph_symbols(toks, nd + 1)), disambig_ids(words)
    TLG = compose_tlg(T, MLG, tok_dis, word_dis)
    sizes = {"L": L.num_arcs, "G": G.num_arcs, "LG": LG.num_arcs, "det(LG)": DLG.num_arcs,
             "min(det(LG))": MLG.num_arcs, "TLG": TLG.num_arcs}
    rep = args.repeat
    cases = []

    def ref_time(fn):
        return None if pynini is None else median_time(fn, repeat=rep)

    pL = pG = pLG = pD = pT = pM = None
    if pynini is not None:
        pL, pG = L.to_pynini().arcsort("olabel"), G.to_pynini().arcsort("ilabel")
        pLG = pynini.compose(pL, pG)
        pD = pynini.determinize(pLG, delta=1.0 / 1024)
        pT = T.to_pynini().arcsort("olabel")
        from asrkit.decoders.fst import remove_disambig

        pM = remove_disambig(MLG, tok_dis, word_dis).to_pynini().arcsort("ilabel")
    cases.append(Case("compose L o G", median_time(lambda: compose(L, G), repeat=rep),
                      "OpenFst", ref_time(lambda: pynini.compose(pL, pG)),
                      {"states": LG.num_states, "arcs": LG.num_arcs,
                       "openfst states": None if pLG is None else pLG.num_states()}))
    cases.append(Case("determinize L o G", median_time(lambda: determinize(LG), repeat=rep),
                      "OpenFst", ref_time(lambda: pynini.determinize(pLG, delta=1.0 / 1024)),
                      {"states": DLG.num_states,
                       "openfst states": None if pD is None else pD.num_states()}))
    cases.append(Case("minimize det(L o G)", median_time(lambda: minimize(DLG), repeat=rep),
                      "OpenFst", ref_time(lambda: pynini.minimize(pD.copy())),
                      {"states": MLG.num_states}))
    cases.append(Case("compose T o LG", median_time(
        lambda: compose_tlg(T, MLG, tok_dis, word_dis), repeat=rep), "OpenFst",
        ref_time(lambda: pynini.compose(pT, pM)), {"states": TLG.num_states, "sizes": sizes}))
    return cases
