"""Decoding utterances with a graph folder: Viterbi search, n-best, word times, confidences.

``DecodingGraph.load(folder)`` reads what ``asrkit graph build`` writes (``TLG.npz``,
``words.txt``, ``graph.json``); ``decode_utterance`` runs the search on one ``[T, C]`` matrix of
log-probabilities and returns words, CTM timings with n-best confidences and the n-best list.
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np

from asrkit.decoders.ctm import WordTiming, nbest_confidences, word_timings
from asrkit.decoders.viterbi import GraphArrays, viterbi_decode


@dataclasses.dataclass
class DecodeOptions:
    """Search options, with Kaldi's names (``--beam``, ``--max-active``, ``--acoustic-scale``)."""

    beam: float = 16.0                # search beam (cost units, natural log)
    max_active: int = 7000            # most tokens kept per frame
    min_active: int = 200             # fewest tokens kept per frame (widens the beam)
    beam_delta: float = 0.5           # slack added to the beam when max/min_active bind
    acoustic_scale: float = 1.0       # multiplies the network's log-probabilities
    word_insertion_penalty: float = 0.0  # cost per output word (negative favours words)
    lattice_beam: float = 8.0         # links kept for the n-best list / confidences
    nbest: int = 10                   # hypotheses kept (1: no lattice work)
    frame_shift: float = 0.01         # seconds per network output frame (x subsampling)

    def __post_init__(self):
        """Refuse values no search can use (NaN, negative beams, ...), naming the option."""
        from asrkit.decoders.options import count, finite

        self.beam = finite("beam", self.beam, 0.0, strict=True)
        self.max_active = count("max_active", self.max_active, 1)
        self.min_active = count("min_active", self.min_active, 0)
        self.beam_delta = finite("beam_delta", self.beam_delta, 0.0)
        self.acoustic_scale = finite("acoustic_scale", self.acoustic_scale, 0.0, strict=True)
        self.word_insertion_penalty = finite("word_insertion_penalty",
                                             self.word_insertion_penalty)
        self.lattice_beam = finite("lattice_beam", self.lattice_beam, 0.0, strict=True)
        self.nbest = count("nbest", self.nbest, 1)
        self.frame_shift = finite("frame_shift", self.frame_shift, 0.0, strict=True)


@dataclasses.dataclass
class DecodingGraph:
    """A decoding graph as search arrays plus its word symbols and build info."""

    arrays: GraphArrays
    words: dict[int, str]
    ilabel_offset: int
    info: dict

    @classmethod
    def load(cls, folder: str) -> DecodingGraph:
        """Read a graph folder written by ``asrkit graph build``. Every file is checked before
        a search may use it (the arrays' ranges and weights, TLG's labels against
        ``graph.json``'s token count and ``words.txt``); errors raise ValueError naming the
        file, OSError when one is unreadable."""
        from asrkit.decoders.fst import SymbolTable, load_fst
        from asrkit.decoders.graph.tokens import ILABEL_OFFSET
        from asrkit.utils.textfile import read_text

        folder = os.fspath(folder)
        if not os.path.isdir(folder):
            raise FileNotFoundError(f"{folder}: no such graph folder")
        tlg_path = os.path.join(folder, "TLG.npz")
        if not os.path.exists(tlg_path):
            raise FileNotFoundError(f"{tlg_path}: no decoding graph (run asrkit graph build)")
        info: dict = {}
        info_path = os.path.join(folder, "graph.json")
        if os.path.exists(info_path):
            try:
                info = json.loads(read_text(info_path))
            except json.JSONDecodeError as e:
                raise ValueError(f"{info_path}:{e.lineno}: not JSON ({e.msg})") from None
            if not isinstance(info, dict):
                raise ValueError(f"{info_path}: expected a JSON object")
        offset = info.get("ilabel_offset", ILABEL_OFFSET)
        if offset != ILABEL_OFFSET or isinstance(offset, bool):
            raise ValueError(f"{info_path}: ilabel_offset is {offset!r}; asrkit graphs have "
                             f"{ILABEL_OFFSET}")
        num_tokens = info.get("num_tokens")
        if num_tokens is not None and (not isinstance(num_tokens, int) or
                                       isinstance(num_tokens, bool) or num_tokens < 1):
            raise ValueError(f"{info_path}: num_tokens is {num_tokens!r}, expected a count")
        words_path = os.path.join(folder, "words.txt")
        table = SymbolTable.read_text(words_path)
        words = {i: s for i, s in table}
        fst = load_fst(tlg_path)
        arrays = GraphArrays.from_fst(fst)
        arrays.check(tlg_path)
        olabels = np.unique(arrays.olabel)
        missing = [int(o) for o in olabels if o != 0 and int(o) not in words]
        if missing:
            raise ValueError(f"{words_path}: has no word for TLG's output label "
                             f"{missing[0]} ({len(missing)} labels missing)")
        top = int(arrays.ilabel.max()) if len(arrays.ilabel) else 0
        if num_tokens is not None and top > num_tokens + offset - 1:
            raise ValueError(f"{tlg_path}: input label {top} is beyond the {num_tokens} tokens "
                             f"{info_path} declares")
        return cls(arrays, words, int(offset), info)


