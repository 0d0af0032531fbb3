"""Symbol tables in OpenFst's text format: one ``symbol id`` pair per line, ``<eps>`` = 0.

Symbols are for reading and printing only; every algorithm works on the integer labels, as in
OpenFst and k2. The files are the ``words.txt`` / ``phones.txt`` / ``tokens.txt`` of Kaldi lang
directories.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

EPSILON = "<eps>"
MAX_ID = 2**31 - 1  # labels are int32, as OpenFst's


class SymbolTable:
    """A bijection between symbols (str) and integer ids (int >= 0).

    ``SymbolTable()`` starts with ``<eps>`` at id 0 (``eps=None`` starts empty). ids need not be
    contiguous; ``add_symbol`` without a key uses one more than the largest id so far.
    """

    def __init__(self, eps: str | None = EPSILON, name: str = ""):
        self.name = name
        self._sym2id: dict[str, int] = {}
        self._id2sym: dict[int, str] = {}
        self._next = 0
        if eps is not None:
            self.add_symbol(eps, 0)

    # -- construction -------------------------------------------------------------------------

    def add_symbol(self, symbol: str, key: int | None = None) -> int:
        """Add ``symbol`` (with id ``key``, or the next free id) and return its id.

        Adding a symbol that is already present with the same (or no) key returns its id;
        a clash (same symbol, other id; or id taken by another symbol) raises ValueError.
        """
        if not symbol or any(c.isspace() for c in symbol):
            raise ValueError(f"symbol {symbol!r} is empty or contains whitespace")
        old = self._sym2id.get(symbol)
        if old is not None:
            if key is not None and key != old:
                raise ValueError(f"symbol {symbol!r} already has id {old}, not {key}")
            return old
        if key is None:
            key = self._next
        key = int(key)
        if not 0 <= key <= MAX_ID:
            raise ValueError(f"symbol {symbol!r}: id {key} is outside 0..{MAX_ID}")
        if key in self._id2sym:
            raise ValueError(f"id {key} of {symbol!r} is already used by {self._id2sym[key]!r}")
        self._sym2id[symbol] = key
        self._id2sym[key] = symbol
        self._next = max(self._next, key + 1)
        return key

    @classmethod
    def from_symbols(cls, symbols: Iterable[str], eps: str | None = EPSILON,
                     name: str = "") -> SymbolTable:
        """Table with ``eps`` at 0 (unless None) and ``symbols`` numbered in order after it."""
        table = cls(eps=eps, name=name)
        for s in symbols:
            table.add_symbol(s)
        return table

    @classmethod
    def from_text(cls, text: str, name: str = "<string>") -> SymbolTable:
        """Parse OpenFst text ("symbol id" per line). Errors name ``name`` and the line."""
        table = cls(eps=None, name=name)
        for lineno, line in enumerate(text.split("\n"), 1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) != 2:
                raise ValueError(f"{name}:{lineno}: expected 'symbol id', got {line.strip()!r}")
            try:
                key = int(fields[1])
            except ValueError:
                raise ValueError(f"{name}:{lineno}: id {fields[1]!r} is not an integer") from None
            try:
                table.add_symbol(fields[0], key)
            except ValueError as e:
                raise ValueError(f"{name}:{lineno}: {e}") from None
        return table

    @classmethod
    def read_text(cls, path: str | os.PathLike) -> SymbolTable:
        """Read a symbol table file (``words.txt``-style). Format errors (ValueError) name the
        file and line; an unreadable file raises OSError."""
        from asrkit.utils.textfile import read_text

        return cls.from_text(read_text(path), name=os.fspath(path))

    def to_text(self) -> str:
        """The table as OpenFst text, ordered by id."""
        return "".join(f"{s} {i}\n" for i, s in sorted(self._id2sym.items()))

    def write_text(self, path: str | os.PathLike) -> None:
        """Write the table atomically as OpenFst text."""
        from asrkit.utils import atomic_write_text

        atomic_write_text(path, self.to_text())

    def copy(self) -> SymbolTable:
        """An independent copy."""
        table = SymbolTable(eps=None, name=self.name)
        for i, s in sorted(self._id2sym.items()):
            table.add_symbol(s, i)
        return table

    # -- lookup -------------------------------------------------------------------------------

    def find(self, key: str | int) -> int | str:
        """id of a symbol, or symbol of an id; KeyError when absent."""
        if isinstance(key, str):
            return self._sym2id[key]
        return self._id2sym[int(key)]

    def id(self, symbol: str) -> int:
        """The id of ``symbol``; KeyError naming it when absent."""
        try:
            return self._sym2id[symbol]
        except KeyError:
            raise KeyError(f"symbol {symbol!r} not in table {self.name or ''}".strip()) from None

    def symbol(self, key: int) -> str:
        """The symbol with id ``key``; KeyError when absent."""
        try:
            return self._id2sym[int(key)]
        except KeyError:
            raise KeyError(f"id {key} not in table {self.name or ''}".strip()) from None

    def get(self, symbol: str, default: int | None = None) -> int | None:
        """The id of ``symbol`` or ``default``."""
        return self._sym2id.get(symbol, default)

    def __contains__(self, key) -> bool:
        if isinstance(key, str):
            return key in self._sym2id
        return int(key) in self._id2sym

    def __len__(self) -> int:
        return len(self._sym2id)

    def __iter__(self) -> Iterator[tuple[int, str]]:
        return iter(sorted(self._id2sym.items()))

    def symbols(self) -> list[str]:
        """All symbols ordered by id."""
        return [s for _, s in sorted(self._id2sym.items())]

    def ids(self) -> list[int]:
        """All ids in increasing order."""
        return sorted(self._id2sym)

    @property
    def max_id(self) -> int:
        """The largest id (-1 when empty)."""
        return max(self._id2sym, default=-1)

    def __eq__(self, other) -> bool:
        return isinstance(other, SymbolTable) and self._id2sym == other._id2sym

    def __repr__(self) -> str:
        return f"SymbolTable({self.name!r}, {len(self)} symbols)"
