"""Incremental decoding: a search fed scores chunk by chunk, partial results and endpoints.

``OnlineGraphDecoder`` runs the TLG Viterbi search (``ViterbiSearch``), ``OnlineCtcDecoder``
the CTC prefix search (``CtcPrefixSearch``) and ``OnlineTransducerDecoder`` a transducer's
greedy or modified beam search (``asrkit.decoders.transducer``, on encoder frames) over one
*segment* (an utterance within a stream):
``accept(log_probs)`` advances it, ``partial()`` is the best path so far (no final weights, no
n-best), ``endpoint(config)`` says whether the segment has ended, ``final()`` is the segment's
result (as the offline search on the same scores: fed whole, they are equal), and ``reset()``
starts the next segment.

Endpointing follows Kaldi's online2 (``OnlineEndpointConfig``): a rule fires when the segment
has ``min_utterance_length`` seconds, ``min_trailing_silence`` seconds of trailing silence on the
best path, the best path's final relative cost is at most ``max_relative_cost``, and, with
``must_contain_nonsilence``, something other than silence. Silence is the CTC blank: trailing
frames of the best path consumed by blank. The five default rules are Kaldi's: 5 s of silence
with nothing said (rule 1); after speech, 0.5 s of silence when the graph is happy to end
(relative cost <= 2, rule 2), 1 s when it is fairly happy (<= 8, rule 3), 2 s in any case
(rule 4); and 20 s of anything (rule 5). A transducer has no graph and so no final cost: its
silence is the trailing frames since the best hypothesis last emitted a label (frames where the
search took the blank), and the relative cost is taken as 0, so rules 1, 2 (0.5 s of silence
after speech) and 5 decide, as for the CTC prefix search.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from asrkit.decoders.options import finite


@dataclasses.dataclass
class EndpointRule:
    """One of Kaldi's endpoint rules (``OnlineEndpointRule``), times in seconds."""

    must_contain_nonsilence: bool = True
    min_trailing_silence: float = 1.0
    max_relative_cost: float = math.inf
    min_utterance_length: float = 0.0

    def __post_init__(self):
        self.must_contain_nonsilence = bool(self.must_contain_nonsilence)
        self.min_trailing_silence = finite("min_trailing_silence", self.min_trailing_silence,
                                           0.0)
        self.max_relative_cost = finite("max_relative_cost", self.max_relative_cost, 0.0,
                                        allow_inf=True)
        self.min_utterance_length = finite("min_utterance_length", self.min_utterance_length,
                                           0.0)

    def fires(self, utterance_length: float, trailing_silence: float,
              relative_cost: float) -> bool:
        """Kaldi's ``RuleActivated``."""
        contains_nonsilence = utterance_length > trailing_silence
        return ((contains_nonsilence or not self.must_contain_nonsilence)
                and trailing_silence >= self.min_trailing_silence
                and relative_cost <= self.max_relative_cost
                and utterance_length >= self.min_utterance_length)


def _kaldi_rules() -> dict[str, EndpointRule]:
    return {"rule1": EndpointRule(False, 5.0, math.inf, 0.0),
            "rule2": EndpointRule(True, 0.5, 2.0, 0.0),
            "rule3": EndpointRule(True, 1.0, 8.0, 0.0),
            "rule4": EndpointRule(True, 2.0, math.inf, 0.0),
            "rule5": EndpointRule(False, 0.0, math.inf, 20.0)}


