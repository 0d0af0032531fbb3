"""Token inventories (``tokens.txt``) and turning transcripts into token ids.

``tokens.txt`` has one ``symbol id`` per line with ids 0..N-1 (ESPnet/icefall/k2 style), e.g.
``<blk> 0``, ``<space> 1``, ``a 2``. Units:

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
BLANKS = ("<blk>", "<blank>", "<eps>")


class TokenError(ValueError):
    """A bad tokens.txt or a transcript with a symbol that is not in it."""


class TokenTable:
    """Symbols by id and ids by symbol; ``blank`` is the id of ``<blk>``/``<blank>`` (or 0)."""

    def __init__(self, symbols: list[str], unit: str = "char"):
        if unit not in UNITS:
            raise TokenError(f"unknown token unit {unit!r}; expected one of {', '.join(UNITS)}")
        if len(set(symbols)) != len(symbols):
            raise TokenError("tokens.txt: duplicate symbols")
        self.symbols = list(symbols)
        self.unit = unit
        self.ids = {s: i for i, s in enumerate(self.symbols)}
        self.blank = next((self.ids[b] for b in BLANKS if b in self.ids), 0)
        self.unk = self.ids.get("<unk>")
        self.separator = next((self.ids[s] for s in SEPARATORS if s in self.ids), None)

    @classmethod
    def read(cls, path: str | os.PathLike, unit: str = "char") -> TokenTable:
        """Read ``symbol id`` lines; ids must be exactly 0..N-1. Errors name file and line."""
        path = os.fspath(path)
        if not os.path.isfile(path):
            raise TokenError(f"{path}: no such file")
        by_id: dict[int, str] = {}
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                fields = line.split()
                if not fields:
                    continue
                if len(fields) != 2 or not fields[1].lstrip("-").isdigit():
                    raise TokenError(f"{path}:{lineno}: expected 'symbol id', got {line.strip()!r}")
                i = int(fields[1])
                if i in by_id:
                    raise TokenError(f"{path}:{lineno}: id {i} used twice")
                by_id[i] = fields[0]
        if sorted(by_id) != list(range(len(by_id))):
            raise TokenError(f"{path}: ids must be 0..{len(by_id) - 1} without gaps")
        if not by_id:
            raise TokenError(f"{path}: no tokens")
        return cls([by_id[i] for i in range(len(by_id))], unit)

    def __len__(self) -> int:
        return len(self.symbols)

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
        """Token ids (int32) of ``text``; raises TokenError naming the first unknown symbol."""
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
