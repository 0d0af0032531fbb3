"""Hotwords of a Recognizer: phrases given as a file or a list, biased in the TLG search.

A phrase's words must be words of the decoding graph (``graph/words.txt``): the search can only
output those, so biasing an unknown word could never work and is an error naming the phrase's
line. Each word of a phrase gets the phrase's boost (``asrkit.decoders.context_graph``).
"""

from __future__ import annotations

import os

from asrkit.recognizer.options import RecognizerError


def load_hotwords(spec) -> list:
    """``Hotword`` list from ``spec``: None (none), a path to a hotword file, or a list of
    lines (``"phrase :boost"``) or ``Hotword``. RecognizerError naming the file and line."""
    from asrkit.decoders.context_graph import Hotword, parse_hotwords, read_hotwords

    if spec is None:
        return []
    try:
        if isinstance(spec, (str, os.PathLike)):
            try:
                return read_hotwords(os.fspath(spec))
            except OSError as e:
                raise RecognizerError(f"{os.fspath(spec)}: cannot read the hotwords: "
                                      f"{e.strerror or e}") from None
        items = list(spec)
        if all(isinstance(h, Hotword) for h in items):
            return items
        if not all(isinstance(h, str) for h in items):
            raise RecognizerError("hotwords: expected a file path, or a list of phrases "
                                  "(strings, 'phrase :boost') or Hotword")
        return parse_hotwords(items, "hotwords")
    except ValueError as e:
        raise RecognizerError(str(e)) from None


def hotword_lines(hotwords: list) -> list[str]:
    """The lines (``"phrase :boost"``) that ``load_hotwords`` reads back as ``hotwords``."""
    return [f"{' '.join(h.words)} :{h.boost!r}" for h in hotwords]


def word_context(hotwords: list, words: dict[int, str]):
    """A ``ContextGraph`` over word ids (``words``: the graph's id -> word) of ``hotwords``;
    None when there are none. RecognizerError for a word the graph cannot output."""
    from asrkit.decoders.context_graph import ContextGraph

    if not hotwords:
        return None
    ids = {w: i for i, w in words.items() if i > 0}
    phrases = []
    for h in hotwords:
        missing = [w for w in h.words if w not in ids]
        if missing:
            raise RecognizerError(f"{h.where or 'hotwords'}: {missing[0]!r} is not a word of "
                                  "the decoding graph (graph/words.txt); a hotword must be a "
                                  "word the graph can output")
        phrases.append([(ids[w], h.boost) for w in h.words])
    return ContextGraph(phrases)
