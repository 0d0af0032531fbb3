"""Transcription with a transducer model folder: the search options and the search itself.

A model folder whose ``model.mdl`` is a transducer (``asrkit.models.TransducerModel``) needs no
decoding graph: the Recognizer runs the encoder over each chunk and searches its output with
``asrkit.decoders.transducer``. The options (``Recognizer.from_dir(path, **options)``,
``asrkit transcribe``):

    method = "beam"     # "beam" (icefall's modified beam search) or "greedy"
    beam = 4            # hypotheses kept per frame
    max_symbols = 3     # greedy: labels per frame at most
    nbest = 4           # beam: n-best size for the word confidences
    lm = None           # an ARPA (or asrkit binary) n-gram LM for shallow fusion
    lm_weight = 0.3     # its weight (on natural-log probabilities)
    word_bonus = 0.0    # nats per word
"""

from __future__ import annotations

import dataclasses

import numpy as np

from asrkit.recognizer.options import MAX_NBEST, RecognizerError, merged_options

METHODS = ("beam", "greedy")


@dataclasses.dataclass
class TransducerOptions:
    """The checked search options of a transducer folder (see the module docstring)."""

    method: str = "beam"
    beam: int = 4
    max_symbols: int = 3
    nbest: int = 4
    lm: str | None = None
    lm_weight: float = 0.3
    word_bonus: float = 0.0


def transducer_options(given: dict, defaults: dict | None = None,
                       defaults_where: str = "") -> TransducerOptions:
    """``TransducerOptions`` from ``given`` (None values ignored) over ``defaults`` (the model
    folder's ``decode`` table); RecognizerError naming the option (and the file) at fault."""
    from asrkit.decoders.options import count, finite

    known = [f.name for f in dataclasses.fields(TransducerOptions)]

    def check(name, value):
        if name == "method" and value not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, got {value!r}")
        if name in ("beam", "max_symbols", "nbest"):
            if isinstance(value, float) and value.is_integer():
                value = int(value)  # asrkit transcribe --beam reads a float
            value = count(name, value)
        if name in ("lm_weight", "word_bonus"):
            value = finite(name, value)
        if name == "lm" and not isinstance(value, str):
            raise ValueError(f"lm must be a file name, got {value!r}")
        return value

    values = merged_options(given, defaults, defaults_where, known, check,
                            "search option for a transducer model")
    opts = TransducerOptions(**values)
    if opts.nbest > MAX_NBEST:
        raise RecognizerError(f"nbest must be at most {MAX_NBEST}, got {opts.nbest}")
    return opts


