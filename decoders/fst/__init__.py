"""WFST library (``asrkit.decoders.fst``): arrays-of-arcs machines, OpenFst text format and the
algorithms of speech graph building, with OpenFst's semantics.

>>> from asrkit.decoders.fst import Fst, compose, determinize, minimize, shortest_path
>>> lg = minimize(determinize(compose(L, G)))

Weights are -log probabilities in the tropical (min, +) or log (log-add, +) semiring; label 0 is
epsilon. Names are imported lazily from the modules that hold them (see ``_EXPORTS``).
"""

from asrkit._lazy import lazy_exports

_EXPORTS = {
    "Fst": "asrkit.decoders.fst.fst",
    "FstBuilder": "asrkit.decoders.fst.fst",
    "SymbolTable": "asrkit.decoders.fst.symbols",
    "EPSILON": "asrkit.decoders.fst.symbols",
    "TROPICAL": "asrkit.decoders.fst.semiring",
    "LOG": "asrkit.decoders.fst.semiring",
    "fst_from_text": "asrkit.decoders.fst.text_format",
    "fst_to_text": "asrkit.decoders.fst.text_format",
    "read_fst_text": "asrkit.decoders.fst.text_format",
    "write_fst_text": "asrkit.decoders.fst.text_format",
    "save_fst": "asrkit.decoders.fst.binary",
    "load_fst": "asrkit.decoders.fst.binary",
    "to_pynini": "asrkit.decoders.fst.pynini_bridge",
    "from_pynini": "asrkit.decoders.fst.pynini_bridge",
    "arcsort": "asrkit.decoders.fst.structure",
    "is_arcsorted": "asrkit.decoders.fst.structure",
    "project": "asrkit.decoders.fst.structure",
    "invert": "asrkit.decoders.fst.structure",
    "relabel": "asrkit.decoders.fst.structure",
    "remove_disambig": "asrkit.decoders.fst.structure",
    "accessible": "asrkit.decoders.fst.structure",
    "coaccessible": "asrkit.decoders.fst.structure",
    "connect": "asrkit.decoders.fst.structure",
    "keep_states": "asrkit.decoders.fst.structure",
    "permute_states": "asrkit.decoders.fst.structure",
    "topological_order": "asrkit.decoders.fst.structure",
    "is_acyclic": "asrkit.decoders.fst.structure",
    "topsort": "asrkit.decoders.fst.structure",
    "reverse": "asrkit.decoders.fst.structure",
    "union": "asrkit.decoders.fst.structure",
    "concat": "asrkit.decoders.fst.structure",
    "closure": "asrkit.decoders.fst.structure",
    "shortest_distance": "asrkit.decoders.fst.shortest",
    "total_weight": "asrkit.decoders.fst.shortest",
    "shortest_path": "asrkit.decoders.fst.shortest",
    "nbest_paths": "asrkit.decoders.fst.shortest",
    "paths": "asrkit.decoders.fst.shortest",
    "string_weights": "asrkit.decoders.fst.shortest",
    "push": "asrkit.decoders.fst.pushing",
    "reweight": "asrkit.decoders.fst.pushing",
    "compose": "asrkit.decoders.fst.composition",
    "determinize": "asrkit.decoders.fst.determinization",
    "minimize": "asrkit.decoders.fst.minimization",
    "rmepsilon": "asrkit.decoders.fst.epsilon",
    "linear_fst": "asrkit.decoders.fst.strings",
    "accept": "asrkit.decoders.fst.strings",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
