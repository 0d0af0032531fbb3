"""N-gram language models (``asrkit.lm``): counting, smoothing, ARPA and binary files, pruning,
perplexity, and a stateful query API for decoders.

    from asrkit.lm import NgramLM, train
    lm = train(open("text.txt"), order=3)           # interpolated modified Kneser-Ney
    lm.write_arpa("lm.arpa")
    lm = NgramLM.load("lm.arpa")                     # ARPA (plain/gzip) or asrkit binary
    lm.score("the cat sat")                          # log10, like kenlm.Model.score

Names are imported lazily from the modules that hold them (see ``_EXPORTS``).
"""

from asrkit._lazy import lazy_exports

_EXPORTS = {
    "NgramLM": "asrkit.lm.model",
    "read_arpa": "asrkit.lm.arpa",
    "write_arpa": "asrkit.lm.arpa",
    "ArpaFormatError": "asrkit.lm.arpa",
    "save_binary": "asrkit.lm.binary",
    "load_binary": "asrkit.lm.binary",
    "count_ngrams": "asrkit.lm.counts",
    "NgramCounts": "asrkit.lm.counts",
    "estimate": "asrkit.lm.smoothing",
    "train": "asrkit.lm.smoothing",
    "DISCOUNTS": "asrkit.lm.smoothing",
    "prune_entropy": "asrkit.lm.prune",
    "evaluate": "asrkit.lm.perplexity",
    "PerplexityStats": "asrkit.lm.perplexity",
    "UNK": "asrkit.lm.vocab",
    "BOS": "asrkit.lm.vocab",
    "EOS": "asrkit.lm.vocab",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
