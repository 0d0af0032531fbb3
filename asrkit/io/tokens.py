"""Token inventories (``tokens.txt``): the acoustic model's output units, and transcripts as ids.

One class for every user: the training reader (transcripts -> ids), the model folder and the
decoding-graph builder (``asrkit.decoders.graph``: symbol -> network index -> graph label) read
the file with the same rules.

``tokens.txt`` has one ``symbol id`` per line with ids 0..N-1 = the network's output indices
(ESPnet/icefall/k2 style), e.g. ``<blk> 0``, ``<space> 1``, ``a 2``. Rules (errors name the file
and line): blank lines are skipped; ``#0``, ``#1``, ... lines are another toolkit's
disambiguation symbols and are ignored; ``<eps>`` is reserved (label 0 of a decoding graph is
epsilon); an id or a symbol may appear once; the ids must be exactly 0..N-1.

The blank is the symbol named by ``blank=``, else ``<blk>`` or ``<blank>`` when listed, else id 0
(frame-level cross-entropy models have no blank; the graph builder insists on one).

Units turn a transcript into symbols:

- ``char``: each character of the transcript is a token; a space between words becomes the
  word-separator token if the inventory has one (``<space>``, ``▁`` or ``|``), else is dropped;
- ``word``: each whitespace-separated word is a token;
- ``piece``: the transcript is already split into pieces (BPE / sentencepiece output, one piece
  per whitespace-separated field), each a token.

An unknown symbol maps to ``<unk>`` when the inventory has it, and is an error otherwise.
"""

from __future__ import annotations

import os

import numpy as np

UNITS = ("char", "word", "piece")
SEPARATORS = ("<space>", "▁", "|")
BLANK_NAMES = ("<blk>", "<blank>")
ILABEL_OFFSET = 1  # a decoding graph's input label = network output index + 1 (0 is epsilon)


class TokenError(ValueError):
    """A bad tokens.txt or a transcript with a symbol that is not in it."""