@dataclasses.dataclass
class UtteranceResult:
    """One decoded utterance.

    ``nbest`` holds (words, total cost) best first; ``nbest_costs`` the same entries' cost split
    as (acoustic cost, graph cost), Kaldi's lattice weight pair: the acoustic cost is already
    scaled by ``DecodeOptions.acoustic_scale``, the graph cost holds the graph's weights (LM,
    lexicon, final weight) plus the word insertion penalty, and the two add up to the total.
    """

    words: list[str]
    timings: list[WordTiming]
    nbest: list[tuple[list[str], float]]
    cost: float
    reached_final: bool
    nbest_costs: list[tuple[float, float]] = dataclasses.field(default_factory=list)

    @property
    def text(self) -> str:
        """The 1-best words joined by spaces."""
        return " ".join(self.words)


def decode_utterance(graph: DecodingGraph, log_probs: np.ndarray,
                     opts: DecodeOptions | None = None, context=None) -> UtteranceResult:
    """Decode ``log_probs`` float32 [T, C] (network log-softmax outputs) with ``graph``;
    ``context``: hotwords, a ``ContextGraph`` over the graph's word ids."""
    opts = opts or DecodeOptions()
    res = viterbi_decode(graph.arrays, log_probs, beam=opts.beam, max_active=opts.max_active,
                         min_active=opts.min_active, beam_delta=opts.beam_delta,
                         acoustic_scale=opts.acoustic_scale,
                         word_insertion_penalty=opts.word_insertion_penalty,
                         ilabel_offset=graph.ilabel_offset,
                         lattice_beam=opts.lattice_beam if opts.nbest > 1 else None,
                         context=context)
    return utterance_result(graph, res, opts)


def utterance_result(graph: DecodingGraph, res, opts: DecodeOptions) -> UtteranceResult:
    """The words, n-best list (from the lattice when ``opts.nbest`` > 1 and the search kept
    one), confidences and word times of a search's ``DecodeResult``."""
    from asrkit.decoders.lattice import nbest_split

    want_lattice = opts.nbest > 1
    words = [graph.words.get(w, f"<{w}>") for w in res.words]
    best_split = (res.acoustic_cost, res.graph_cost)
    nbest: list[tuple[list[str], float]] = [(words, res.cost)]
    costs = [best_split]
    if want_lattice and res.lattice_links is not None and len(res.lattice_links):
        found = nbest_split(res, opts.nbest)
        if found:
            nbest = [([graph.words.get(w, f"<{w}>") for w in e.words], e.cost) for e in found]
            costs = [(e.ac_cost, e.graph_cost) for e in found]
            if nbest[0][0] != words:  # ties: keep the search's own best first, once
                keep = [i for i, (ws, _) in enumerate(nbest) if ws != words]
                nbest = [(words, res.cost)] + [nbest[i] for i in keep]
                costs = [best_split] + [costs[i] for i in keep]
    conf = nbest_confidences(nbest) if len(nbest) > 1 else [1.0] * len(words)
    timings = word_timings(words, res.word_frames, opts.frame_shift, conf)
    return UtteranceResult(words, timings, nbest, res.cost, res.reached_final, costs)
