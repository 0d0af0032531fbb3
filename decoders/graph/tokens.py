"""The network's output units (``tokens.txt``) and the CTC token transducer T.

``tokens.txt`` lists the units the acoustic model outputs, "symbol id" per line with ids
0..C-1 = the network's output indices (icefall/k2 convention); the blank is one of them
(``<blk>`` by default). Lines whose symbol starts with ``#`` (disambiguation symbols of another
toolkit) are ignored; ``<eps>`` is reserved.

In the decoding graph label 0 is epsilon, so every token's graph label is its network index
plus ``ILABEL_OFFSET`` (= 1): a decoder scores input label ``i`` with network output ``i - 1``.
The graph's input symbol table (written as the graph's ``tokens.txt``) is therefore ``<eps> 0``,
each token at index + 1, then the disambiguation symbols ``#0, #1, ...``.

T (the "standard" CTC topology of k2/EESEN) maps frame-level token sequences to token strings:
state 0 (start, final) loops on blank; state t (one per non-blank token, final) is entered by
emitting t, loops on t without output (repeats collapse) and returns to 0 on blank or moves to
another token's state u != t emitting u. So "a a <blk> a b" reads as "a a b", and two equal tokens
in a row need a blank between them. T has C - 1 + (C - 1)^2 + 2(C - 1) + 1 arcs, fine for phones,
characters and BPE vocabularies of a few hundred units.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from asrkit.decoders.fst import Fst, SymbolTable

ILABEL_OFFSET = 1  # graph input label = network output index + 1 (0 is epsilon)
BLANK_NAMES = ("<blk>", "<blank>")


@dataclasses.dataclass
class TokenTable:
    """The network's units. ``symbols[i]`` is output index i; ``blank`` its blank index."""

    symbols: list[str]
    blank: int

    @property
    def num_tokens(self) -> int:
        """C, the number of network outputs (blank included)."""
        return len(self.symbols)

    def index(self, symbol: str) -> int:
        """Network index of ``symbol``; KeyError when absent."""
        return self._index()[symbol]

    def _index(self) -> dict[str, int]:
        cache = self.__dict__.get("_cache")
        if cache is None:
            cache = {s: i for i, s in enumerate(self.symbols)}
            self.__dict__["_cache"] = cache
        return cache

    def __contains__(self, symbol: str) -> bool:
        return symbol in self._index()

    def graph_label(self, symbol: str) -> int:
        """The decoding-graph input label of ``symbol`` (index + ILABEL_OFFSET)."""
        return self.index(symbol) + ILABEL_OFFSET

    def graph_symbols(self, num_disambig: int = 0) -> SymbolTable:
        """The graph's input symbol table: ``<eps>`` 0, tokens at index + 1, then ``#0`` ..
        ``#{num_disambig - 1}``."""
        table = SymbolTable(name="tokens")
        for i, s in enumerate(self.symbols):
            table.add_symbol(s, i + ILABEL_OFFSET)
        for k in range(num_disambig):
            table.add_symbol(f"#{k}")
        return table


def read_tokens(path: str | os.PathLike, blank: str | None = None) -> TokenTable:
    """Read ``tokens.txt`` ("symbol id" lines, ids 0..C-1). ``blank`` names the blank symbol
    (default: ``<blk>`` or ``<blank>``, whichever is present). Errors name the file and line."""
    path = os.fspath(path)
    entries: dict[int, str] = {}
    seen: dict[str, int] = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            fields = line.split()
            if not fields:
                continue
            where = f"{path}:{lineno}"
            if len(fields) != 2:
                raise ValueError(f"{where}: expected 'symbol id', got {line.strip()!r}")
            sym, sid = fields
            if sym.startswith("#"):
                continue
            if sym == "<eps>":
                raise ValueError(f"{where}: <eps> is reserved for the graph's epsilon; list only "
                                 "the network's output units (blank included)")
            try:
                i = int(sid)
            except ValueError:
                raise ValueError(f"{where}: id {sid!r} is not an integer") from None
            if i in entries:
                raise ValueError(f"{where}: id {i} already used by {entries[i]!r}")
            if sym in seen:
                raise ValueError(f"{where}: token {sym!r} listed twice")
            entries[i] = sym
            seen[sym] = i
    if not entries:
        raise ValueError(f"{path}: no tokens")
    n = max(entries) + 1
    missing = sorted(set(range(n)) - set(entries))
    if missing:
        raise ValueError(f"{path}: ids must be 0..{n - 1} without gaps (missing {missing[:5]})")
    symbols = [entries[i] for i in range(n)]
    if blank is None:
        found = [b for b in BLANK_NAMES if b in seen]
        if not found:
            raise ValueError(f"{path}: no blank token ({' or '.join(BLANK_NAMES)}); name it "
                             "with blank=")
        blank = found[0]
    if blank not in seen:
        raise ValueError(f"{path}: blank token {blank!r} not listed")
    return TokenTable(symbols, seen[blank])


def ctc_topology(tokens: TokenTable, dtype=np.float32) -> Fst:
    """The CTC token transducer T (see the module docstring). Input labels are graph labels of
    all tokens (blank included); output labels the same for non-blank tokens, epsilon else.
    States: 0 = blank state, then one per non-blank token in index order."""
    C = tokens.num_tokens
    nonblank = np.array([i for i in range(C) if i != tokens.blank], dtype=np.int64)
    K = nonblank.size
    lab = nonblank + ILABEL_OFFSET
    blank_lab = tokens.blank + ILABEL_OFFSET
    state = np.arange(1, K + 1)
    src = [np.array([0]), np.zeros(K, np.int64), state, state]
    dst = [np.array([0]), state, state, np.zeros(K, np.int64)]
    il = [np.array([blank_lab]), lab, lab, np.full(K, blank_lab)]
    ol = [np.array([0]), lab, np.zeros(K, np.int64), np.zeros(K, np.int64)]
    # token state t -> token state u != t, emitting u
    if K > 1:
        t_idx, u_idx = np.nonzero(~np.eye(K, dtype=bool))
        src.append(state[t_idx])
        dst.append(state[u_idx])
        il.append(lab[u_idx])
        ol.append(lab[u_idx])
    src, dst, il, ol = (np.concatenate(x) for x in (src, dst, il, ol))
    table = tokens.graph_symbols()
    return Fst(K + 1, 0, np.zeros(K + 1), src, dst, il, ol, np.zeros(src.size), "tropical",
               isymbols=table, osymbols=table, dtype=dtype)
