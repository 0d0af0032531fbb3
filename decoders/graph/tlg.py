"""The decoding graph TLG = T o min(det(L o G)) for CTC models, and its folder on disk.

Steps (Kaldi's mkgraph.sh for LG, EESEN/icefall for T):
  1. LG = L o G with disambiguation symbols (L has #k on pronunciations and a #0:#0 loop that
     carries G's #0 backoff arcs), trimmed;
  2. det(LG) in the tropical semiring (the disambiguation symbols make L o G functional and
     determinisable); then minimisation, which first pushes weights towards the start;
  3. the disambiguation symbols are replaced by epsilon (on both sides);
  4. TLG = T o LG, trimmed and arc-sorted by input label for the decoder.
The epsilon arcs left by step 3 (mostly G's backoff arcs) stay: a Kaldi-style decoder follows
them without consuming a frame, and removing them would copy every backoff state's arcs.

A graph folder holds ``TLG.npz`` (asrkit binary), ``TLG.fst.txt`` (OpenFst text with symbols:
``fstcompile --isymbols=tokens.txt --osymbols=words.txt TLG.fst.txt TLG.fst``), ``tokens.txt``
(graph input symbols: network index + 1), ``words.txt``, ``disambig_tokens.int`` /
``disambig_words.int`` (Kaldi's disambig.int, the ids removed in step 3), ``L_disambig.npz``,
``G.npz``, ``LG.npz``, ``graph.json`` (sizes, options, ``ilabel_offset``, blank) and the lexicon
the graph was built from (``lexicon.txt``, or ``lexiconp.txt`` when it has probabilities), so the
folder is complete: ``graph.json``'s ``lexicon`` names that copy, ``lexicon_source`` the original.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time

from asrkit.decoders.fst import (
    Fst,
    SymbolTable,
    arcsort,
    compose,
    determinize,
    minimize,
    remove_disambig,
)
from asrkit.decoders.graph.tokens import ILABEL_OFFSET, TokenTable, ctc_topology


def disambig_ids(table: SymbolTable) -> list[int]:
    """ids of the symbols ``#0``, ``#1``, ... in ``table``."""
    return [i for i, s in table if s.startswith("#") and s[1:].isdigit()]


def compose_lg(L: Fst, G: Fst, max_states: int | None = None) -> Fst:
    """min(det(L o G)): L and G with disambiguation symbols; returns LG with them still in."""
    lg = compose(L, G)
    if lg.start < 0:
        raise ValueError("L o G is empty: no grammar word has a pronunciation in the lexicon")
    lg = determinize(lg, max_states=max_states)
    return minimize(lg)


def compose_tlg(T: Fst, LG: Fst, token_disambig=(), word_disambig=()) -> Fst:
    """T o LG after replacing the disambiguation ids by epsilon; trimmed and arc-sorted."""
    lg = remove_disambig(LG, ilabels=token_disambig, olabels=word_disambig)
    return arcsort(compose(T, lg), "ilabel")  # compose trims


@dataclasses.dataclass
class Graph:
    """A built graph and its parts (L, G and LG keep their disambiguation symbols)."""

    TLG: Fst
    LG: Fst
    L: Fst
    G: Fst
    T: Fst
    tokens: TokenTable
    token_symbols: SymbolTable
    words: SymbolTable
    timings: dict = dataclasses.field(default_factory=dict)
    info: dict = dataclasses.field(default_factory=dict)
    lexicon: list = dataclasses.field(default_factory=list)  # Pronunciations L was built from

    def sizes(self) -> dict:
        """{name: {"states": S, "arcs": A}} for T, L, G, LG and TLG."""
        return {name: {"states": f.num_states, "arcs": f.num_arcs}
                for name, f in (("T", self.T), ("L", self.L), ("G", self.G), ("LG", self.LG),
                                ("TLG", self.TLG))}

    def write(self, folder: str | os.PathLike, text: bool = True) -> None:
        """Write the graph folder (see the module docstring), each file atomically;
        ``text=False`` skips TLG.fst.txt."""
        from asrkit.decoders.fst import write_fst_text
        from asrkit.utils import atomic_write_text

        os.makedirs(folder, exist_ok=True)

        def path(name):
            return os.path.join(folder, name)

        graph_in = self.token_symbols
        tlg = self.TLG.replace(isymbols=graph_in, osymbols=self.words)
        tlg.save(path("TLG.npz"))
        if text:
            write_fst_text(tlg, path("TLG.fst.txt"))
        self.LG.save(path("LG.npz"))
        self.L.save(path("L_disambig.npz"))
        self.G.save(path("G.npz"))
        graph_in.write_text(path("tokens.txt"))
        self.words.write_text(path("words.txt"))
        atomic_write_text(path("disambig_tokens.int"),
                          "".join(f"{i}\n" for i in disambig_ids(graph_in)))
        atomic_write_text(path("disambig_words.int"),
                          "".join(f"{i}\n" for i in disambig_ids(self.words)))
        info = dict(self.info)
        if self.lexicon:
            probs = any(p.prob != 1.0 for p in self.lexicon)
            name = "lexiconp.txt" if probs else "lexicon.txt"
            atomic_write_text(path(name), "".join(
                " ".join([p.word] + ([repr(p.prob)] if probs else []) + list(p.tokens)) + "\n"
                for p in self.lexicon))
            info["lexicon_source"], info["lexicon"] = info.get("lexicon"), name
        info = dict(info, sizes=self.sizes(), timings_s=self.timings,
                    ilabel_offset=ILABEL_OFFSET, blank=self.tokens.symbols[self.tokens.blank],
                    blank_ilabel=self.tokens.blank + ILABEL_OFFSET,
                    num_tokens=self.tokens.num_tokens, semiring=self.TLG.semiring,
                    cost="natural log (-ln p); ARPA log10 p -> -ln(10) * p")
        atomic_write_text(path("graph.json"), json.dumps(info, indent=2) + "\n")


