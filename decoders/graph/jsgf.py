"""Command grammars in a JSGF-like notation, compiled to a deterministic, minimal acceptor G.

    call (mum | dad) [now]          one sentence pattern per line (the lines are alternatives)
    <name> = john | /2/ mary        a rule, used as <name>; "public <x> = ..." marks top rules
    (yes | no)+  please*            + one or more, * zero or more; [x] optional; (a | b) group
    /w/ before an alternative       relative weight (JSGF): cost -ln(w / sum of the weights)

``//`` and ``#`` start comments; JSGF headers (``#JSGF V1.0;``, ``grammar name;``) are skipped.
Statements end at a newline, or at ``;`` when the file uses semicolons. The sentences are the
public rules if there are any, otherwise the lines that are not rule definitions, otherwise the
first rule. Rules may refer to rules defined anywhere, but not recursively.
"""

from __future__ import annotations

import math
import os
import re

import numpy as np

from asrkit.decoders.fst import (
    Fst,
    SymbolTable,
    closure,
    concat,
    determinize,
    minimize,
    rmepsilon,
    union,
)

_TOKEN = re.compile(r"\s*(/[^/]*/|<[^<>\s]+>|[()\[\]|*+=]|[^\s()\[\]|*+=<>/]+)")


class GrammarError(ValueError):
    """A syntax error or unknown word/rule, with the grammar's name and line in the message."""


def _tokenize(text: str, where: str) -> list[str]:
    tokens, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise GrammarError(f"{where}: cannot parse near {text[pos:pos + 20]!r}")
        tokens.append(m.group(1))
        pos = m.end()
    return tokens


class _Parser:
    """Recursive descent over one statement's tokens, building machines directly."""

    def __init__(self, tokens, where, words, rules, semiring, dtype):
        self.toks, self.pos, self.where = tokens, 0, where
        self.words, self.rules, self.semiring, self.dtype = words, rules, semiring, dtype

    def peek(self):
        return self.toks[self.pos] if self.pos < len(self.toks) else None

    def take(self, expected=None):
        tok = self.peek()
        if tok is None or (expected is not None and tok != expected):
            raise GrammarError(f"{self.where}: expected {expected or 'more input'!r}, got "
                               f"{tok or 'end of line'!r}")
        self.pos += 1
        return tok

    def single(self, label: int, cost: float = 0.0) -> Fst:
        return Fst(2, 0, [np.inf, 0.0], [0], [1], [label], [label], [cost], self.semiring,
                   self.words, self.words, dtype=self.dtype)

    def empty_string(self, cost: float = 0.0) -> Fst:
        return Fst(1, 0, [cost], [], [], [], [], [], self.semiring, self.words, self.words,
                   dtype=self.dtype)

    def expansion(self) -> Fst:
        alts = [self.sequence()]
        while self.peek() == "|":
            self.take("|")
            alts.append(self.sequence())
        weights = [w for w, _ in alts]
        if all(w is None for w in weights):
            fsts = [f for _, f in alts]
        else:
            if any(w is None for w in weights):
                raise GrammarError(f"{self.where}: either all alternatives have /weights/ or "
                                   "none")
            total = sum(weights)
            fsts = [concat(self.empty_string(-math.log(w / total)), f) for w, f in alts]
        out = fsts[0]
        for f in fsts[1:]:
            out = union(out, f)
        return out

    def sequence(self):
        weight = None
        tok = self.peek()
        if tok is not None and tok.startswith("/"):
            self.take()
            try:
                weight = float(tok.strip("/"))
            except ValueError:
                raise GrammarError(f"{self.where}: weight {tok!r} is not a number") from None
            if not (math.isfinite(weight) and weight > 0):
                raise GrammarError(f"{self.where}: weight {tok!r} must be a finite number > 0")
        out = self.empty_string()
        while self.peek() not in (None, "|", ")", "]"):
            out = concat(out, self.item())
        return weight, out

    def item(self) -> Fst:
        tok = self.take()
        if tok == "(":
            f = self.expansion()
            self.take(")")
        elif tok == "[":
            f = union(self.expansion(), self.empty_string())
            self.take("]")
        elif tok.startswith("<"):
            name = tok[1:-1]
            if name not in self.rules:
                raise GrammarError(f"{self.where}: unknown rule <{name}>")
            f = self.rules[name]()
        elif tok in ("|", ")", "]", "*", "+", "=") or tok.startswith("/"):
            raise GrammarError(f"{self.where}: unexpected {tok!r}")
        else:
            wid = self.words.get(tok)
            if wid is None:
                raise GrammarError(f"{self.where}: word {tok!r} is not in the word table")
            f = self.single(wid)
        while self.peek() in ("*", "+"):
            f = closure(f, "star" if self.take() == "*" else "plus")
        return f