@dataclasses.dataclass
class EndpointConfig:
    """Kaldi's ``OnlineEndpointConfig``: rules by name (``rule1`` .. ``rule5`` by default; any
    may be changed, removed or added). ``from_options`` builds one from nested dicts."""

    rules: dict[str, EndpointRule] = dataclasses.field(default_factory=_kaldi_rules)

    @classmethod
    def from_options(cls, options) -> EndpointConfig | None:
        """``options``: None or True (Kaldi's defaults), False (no endpointing), an
        EndpointConfig, or ``{rule name: {field: value} | None}`` changing the defaults (None
        drops a rule; a new name adds one). ValueError naming the rule and field."""
        if options is None or options is True:
            return cls()
        if options is False:
            return None
        if isinstance(options, cls):
            return options
        if not isinstance(options, dict):
            raise ValueError(f"endpoint: expected true, false or a table of rules, got "
                             f"{options!r}")
        rules = _kaldi_rules()
        for name, fields in options.items():
            if fields is None or fields is False:
                rules.pop(name, None)
                continue
            if not isinstance(fields, dict):
                raise ValueError(f"endpoint.{name}: expected a table of rule fields, got "
                                 f"{fields!r}")
            base = dataclasses.asdict(rules.get(name, EndpointRule()))
            unknown = set(fields) - set(base)
            if unknown:
                raise ValueError(f"endpoint.{name}.{sorted(unknown)[0]}: unknown field (known: "
                                 f"{', '.join(base)})")
            try:
                rules[name] = EndpointRule(**{**base, **fields})
            except ValueError as e:
                raise ValueError(f"endpoint.{name}.{e}") from None
        return cls(rules)

    def detected(self, utterance_length: float, trailing_silence: float,
                 relative_cost: float) -> str | None:
        """The name of the first rule that fires, or None."""
        for name, rule in self.rules.items():
            if rule.fires(utterance_length, trailing_silence, relative_cost):
                return name
        return None


class OnlineGraphDecoder:
    """The TLG search of a stream, one segment at a time (module docstring).

    graph: a ``DecodingGraph``; opts: ``DecodeOptions`` (``frame_shift`` gives seconds);
    blank: the model's blank token id (silence for endpointing); context: hotwords, a
    ``ContextGraph`` over the graph's word ids.
    """

    def __init__(self, graph, opts, blank: int = 0, context=None):
        self.graph, self.opts, self.context = graph, opts, context
        self.blank_ilabel = int(blank) + graph.ilabel_offset
        self.reset()

    def reset(self) -> None:
        """Start a new segment."""
        from asrkit.decoders.viterbi import ViterbiSearch

        o = self.opts
        self.search = ViterbiSearch(self.graph.arrays, o.beam, o.max_active, o.min_active,
                                    o.acoustic_scale, o.word_insertion_penalty,
                                    self.graph.ilabel_offset,
                                    o.lattice_beam if o.nbest > 1 else None, o.beam_delta,
                                    self.context)

    @property
    def num_frames(self) -> int:
        """Frames of the current segment searched so far."""
        return self.search.T

    def accept(self, log_probs: np.ndarray) -> None:
        """Search more frames ``[n, C]`` of the segment."""
        self.search.advance(log_probs)

    def partial(self):
        """The best path so far (``UtteranceResult``; word confidences 1.0: no n-best)."""
        from asrkit.decoders.decode import DecodeOptions, utterance_result

        one = DecodeOptions(**{**dataclasses.asdict(self.opts), "nbest": 1})
        return utterance_result(self.graph, self.search.result(final=False), one)

    def trailing_silence_frames(self) -> int:
        """Frames at the end of the best path (no final weights) consumed by the blank."""
        arcs, _ = self.search.traceback(use_final=False)
        il = self.search.g.ilabel[arcs]
        il = il[il != 0]
        speech = np.flatnonzero(il != self.blank_ilabel)
        return int(len(il) - 1 - speech[-1]) if speech.size else int(len(il))

    def endpoint(self, config: EndpointConfig | None) -> str | None:
        """The endpoint rule that fires now (None: the segment goes on)."""
        if config is None or not self.num_frames:
            return None
        shift = self.opts.frame_shift
        return config.detected(self.num_frames * shift, self.trailing_silence_frames() * shift,
                               self.search.final_relative_cost())

    def final(self):
        """The segment's result (``UtteranceResult`` with n-best confidences), as
        ``decode_utterance`` on the segment's scores."""
        from asrkit.decoders.decode import utterance_result

        return utterance_result(self.graph, self.search.result(final=True), self.opts)


class _GraphlessEndpoint:
    """``endpoint`` of a search without a graph (``num_frames``, ``frame_shift`` and
    ``trailing_silence_frames()`` given): the relative cost is taken as 0, a search that
    may end anywhere."""

    def endpoint(self, config: EndpointConfig | None) -> str | None:
        """The endpoint rule that fires now (None: the segment goes on)."""
        if config is None or not self.num_frames:
            return None
        return config.detected(self.num_frames * self.frame_shift,
                               self.trailing_silence_frames() * self.frame_shift, 0.0)


