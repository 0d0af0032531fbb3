"""The network's output units (``tokens.txt``) and the CTC token transducer T.

``tokens.txt`` is read by :class:`asrkit.io.tokens.TokenTable` (one reader for training, model
folders and graphs; its rules are in that module). A decoding graph needs a blank, so
``read_tokens`` insists that one is named (``<blk>``/``<blank>``, or ``blank=``).

In the decoding graph label 0 is epsilon, so every token's graph label is its network index
plus ``ILABEL_OFFSET`` (= 1): a decoder scores input label ``i`` with network output ``i - 1``.
The graph's input symbol table (``graph_symbols``, written as the graph's ``tokens.txt``) is
therefore ``<eps> 0``, each token at index + 1, then the disambiguation symbols ``#0, #1, ...``.

T (the "standard" CTC topology of k2/EESEN) maps frame-level token sequences to token strings:
state 0 (start, final) loops on blank; state t (one per non-blank token, final) is entered by
emitting t, loops on t without output (repeats collapse) and returns to 0 on blank or moves to
another token's state u != t emitting u. So "a a <blk> a b" reads as "a a b", and two equal tokens
in a row need a blank between them. T has C - 1 + (C - 1)^2 + 2(C - 1) + 1 arcs, fine for phones,
characters and BPE vocabularies of a few hundred units.
"""

from __future__ import annotations

import os

import numpy as np

from asrkit.decoders.fst import Fst, SymbolTable
from asrkit.io.tokens import BLANK_NAMES, ILABEL_OFFSET, TokenTable

__all__ = ["BLANK_NAMES", "ILABEL_OFFSET", "TokenTable", "ctc_topology", "graph_symbols",
           "read_tokens"]


def read_tokens(path: str | os.PathLike, blank: str | None = None) -> TokenTable:
    """Read ``tokens.txt`` for a decoding graph (``TokenTable.read``, units as pieces).
    ``blank`` names the blank symbol (default: ``<blk>`` or ``<blank>``, whichever is present;
    a graph without a named blank is an error). Errors name the file and line."""
    table = TokenTable.read(path, unit="piece", blank=blank)
    if blank is None and not any(b in table for b in BLANK_NAMES):
        raise ValueError(f"{os.fspath(path)}: no blank token ({' or '.join(BLANK_NAMES)}); name "
                         "it with blank=")
    return table


def graph_symbols(tokens: TokenTable, num_disambig: int = 0) -> SymbolTable:
    """The graph's input symbol table: ``<eps>`` 0, tokens at index + 1, then ``#0`` ..
    ``#{num_disambig - 1}``."""
    table = SymbolTable(name="tokens")
    for i, s in enumerate(tokens.symbols):
        table.add_symbol(s, i + ILABEL_OFFSET)
    for k in range(num_disambig):
        table.add_symbol(f"#{k}")
    return table


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
    table = graph_symbols(tokens)
    return Fst(K + 1, 0, np.zeros(K + 1), src, dst, il, ol, np.zeros(src.size), "tropical",
               isymbols=table, osymbols=table, dtype=dtype)
