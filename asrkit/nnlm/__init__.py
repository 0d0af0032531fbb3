"""Neural language models (``asrkit.nnlm``): an LSTM LM trained with the graph engine, for
n-best rescoring and for decoders (the stateful query API of ``asrkit.lm.NgramLM``).

    from asrkit.nnlm import LstmLM, TrainOptions, rescore_nbest
    lm = LstmLM.train(train_lines, valid_lines, embed_dim=128, hidden_dim=256,
                      options=TrainOptions(epochs=10), output="lm.npz")
    lm = LstmLM.load("lm.npz")
    lm.score("the cat sat")                    # log10, like NgramLM.score / kenlm
    ranked = rescore_nbest(nbest, lm, lm_weight=1.0, ngram_lm=None)

Names are imported lazily from the modules that hold them (see ``_EXPORTS``).
"""

from asrkit._lazy import lazy_exports

_EXPORTS = {
    "LstmLM": "asrkit.nnlm.model",
    "LstmState": "asrkit.nnlm.model",
    "LstmLMConfig": "asrkit.nnlm.config",
    "Vocabulary": "asrkit.nnlm.vocab",
    "read_sentences": "asrkit.nnlm.vocab",
    "TextFormatError": "asrkit.nnlm.vocab",
    "TrainOptions": "asrkit.nnlm.training",
    "fit": "asrkit.nnlm.training",
    "bucket_batches": "asrkit.nnlm.training",
    "ModelFileError": "asrkit.nnlm.model",
    "Hypothesis": "asrkit.nnlm.rescore",
    "rescore_nbest": "asrkit.nnlm.rescore",
    "read_nbest": "asrkit.nnlm.rescore",
    "write_nbest": "asrkit.nnlm.rescore",
    "format_nbest": "asrkit.nnlm.rescore",
    "NbestFormatError": "asrkit.nnlm.rescore",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