class TokenTable:
    """Symbols by id and ids by symbol.

    symbols: the output units, ``symbols[i]`` is network output i; unit: how transcripts are
    split (``UNITS``); blank: the blank's id, its symbol, or None (``<blk>``/``<blank>`` if
    listed, else 0). Attributes: ``ids`` (symbol -> id), ``blank`` (int), ``unk`` (id of
    ``<unk>`` or None), ``separator`` (id of the word separator or None).
    """

    def __init__(self, symbols: list[str], unit: str = "char", blank: int | str | None = None):
        if unit not in UNITS:
            raise TokenError(f"unknown token unit {unit!r}; expected one of {', '.join(UNITS)}")
        if len(set(symbols)) != len(symbols):
            raise TokenError("tokens.txt: duplicate symbols")
        self.symbols = list(symbols)
        self.unit = unit
        self.ids = {s: i for i, s in enumerate(self.symbols)}
        if blank is None:
            blank = next((self.ids[b] for b in BLANK_NAMES if b in self.ids), 0)
        elif isinstance(blank, str):
            if blank not in self.ids:
                raise TokenError(f"blank token {blank!r} not listed")
            blank = self.ids[blank]
        if self.symbols and not 0 <= int(blank) < len(self.symbols):
            raise TokenError(f"blank id {blank} is not a token id (0..{len(self.symbols) - 1})")
        self.blank = int(blank)
        self.unk = self.ids.get("<unk>")
        self.separator = next((self.ids[s] for s in SEPARATORS if s in self.ids), None)

    @classmethod
    def read(cls, path: str | os.PathLike, unit: str = "char",
             blank: str | None = None) -> TokenTable:
        """Read a ``tokens.txt`` with the rules of the module docstring; ``blank`` names the
        blank symbol (default: ``<blk>``/``<blank>``, else id 0). Raises TokenError naming the
        file and line."""
        from asrkit.utils.textfile import TextFileError, read_text

        path = os.fspath(path)
        if not os.path.isfile(path):
            raise TokenError(f"{path}: no such file" if not os.path.exists(path) else
                             f"{path}: is not a file")
        by_id: dict[int, str] = {}
        seen: dict[str, int] = {}
        try:
            lines = read_text(path).split("\n")
        except TextFileError as e:
            raise TokenError(str(e)) from None
        for lineno, line in enumerate(lines, 1):
            fields = line.split()
            if not fields:
                continue
            where = f"{path}:{lineno}"
            if len(fields) != 2:
                raise TokenError(f"{where}: expected 'symbol id', got {line.strip()!r}")
            sym, sid = fields
            if sym[0] == "#" and sym[1:].isdigit():
                continue  # a disambiguation symbol, not a network output
            if sym == "<eps>":
                raise TokenError(f"{where}: <eps> is reserved for the graph's epsilon; list only "
                                 "the network's output units (blank included)")
            if not sid.isdigit() or not sid.isascii():
                raise TokenError(f"{where}: id {sid!r} is not a non-negative integer")
            i = int(sid)
            if i in by_id:
                raise TokenError(f"{where}: id {i} already used by {by_id[i]!r}")
            if sym in seen:
                raise TokenError(f"{where}: token {sym!r} listed twice")
            by_id[i] = sym
            seen[sym] = i
        if not by_id:
            raise TokenError(f"{path}: no tokens")
        n = len(by_id)
        missing = sorted(set(range(n)) - set(by_id))
        if missing:
            raise TokenError(f"{path}: ids must be 0..{n - 1} without gaps (missing "
                             f"{missing[:5]})")
        if blank is not None and blank not in seen:
            raise TokenError(f"{path}: blank token {blank!r} not listed")
        return cls([by_id[i] for i in range(n)], unit, blank)

    def __len__(self) -> int:
        return len(self.symbols)

    @property
    def num_tokens(self) -> int:
        """C, the number of network outputs (blank included)."""
        return len(self.symbols)

    def __contains__(self, symbol: str) -> bool:
        return symbol in self.ids

    def index(self, symbol: str) -> int:
        """Network index of ``symbol``; KeyError when absent."""
        return self.ids[symbol]

    def graph_label(self, symbol: str) -> int:
        """The decoding-graph input label of ``symbol`` (index + ILABEL_OFFSET)."""
        return self.ids[symbol] + ILABEL_OFFSET

    def split(self, text: str) -> list[str]:
        """The symbols of ``text`` for this table's unit (before the lookup)."""
        if self.unit != "char":
            return text.split()
        out: list[str] = []
        sep = self.symbols[self.separator] if self.separator is not None else None
        for w, word in enumerate(text.split()):
            if w and sep is not None:
                out.append(sep)
            out.extend(word)
        return out

    def encode(self, text: str) -> np.ndarray:
        """Token ids (int32 ``[n]``) of ``text``; raises TokenError naming the first unknown
        symbol."""
        ids = []
        for s in self.split(text):
            i = self.ids.get(s, self.unk)
            if i is None:
                raise TokenError(f"unknown token {s!r}")
            ids.append(i)
        return np.array(ids, np.int32)

    def decode(self, ids) -> str:
        """Text of token ids (separator tokens become spaces for chars)."""
        syms = [self.symbols[int(i)] for i in ids]
        if self.unit == "char":
            sep = self.symbols[self.separator] if self.separator is not None else None
            return "".join(" " if s == sep else s for s in syms)
        return " ".join(syms)

    def write(self, path: str | os.PathLike) -> None:
        """Write ``symbol id`` lines atomically."""
        from asrkit.utils import atomic_write_text

        atomic_write_text(path, "".join(f"{s} {i}\n" for i, s in enumerate(self.symbols)))


def make_token_table(texts, unit: str = "char", blank: str = "<blk>") -> TokenTable:
    """Build an inventory from transcripts: blank first, then (for chars) ``<space>``, then the
    symbols in sorted order."""
    syms: set[str] = set()
    probe = TokenTable([blank], "word" if unit == "char" else unit)
    for t in texts:
        syms.update(t.replace(" ", "") if unit == "char" else probe.split(t))
    head = [blank] + (["<space>"] if unit == "char" else [])
    return TokenTable(head + sorted(syms - set(head)), unit)
