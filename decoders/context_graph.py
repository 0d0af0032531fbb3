"""Hotwords: an Aho-Corasick context graph that boosts label sequences during a search.

Contextual biasing without rebuilding the decoding graph, as icefall's and sherpa's
``ContextGraph``: the hotword phrases (sequences of labels: words for the TLG search, tokens for
the CTC prefix search) form a trie with failure links; every hypothesis carries a context state
and, for each label it emits, the search adds ``step``'s score. A label that starts or continues
a phrase earns its boost at once, so the search is drawn towards the phrase while it is being
matched; when the match breaks off, what the partial match earned is taken back, and a completed
phrase keeps its boosts (each occurrence once). At the end of a hypothesis ``final_score``
takes back an unfinished match. In total a hypothesis gains the boosts of the phrases it
contains and nothing for partial matches.

In numbers: state ``s`` has ``node[s]`` (the boosts of the labels from the root to ``s``) and
``bonus[s]`` (the sum of ``node`` over the phrases ending at ``s``, its own and shorter ones
ending there through output links); ``step(s, w)`` moves to ``s2`` (goto, else failure links,
else the root) and scores ``node[s2] - node[s] + bonus[s2]``.

Hotword files (``read_hotwords``): one phrase per line, an optional boost at the end written
``:BOOST`` (sherpa-onnx's format, e.g. ``seven eight :3.0``), ``#`` comments and blank lines
ignored.
"""

from __future__ import annotations

import dataclasses
import math

import numba
import numpy as np

DEFAULT_BOOST = 2.0  # nats per word: about a factor 7 in probability


@dataclasses.dataclass
class Hotword:
    """One line of a hotword file: its words and its boost (nats per word), and where it was
    read (``file:line``) for error messages."""

    words: list[str]
    boost: float
    where: str = ""


def parse_hotwords(lines, where: str = "<hotwords>",
                   default_boost: float = DEFAULT_BOOST) -> list[Hotword]:
    """Hotwords from the lines of a hotword file (module docstring); ValueError naming
    ``where:line`` for a boost that is not a finite number or a line with only a boost."""
    out = []
    for n, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        fields = text.split()
        boost = default_boost
        if fields[-1].startswith(":"):
            try:
                boost = float(fields[-1][1:])
            except ValueError:
                boost = math.nan
            if not math.isfinite(boost):
                raise ValueError(f"{where}:{n}: boost {fields[-1][1:]!r} is not a finite "
                                 "number (write it as :2.5 after the phrase)")
            fields = fields[:-1]
        if not fields:
            raise ValueError(f"{where}:{n}: a boost without a phrase")
        out.append(Hotword(fields, boost, f"{where}:{n}"))
    return out


def read_hotwords(path: str, default_boost: float = DEFAULT_BOOST) -> list[Hotword]:
    """Read a hotword file (module docstring). Raises ValueError naming the file and line, or
    OSError when it cannot be read."""
    from asrkit.utils.textfile import read_text

    return parse_hotwords(read_text(path).splitlines(), path, default_boost)


class ContextGraph:
    """The Aho-Corasick automaton of hotword phrases; see the module docstring.

    ``ContextGraph(phrases)``: ``phrases`` is a list of label sequences, each a list of
    ``(label, boost)`` pairs (labels are ints > 0; boosts in nats, positive favours). State 0 is
    the root. Arrays (all numpy): ``offsets`` int64[S+1] and ``labels``/``next`` int32[A]
    (goto arcs of state s, sorted by label: ``offsets[s]:offsets[s+1]``), ``fail`` int32[S],
    ``node`` and ``bonus`` float32[S].
    """

    def __init__(self, phrases):
        goto: list[dict[int, int]] = [{}]
        node = [0.0]
        ends: list[bool] = [False]
        for phrase in phrases:
            if not phrase:
                raise ValueError("a hotword phrase needs at least one label")
            s = 0
            for label, boost in phrase:
                label, boost = int(label), float(boost)
                if label <= 0:
                    raise ValueError(f"hotword labels must be > 0, got {label}")
                if not math.isfinite(boost):
                    raise ValueError(f"hotword boost must be finite, got {boost}")
                nxt = goto[s].get(label)
                if nxt is None:
                    nxt = goto[s][label] = len(goto)
                    goto.append({})
                    node.append(node[s] + boost)
                    ends.append(False)
                elif node[s] + boost > node[nxt]:  # shared prefix: the larger boost
                    node[nxt] = node[s] + boost
                s = nxt
            ends[s] = True
        S = len(goto)
        fail = np.zeros(S, np.int32)
        out_link = np.full(S, -1, np.int64)  # nearest proper suffix state that ends a phrase
        order = []
        queue = list(goto[0].values())
        while queue:  # breadth first: a state's failure link is shallower than it
            s = queue.pop(0)
            order.append(s)
            for label, t in goto[s].items():
                f = fail[s]
                while f and label not in goto[f]:
                    f = fail[f]
                fail[t] = goto[f][label] if label in goto[f] and goto[f][label] != t else 0
                queue.append(t)
        for s in order:
            f = int(fail[s])
            out_link[s] = f if ends[f] and f else out_link[f] if f else -1
        node_a = np.array(node, np.float64)
        bonus = np.zeros(S, np.float64)
        for s in order:  # shallow first, so the output link's bonus is complete
            own = node_a[s] if ends[s] else 0.0
            bonus[s] = own + (bonus[out_link[s]] if out_link[s] >= 0 else 0.0)
        self.offsets = np.zeros(S + 1, np.int64)
        self.offsets[1:] = np.cumsum([len(g) for g in goto])
        arcs = [(lab, t) for g in goto for lab, t in sorted(g.items())]
        self.labels = np.array([a[0] for a in arcs], np.int32)
        self.next = np.array([a[1] for a in arcs], np.int32)
        self.fail = fail
        self.node = node_a.astype(np.float32)
        self.bonus = bonus.astype(np.float32)
        self._cache: dict[tuple[int, int], tuple[int, float]] = {}

    @property
    def num_states(self) -> int:
        return len(self.fail)

    def step(self, state: int, label: int) -> tuple[int, float]:
        """``(next state, score)`` of emitting ``label`` in context ``state`` (score in nats,
        positive favours; see the module docstring)."""
        key = (state, label)
        hit = self._cache.get(key)
        if hit is None:
            nxt, score = _step(self.offsets, self.labels, self.next, self.fail, self.node,
                               self.bonus, state, label)
            hit = self._cache[key] = (int(nxt), float(score))
        return hit

    def final_score(self, state: int) -> float:
        """The score of ending in ``state``: an unfinished match's boosts taken back."""
        return -float(self.node[state])

    def arrays(self) -> tuple:
        """``(offsets, labels, next, fail, node, bonus)`` for compiled searches."""
        return self.offsets, self.labels, self.next, self.fail, self.node, self.bonus