def _statements(text: str, name: str):
    """(line number, text) per statement, comments and JSGF headers removed."""
    lines = []
    for lineno, line in enumerate(text.split("\n"), 1):
        line = re.sub(r"//.*", "", line)
        stripped = line.strip()
        if stripped.startswith("#") or re.match(r"grammar\s+[\w.]+\s*;?$", stripped):
            continue
        lines.append((lineno, line))
    if any(";" in line for _, line in lines):
        stmts, cur, first = [], [], None
        for lineno, line in lines:
            for k, part in enumerate(line.split(";")):
                if part.strip():
                    first = first or lineno
                    cur.append(part)
                if k < line.count(";"):
                    if cur:
                        stmts.append((first, " ".join(cur)))
                    cur, first = [], None
        if cur and " ".join(cur).strip():
            stmts.append((first, " ".join(cur)))
        return stmts
    return [(n, line) for n, line in lines if line.strip()]


def grammar_fst(text: str, words: SymbolTable, name: str = "<grammar>",
                semiring: str = "tropical", dtype=np.float32) -> Fst:
    """Compile grammar ``text`` (see the module docstring) to a deterministic, minimal,
    epsilon-free acceptor over ``words``. Errors (GrammarError) name ``name`` and the line."""
    rule_defs: dict[str, tuple[str, list[str], bool]] = {}
    sentences: list[tuple[str, list[str]]] = []
    for lineno, stmt in _statements(text, name):
        where = f"{name}:{lineno}"
        m = re.match(r"\s*(public\s+)?<([^<>\s]+)>\s*=(.*)$", stmt, re.S)
        if m:
            rname = m.group(2)
            if rname in rule_defs:
                raise GrammarError(f"{where}: rule <{rname}> defined twice")
            rule_defs[rname] = (where, _tokenize(m.group(3), where), bool(m.group(1)))
        else:
            sentences.append((where, _tokenize(stmt, where)))
    cache: dict[str, Fst] = {}
    active: set[str] = set()
    rules = {}

    def make_rule(rname):
        def build():
            if rname in cache:
                return cache[rname]
            if rname in active:
                raise GrammarError(f"{rule_defs[rname][0]}: rule <{rname}> is recursive")
            active.add(rname)
            where, toks, _ = rule_defs[rname]
            cache[rname] = parse(toks, where)
            active.discard(rname)
            return cache[rname]
        return build

    def parse(toks, where) -> Fst:
        p = _Parser(toks, where, words, rules, semiring, dtype)
        f = p.expansion()
        if p.peek() is not None:
            raise GrammarError(f"{where}: unexpected {p.peek()!r}")
        return f

    for rname in rule_defs:
        rules[rname] = make_rule(rname)
    public = [r for r, (_, _, pub) in rule_defs.items() if pub]
    if public:
        tops = [rules[r]() for r in public]
    elif sentences:
        tops = [parse(toks, where) for where, toks in sentences]
    elif rule_defs:
        tops = [rules[next(iter(rule_defs))]()]
    else:
        raise GrammarError(f"{name}: the grammar is empty")
    out = tops[0]
    for f in tops[1:]:
        out = union(out, f)
    return minimize(determinize(rmepsilon(out)))


def read_grammar(path: str | os.PathLike, words: SymbolTable, dtype=np.float32) -> Fst:
    """Compile the grammar file at ``path`` (errors name the file and line; an unreadable
    file raises OSError)."""
    from asrkit.utils.textfile import read_text

    name = os.fspath(path)
    text = read_text(path)
    try:
        return grammar_fst(text, words, name=name, dtype=dtype)
    except RecursionError:
        raise GrammarError(f"{name}: the grammar nests groups or rules too deeply") from None