class OnlineCtcDecoder(_GraphlessEndpoint):
    """The CTC prefix search of a stream, one segment at a time (module docstring).

    ``search_options``: ``ctc_prefix_beam_search``'s keywords (tokens, blank, beam, lm, unit,
    lexicon, context, ...); frame_shift: seconds per frame. Silence for endpointing is the
    frames since the best prefix last grew whose best token is the blank.
    """

    def __init__(self, frame_shift: float, nbest: int = 1, **search_options):
        self.frame_shift = finite("frame_shift", frame_shift, 0.0, strict=True)
        self.nbest = nbest
        self.search_options = search_options
        self.reset()

    def reset(self) -> None:
        """Start a new segment."""
        from asrkit.decoders.ctc import CtcPrefixSearch

        self.search = CtcPrefixSearch(**self.search_options)
        self._trailing = 0

    @property
    def num_frames(self) -> int:
        return self.search.T

    def accept(self, log_probs: np.ndarray) -> None:
        """Search more frames ``[n, C]`` of the segment."""
        scores = np.asarray(log_probs)
        self.search.advance(scores)
        if len(scores):
            best = scores.argmax(axis=1) == self.search.blank
            speech = np.flatnonzero(~best)
            self._trailing = len(best) - 1 - int(speech[-1]) if speech.size else \
                self._trailing + len(best)

    def partial(self):
        """The best hypothesis so far (``Hypothesis``)."""
        return self.search.best()

    def trailing_silence_frames(self) -> int:
        """Trailing frames whose best token is the blank."""
        return self._trailing

    def final(self) -> list:
        """The segment's n-best hypotheses, as ``ctc_prefix_beam_search`` on its scores."""
        return self.search.finish(self.nbest)


@dataclasses.dataclass
class TransducerSegmentResult:
    """A transducer segment's result: words, their ``WordTiming`` (seconds from the segment's
    start; n-best confidences in a final result, 1.0 in a partial) and the n-best hypotheses
    (``TransducerHypothesis``, best first)."""

    words: list[str]
    timings: list
    nbest: list

    @property
    def text(self) -> str:
        """The 1-best words joined by spaces."""
        return " ".join(self.words)


class OnlineTransducerDecoder(_GraphlessEndpoint):
    """A transducer's search of a stream, one segment at a time (module docstring).

    new_search: ``new_search(start)`` returns a fresh resumable search
    (``TransducerGreedySearch`` or ``TransducerBeamSearch``) whose prediction network begins
    from ``start`` (None: its start symbol); frame_shift: seconds per encoder frame; nbest: the
    n-best size of the final result's confidences. A new segment's search goes on from the
    prediction network state of the last segment's result (as sherpa-onnx keeps the last
    ``context_size`` tokens), so a label is not emitted again; the LM and hotword states start
    over (a new sentence).
    """

    def __init__(self, new_search, frame_shift: float, nbest: int = 1):
        self.new_search = new_search
        self.frame_shift = finite("frame_shift", frame_shift, 0.0, strict=True)
        self.nbest = int(nbest)
        self.search = None
        self.reset()

    def reset(self) -> None:
        """Start a new segment."""
        start = None if self.search is None else self.search.predictor_state()
        self.search = self.new_search(start)

    @property
    def num_frames(self) -> int:
        """Frames of the current segment searched so far."""
        return self.search.T

    def accept(self, enc: np.ndarray) -> None:
        """Search more encoder frames float32 ``[n, H]`` of the segment."""
        self.search.advance(enc)

    def partial(self) -> TransducerSegmentResult:
        """The best hypothesis so far (confidences 1.0: no n-best)."""
        from asrkit.decoders.ctm import word_timings

        h = self.search.best()
        return TransducerSegmentResult(h.words, word_timings(h.words, h.word_frames,
                                                             self.frame_shift), [h])

    def trailing_silence_frames(self) -> int:
        """Frames since the best hypothesis last emitted a label."""
        return self.search.trailing_frames()

    def final(self) -> TransducerSegmentResult:
        """The segment's result with n-best confidences, as the offline search (``decode``
        of ``asrkit.recognizer.transducer.TransducerSearch``) on the segment's frames."""
        from asrkit.decoders.transducer import hypothesis_timings

        nbest = self.search.finish(self.nbest)
        words = nbest[0].words if nbest else []
        return TransducerSegmentResult(list(words), hypothesis_timings(nbest, self.frame_shift),
                                       nbest)