def empty_arrays() -> tuple:
    """The arrays of a context graph with no phrases (a compiled search then skips biasing)."""
    return (np.zeros(1, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int32),
            np.zeros(1, np.int32), np.zeros(1, np.float32), np.zeros(1, np.float32))


@numba.njit(cache=True)
def _step(offsets, labels, nxt, fail, node, bonus, state, label):
    """``(next state, score)``: goto ``label`` from ``state``, else along failure links, else
    the root; the score is ``node[next] - node[state] + bonus[next]``."""
    s = state
    while True:
        lo = offsets[s]
        hi = offsets[s + 1]
        while lo < hi:  # binary search of the sorted goto labels
            mid = (lo + hi) // 2
            if labels[mid] < label:
                lo = mid + 1
            else:
                hi = mid
        if lo < offsets[s + 1] and labels[lo] == label:
            t = nxt[lo]
            return t, node[t] - node[state] + bonus[t]
        if s == 0:
            return 0, -node[state]
        s = fail[s]


def token_phrases(hotwords: list[Hotword], tokens, unit: str = "word",
                  word_delimiter: str = "|") -> list[list[tuple[int, float]]]:
    """Hotwords as label sequences for the CTC prefix search: token ids + 1 (its context
    labels), each word's boost spread evenly over its tokens (a phrase earns ``boost`` per
    word whatever its spelling). ``unit`` as ``ctc_prefix_beam_search``'s: ``word`` (a word is
    a token), ``char`` (its characters, ``word_delimiter`` between words, unboosted) or
    ``bpe`` (greedy longest match of SentencePiece pieces, the first with ``▁``). ValueError
    naming the hotword's line for a word the tokens cannot spell."""
    index = {t: i for i, t in enumerate(tokens)}
    out = []
    for h in hotwords:
        phrase: list[tuple[int, float]] = []
        for k, word in enumerate(h.words):
            if unit == "word":
                pieces = [word]
            elif unit == "char":
                pieces = ([word_delimiter] if k else []) + list(word)
            elif unit == "bpe":
                pieces = _greedy_pieces(word, index)
            else:
                raise ValueError(f"unit must be 'word', 'char' or 'bpe', got {unit!r}")
            missing = [p for p in pieces if p not in index] if pieces else [word]
            if missing:
                raise ValueError(f"{h.where or 'hotwords'}: {word!r} cannot be spelled with the "
                                 f"model's tokens (no {missing[0]!r})")
            spelled = [p for p in pieces if not (unit == "char" and p == word_delimiter)]
            for p in pieces:
                boost = h.boost / len(spelled) if p in spelled else 0.0
                phrase.append((index[p] + 1, boost))
        out.append(phrase)
    return out


def _greedy_pieces(word: str, index: dict) -> list[str]:
    """``word`` as SentencePiece pieces by greedy longest match (``▁`` on the first); [] when
    it cannot be spelled."""
    pieces, i, first = [], 0, True
    while i < len(word):
        for j in range(len(word), i, -1):
            piece = ("\u2581" if first else "") + word[i:j]
            if piece in index:
                pieces.append(piece)
                i, first = j, False
                break
        else:
            return []
    return pieces