def build_graph(tokens: TokenTable, L: Fst, G: Fst, words: SymbolTable,
                token_symbols: SymbolTable, info: dict | None = None,
                max_states: int | None = None) -> Graph:
    """Run the pipeline of the module docstring on ready L (with disambiguation) and G; returns
    the Graph with per-step timings in seconds."""
    timings = {}
    t0 = time.perf_counter()
    T = ctc_topology(tokens)
    timings["T"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    LG = compose_lg(L, G, max_states=max_states)
    timings["LG"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    TLG = compose_tlg(T, LG, disambig_ids(token_symbols), disambig_ids(words))
    timings["TLG"] = time.perf_counter() - t0
    LG = LG.replace(isymbols=token_symbols, osymbols=words)
    TLG = TLG.replace(isymbols=token_symbols, osymbols=words)
    return Graph(TLG, LG, L, G, T, tokens, token_symbols, words, timings, dict(info or {}))


def make_graph(tokens_path, lexicon_path, lm=None, word_loop=None, grammar_path=None,
               blank: str | None = None, sil_token: str | None = None, sil_prob: float = 0.5,
               with_probs: bool | None = None, max_states: int | None = None) -> Graph:
    """Everything from files: tokens.txt, a lexicon, and one grammar source: ``lm`` (an
    NgramLM, or a path to an ARPA/binary LM), ``word_loop`` (True for a uniform loop over the
    lexicon words, a {word: weight} mapping, or the path of a 'word weight' file) or
    ``grammar_path`` (JSGF-like file). Bad input raises ValueError naming the file and line
    (OSError for unreadable files)."""
    from asrkit.decoders.graph.grammar import arpa_to_fst, read_word_weights, word_loop_fst
    from asrkit.decoders.graph.jsgf import read_grammar
    from asrkit.decoders.graph.lexicon import add_disambig, lexicon_fst, read_lexicon, word_symbols
    from asrkit.decoders.graph.tokens import graph_symbols, read_tokens

    sources = [x is not None and x is not False for x in (lm, word_loop, grammar_path)]
    if sum(sources) != 1:
        raise ValueError("give exactly one of lm, word_loop, grammar_path")
    if max_states is not None and max_states < 1:
        raise ValueError(f"max_states must be at least 1, got {max_states}")
    if sil_token is not None and not 0.0 < sil_prob < 1.0:  # also refuses NaN
        raise ValueError(f"sil_prob must be in (0, 1), got {sil_prob}")
    timings = {}
    t0 = time.perf_counter()
    toks = read_tokens(tokens_path, blank=blank)
    lexicon = read_lexicon(lexicon_path, with_probs=with_probs, tokens=toks)
    ndis = add_disambig(lexicon)
    lex_words = [p.word for p in lexicon]
    info = {"tokens": os.fspath(tokens_path), "lexicon": os.fspath(lexicon_path),
            "num_words": len(set(lex_words)), "num_pronunciations": len(lexicon),
            "num_disambig": ndis + 1, "sil_token": sil_token}
    if lm is not None:
        if isinstance(lm, (str, os.PathLike)):
            from asrkit.lm import NgramLM

            info["lm"] = os.fspath(lm)
            lm = NgramLM.load(lm)
        words = word_symbols(lex_words, extra=lm.vocab)
        info["lm_order"] = int(lm.order)
        info["lm_words_without_pronunciation"] = sorted(
            set(lm.vocab) - set(lex_words) - {"<s>", "</s>"})[:20]
        timings["read"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        G = arpa_to_fst(lm, words)
        info["grammar"] = "lm"
    elif grammar_path is not None:
        words = word_symbols(lex_words)
        timings["read"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        G = read_grammar(grammar_path, words)
        info["grammar"] = os.fspath(grammar_path)
    else:
        words = word_symbols(lex_words)
        timings["read"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        if isinstance(word_loop, (str, os.PathLike)):
            info["word_loop_weights"] = os.fspath(word_loop)
            word_loop = read_word_weights(word_loop, known=lex_words)
        vocab = sorted(set(lex_words)) if word_loop is True else word_loop
        G = word_loop_fst(words, vocab)
        info["grammar"] = "word-loop"
    timings["G"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    token_symbols = graph_symbols(toks, ndis + 1)
    L = lexicon_fst(lexicon, toks, words, ndis, sil_token=sil_token, sil_prob=sil_prob)
    timings["L"] = time.perf_counter() - t0
    graph = build_graph(toks, L, G, words, token_symbols, info, max_states=max_states)
    graph.timings = {**timings, **graph.timings}
    graph.lexicon = lexicon
    return graph


def tlg_weight(graph: Graph, token_sequence: list[str]) -> float:
    """Best (tropical) cost with which TLG accepts a frame-level token sequence (symbols of
    tokens.txt, blanks included); +inf when it is rejected."""
    from asrkit.decoders.fst import accept

    labels = [graph.tokens.graph_label(t) for t in token_sequence]
    return accept(graph.TLG, labels)
