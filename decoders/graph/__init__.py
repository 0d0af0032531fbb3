"""Decoding-graph building (``asrkit.decoders.graph``): the CTC token transducer T, the lexicon
transducer L with disambiguation symbols, grammars G (ARPA LM, word loop, JSGF-like command
grammars) and TLG = T o min(det(L o G)).

>>> from asrkit.decoders.graph import make_graph
>>> graph = make_graph("tokens.txt", "lexicon.txt", lm="G.arpa")
>>> graph.write("exp/graph")

Costs are natural-log (-ln p, as Kaldi); graph input label = network output index + 1.
"""

from asrkit._lazy import lazy_exports

_EXPORTS = {
    "ILABEL_OFFSET": "asrkit.decoders.graph.tokens",
    "TokenTable": "asrkit.decoders.graph.tokens",
    "read_tokens": "asrkit.decoders.graph.tokens",
    "graph_symbols": "asrkit.decoders.graph.tokens",
    "ctc_topology": "asrkit.decoders.graph.tokens",
    "Pronunciation": "asrkit.decoders.graph.lexicon",
    "read_lexicon": "asrkit.decoders.graph.lexicon",
    "add_disambig": "asrkit.decoders.graph.lexicon",
    "word_symbols": "asrkit.decoders.graph.lexicon",
    "lexicon_fst": "asrkit.decoders.graph.lexicon",
    "LN10": "asrkit.decoders.graph.grammar",
    "arpa_to_fst": "asrkit.decoders.graph.grammar",
    "word_loop_fst": "asrkit.decoders.graph.grammar",
    "read_word_weights": "asrkit.decoders.graph.grammar",
    "GrammarError": "asrkit.decoders.graph.jsgf",
    "grammar_fst": "asrkit.decoders.graph.jsgf",
    "read_grammar": "asrkit.decoders.graph.jsgf",
    "Graph": "asrkit.decoders.graph.tlg",
    "build_graph": "asrkit.decoders.graph.tlg",
    "compose_lg": "asrkit.decoders.graph.tlg",
    "compose_tlg": "asrkit.decoders.graph.tlg",
    "disambig_ids": "asrkit.decoders.graph.tlg",
    "make_graph": "asrkit.decoders.graph.tlg",
    "tlg_weight": "asrkit.decoders.graph.tlg",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
