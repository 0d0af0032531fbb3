"""Lexicons and the lexicon transducer L (Kaldi's prepare_lang.sh steps, in Python).

A lexicon file has one pronunciation per line: ``word tok1 tok2 ...`` (lexicon.txt) or
``word prob tok1 tok2 ...`` (lexiconp.txt). Tokens are the acoustic model's units (phones,
characters or BPE pieces, as in tokens.txt); a word may have several pronunciations.

Disambiguation follows Kaldi's add_lex_disambig.pl: a pronunciation that is a proper prefix of
another, or that several words (or lines) share, gets ``#1``, ``#2``, ... appended (numbered per
pronunciation, in file order), so that L o G can be determinised. ``#0`` is kept for the
grammar's backoff arcs: L has a ``#0:#0`` self-loop on its loop state that lets them through.

L (Kaldi's make_lexicon_fst.py): a loop state, start and final; each pronunciation is a chain
from it back to it that emits the word on its first arc with cost -ln(prob). With optional
silence (``sil_token``), a start state enters the loop directly (cost -ln(1 - sil_prob)) or
through silence (-ln(sil_prob)), and every word ends either in the loop state or in the silence
state, whose silence arc leads back to the loop.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections import Counter

import numpy as np

from asrkit.decoders.fst import Fst, FstBuilder, SymbolTable
from asrkit.decoders.graph.tokens import TokenTable, graph_symbols


@dataclasses.dataclass
class Pronunciation:
    """One lexicon line: the word, its probability (1.0 in lexicon.txt) and its tokens."""

    word: str
    prob: float
    tokens: tuple[str, ...]
    disambig: int = 0  # k > 0: "#k" is appended in L


def _is_prob(field: str) -> bool:
    try:
        v = float(field)
    except ValueError:
        return False
    return 0.0 < v <= 1.0 and math.isfinite(v)


def read_lexicon(path: str | os.PathLike, with_probs: bool | None = None,
                 tokens: TokenTable | None = None) -> list[Pronunciation]:
    """Read lexicon.txt or lexiconp.txt. ``with_probs=None`` detects the probability column:
    present when the second field of every line is a number in (0, 1] that is not a known token.
    With ``tokens``, every pronunciation token must be a non-blank token. Errors (ValueError)
    name file:line; an unreadable file raises OSError."""
    from asrkit.utils.textfile import read_text

    path = os.fspath(path)
    rows: list[tuple[int, list[str]]] = []
    for lineno, line in enumerate(read_text(path).split("\n"), 1):
        fields = line.split()
        if fields:
            rows.append((lineno, fields))
    if not rows:
        raise ValueError(f"{path}: empty lexicon")
    if with_probs is None:
        with_probs = all(len(r) >= 3 and _is_prob(r[1]) and not (tokens and r[1] in tokens)
                         for _, r in rows)
    out = []
    for lineno, fields in rows:
        where = f"{path}:{lineno}"
        word = fields[0]
        if word.startswith("#") or word in ("<eps>", "<s>", "</s>"):
            raise ValueError(f"{where}: {word!r} is reserved and cannot be a lexicon word")
        prob = 1.0
        pron = fields[1:]
        if with_probs:
            if len(fields) < 2 or not _is_prob(fields[1]):
                raise ValueError(f"{where}: expected 'word prob tok1 ...' with prob in (0, 1]")
            prob = float(fields[1])
            pron = fields[2:]
        if not pron:
            raise ValueError(f"{where}: word {word!r} has an empty pronunciation")
        if tokens is not None:
            for t in pron:
                if t not in tokens:
                    raise ValueError(f"{where}: token {t!r} of word {word!r} is not in the token "
                                     "table")
                if tokens.index(t) == tokens.blank:
                    raise ValueError(f"{where}: word {word!r} uses the blank token {t!r}")
        out.append(Pronunciation(word, prob, tuple(pron)))
    return out


def add_disambig(lexicon: list[Pronunciation]) -> int:
    """Assign disambiguation numbers in place, as Kaldi's add_lex_disambig.pl; return the
    largest one used (0 when none is needed)."""
    count = Counter(p.tokens for p in lexicon)
    prefixes = set()
    for p in lexicon:
        for i in range(1, len(p.tokens)):
            prefixes.add(p.tokens[:i])
    last: dict[tuple[str, ...], int] = {}
    top = 0
    for p in lexicon:
        if p.tokens in prefixes or count[p.tokens] > 1:
            k = last.get(p.tokens, 0) + 1
            last[p.tokens] = k
            p.disambig = k
            top = max(top, k)
        else:
            p.disambig = 0
    return top


def word_symbols(words, extra=()) -> SymbolTable:
    """Kaldi-style words.txt: ``<eps>`` 0, the words sorted, then ``#0``, ``<s>``, ``</s>``
    (``extra`` words, e.g. from the LM, are merged in before sorting)."""
    table = SymbolTable(name="words")
    for w in sorted((set(words) | set(extra)) - {"<eps>", "<s>", "</s>", "#0"}):
        table.add_symbol(w)
    for w in ("#0", "<s>", "</s>"):
        table.add_symbol(w)
    return table


def lexicon_fst(lexicon: list[Pronunciation], tokens: TokenTable, words: SymbolTable,
                num_disambig: int, sil_token: str | None = None, sil_prob: float = 0.5,
                dtype=np.float32) -> Fst:
    """The lexicon transducer L with disambiguation symbols (L_disambig in Kaldi): input labels
    are graph token labels (``graph_symbols(tokens, num_disambig + 1)``, ``#k`` included), output
    labels word ids from ``words``. ``num_disambig`` is ``add_disambig``'s result."""
    isyms = graph_symbols(tokens, num_disambig + 1)
    b = FstBuilder(isymbols=isyms, osymbols=words)
    tok_id = {s: isyms.id(s) for s in tokens.symbols}
    if sil_token is not None:
        if sil_token not in tok_id:
            raise ValueError(f"silence token {sil_token!r} is not in the token table")
        if not 0.0 < sil_prob < 1.0:
            raise ValueError(f"sil_prob must be in (0, 1), got {sil_prob}")
        start, loop, sil = b.add_state(), b.add_state(), b.add_state()
        sil_cost, nosil_cost = -math.log(sil_prob), -math.log(1.0 - sil_prob)
        b.add_arc(start, loop, 0, 0, nosil_cost)
        b.add_arc(start, sil, 0, 0, sil_cost)
        b.add_arc(sil, loop, tok_id[sil_token], 0, 0.0)
    else:
        loop = start = b.add_state()
        sil = -1
        sil_cost = nosil_cost = 0.0
    b.set_start(start)
    b.set_final(loop, 0.0)
    for p in lexicon:
        try:
            wid = words.id(p.word)
        except KeyError:
            raise ValueError(f"word {p.word!r} is not in the word table") from None
        labels = [tok_id[t] for t in p.tokens]
        if p.disambig:
            labels.append(isyms.id(f"#{p.disambig}"))
        pron_cost = -math.log(p.prob)
        cur = loop
        for i, lab in enumerate(labels[:-1]):
            nxt = b.add_state()
            b.add_arc(cur, nxt, lab, wid if i == 0 else 0, pron_cost if i == 0 else 0.0)
            cur = nxt
        first = len(labels) == 1
        olab = wid if first else 0
        extra = pron_cost if first else 0.0
        if sil >= 0:
            b.add_arc(cur, loop, labels[-1], olab, extra + nosil_cost)
            b.add_arc(cur, sil, labels[-1], olab, extra + sil_cost)
        else:
            b.add_arc(cur, loop, labels[-1], olab, extra)
    # lets the grammar's #0 backoff arcs through
    b.add_arc(loop, loop, isyms.id("#0"), words.id("#0"), 0.0)
    return b.compile(dtype=dtype)