class TransducerSearch:
    """The search of a transducer model folder: ``decode(enc [T', H], start)`` -> words with
    times (seconds from ``start``) and n-best confidences. ``hotwords``: ``Hotword`` list
    (``asrkit.recognizer.hotwords.load_hotwords``) biasing the beam search through a context
    graph over the model's tokens (each word spelled as the model spells it)."""

    def __init__(self, folder, options: TransducerOptions, hotwords=()):
        model = folder.model
        self.model, self.options = model, options
        self.frame_shift = folder.frame_shift
        # asrkit's prediction network and joiner, or an export's (asrkit.export.OnnxTransducer)
        self.predictor, self.weight, self.bias, self.joiner = model.search_parts()
        # the reader's "piece" (SentencePiece) is the decoders' "bpe"
        unit = model.reader.get("unit", "word")
        self.unit = "bpe" if unit == "piece" else unit
        from asrkit.io.tokens import SEPARATORS

        self.delimiter = next((s for s in SEPARATORS if s in model.tokens), "|")
        self.context = self.make_context(hotwords)
        self.lm = None
        if options.lm:
            from asrkit.lm import NgramLM

            try:
                self.lm = NgramLM.load(options.lm)
            except (OSError, ValueError) as e:
                raise RecognizerError(f"{options.lm}: cannot load the LM: {e}") from None

    def make_context(self, hotwords):
        """The hotword ``ContextGraph`` over the model's tokens of ``hotwords`` (``Hotword``
        list; each word spelled as the model spells it), or None without hotwords.
        RecognizerError for greedy search or a word the tokens cannot spell."""
        if not hotwords:
            return None
        from asrkit.decoders.context_graph import ContextGraph, token_phrases

        if self.options.method != "beam":
            raise RecognizerError("hotwords need method = 'beam' (the modified beam search "
                                  f"carries them), not {self.options.method!r}")
        try:
            return ContextGraph(token_phrases(list(hotwords), self.model.tokens, self.unit,
                                              self.delimiter))
        except ValueError as e:
            raise RecognizerError(str(e)) from None

    def new_search(self, context=None, start=None):
        """A fresh resumable search of the options (``asrkit.decoders.transducer``'s
        ``TransducerGreedySearch`` or ``TransducerBeamSearch``, with the LM and ``context``,
        a hotword ``ContextGraph`` from ``make_context``; ``start``: the prediction network's
        ``(state, out)`` to begin from, an earlier search's ``predictor_state()``):
        ``advance(enc [n, H])``, ``best()``, ``finish(nbest)``."""
        from asrkit.decoders.transducer import TransducerBeamSearch, TransducerGreedySearch

        o, m = self.options, self.model
        if o.method == "greedy":
            return TransducerGreedySearch(self.predictor, self.weight, self.bias, m.blank,
                                          o.max_symbols, m.tokens, self.unit, self.delimiter,
                                          start=start, joiner=self.joiner)
        return TransducerBeamSearch(self.predictor, self.weight, self.bias, m.blank, o.beam,
                                    m.tokens, self.unit, self.delimiter, lm=self.lm,
                                    lm_weight=o.lm_weight, word_bonus=o.word_bonus,
                                    context=context, start=start, joiner=self.joiner)

    def nbest(self, enc: np.ndarray):
        """The search's hypotheses (``asrkit.decoders.transducer.TransducerHypothesis``), best
        first, over one chunk's encoder output ``enc`` float32 ``[T', H]``."""
        search = self.new_search(self.context)
        search.advance(enc)
        return search.finish(self.options.nbest)

    def decode(self, enc: np.ndarray, start: float = 0.0):
        """``WordTiming`` list of the best hypothesis over ``enc`` ``[T', H]``."""
        from asrkit.decoders.transducer import hypothesis_timings

        return hypothesis_timings(self.nbest(enc), self.frame_shift, start)

    def align(self, enc: np.ndarray, words: list[str]):
        """Forced alignment of ``words`` to one utterance's encoder output ``enc`` float32
        ``[T', H]`` (``asrkit.kernels.transducer.force_align``, each word spelled as the model
        spells it): ``(AlignedWord list, mean log-probability per frame of the path)``. A word
        starts at the frame of its first token and lasts to the end of its last token's frame.
        RecognizerError for a word the tokens cannot spell or a transcript that cannot fit."""
        from asrkit.decoders.context_graph import Hotword, token_phrases
        from asrkit.decoders.transducer import words_of
        from asrkit.kernels.transducer import force_align
        from asrkit.recognizer.result import AlignedWord

        m = self.model
        if self.weight is None:
            raise RecognizerError("forced alignment needs asrkit's own joiner, not an exported "
                                  "one")
        try:
            (phrase,) = token_phrases([Hotword(list(words), 0.0)], m.tokens, self.unit,
                                      self.delimiter)
        except ValueError as e:
            raise RecognizerError(str(e).replace("hotwords: ", "")) from None
        targets = [label - 1 for label, _ in phrase]
        frames, logp = force_align(enc, self.predictor, self.weight, self.bias, targets,
                                   m.blank)
        if not np.isfinite(logp):
            raise RecognizerError(f"the transcript ({len(targets)} tokens) does not fit the "
                                  f"audio ({enc.shape[0]} frames)")
        spelled, spans = words_of(targets, frames, m.tokens, self.unit, self.delimiter)
        if spelled != list(words):
            raise RecognizerError(f"the transcript spells {spelled} with the model's tokens, not "
                                  f"{list(words)}")
        fs = self.frame_shift
        return ([AlignedWord(w, first * fs, (last - first + 1) * fs)
                 for w, (first, last) in zip(words, spans)], logp / enc.shape[0])
