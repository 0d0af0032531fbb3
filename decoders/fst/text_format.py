"""OpenFst's AT&T text format, as read by ``fstcompile`` and written by ``fstprint``.

Arc lines are ``src dst ilabel olabel [weight]`` (acceptors: ``src dst label [weight]``), final
lines ``state [weight]``; the state on the first line is the start state (as in fstcompile).
Labels are symbols when a table is given, integers otherwise. A weight of 0 (one) is omitted
on output, as fstprint does; non-final states have no final line.
"""

from __future__ import annotations

import math
import os

import numpy as np

from asrkit.decoders.fst.fst import Fst
from asrkit.decoders.fst.semiring import TROPICAL
from asrkit.decoders.fst.symbols import MAX_ID, SymbolTable

# a state id may run ahead of the largest seen so far by at most this much (fstprint output
# and hand-written files number states densely; a typo'd id must not allocate gigabytes)
MAX_STATE_GAP = 1 << 20


def _parse_weight(field: str, where: str) -> float:
    try:
        w = float(field)  # also takes "inf"/"Infinity" (the semiring zero)
    except ValueError:
        raise ValueError(f"{where}: weight {field!r} is not a number") from None
    if math.isnan(w) or w == -math.inf:  # not members of the tropical or log semiring
        raise ValueError(f"{where}: weight {field!r} is not a valid weight (NaN and -inf are "
                         "not)")
    return w


def _parse_id(field: str, where: str, what: str) -> int:
    try:
        v = int(field)
    except ValueError:
        raise ValueError(f"{where}: {what} {field!r} is not an integer") from None
    if not 0 <= v <= MAX_ID:
        raise ValueError(f"{where}: {what} {v} is outside 0..{MAX_ID}")
    return v


def _label_parser(table: SymbolTable | None, side: str):
    if table is None:
        def parse(field: str, where: str) -> int:
            return _parse_id(field, where, f"{side} label (no {side} symbol table given)")
    else:
        def parse(field: str, where: str) -> int:
            v = table.get(field)
            if v is None:
                raise ValueError(f"{where}: {side} symbol {field!r} not in the symbol table "
                                 f"{table.name or ''}".rstrip())
            return v
    return parse


def fst_from_text(text: str, isymbols: SymbolTable | None = None,
                  osymbols: SymbolTable | None = None, acceptor: bool = False,
                  semiring: str = TROPICAL, dtype=np.float32, name: str = "<string>") -> Fst:
    """Parse AT&T text into an Fst. With ``acceptor=True`` arc lines have one label and
    ``osymbols`` defaults to ``isymbols``. Errors name ``name`` and the line number."""
    if acceptor and osymbols is None:
        osymbols = isymbols
    parse_i = _label_parser(isymbols, "input")
    parse_o = _label_parser(osymbols, "output")
    src, dst, ilab, olab, wts = [], [], [], [], []
    finals: dict[int, float] = {}
    start = -1
    max_state = -1
    narc_fields = 3 if acceptor else 4
    for lineno, line in enumerate(text.split("\n"), 1):
        fields = line.split()
        if not fields:
            continue
        where = f"{name}:{lineno}"
        states = [_parse_id(f, where, "state id")
                  for f in fields[:2 if len(fields) >= narc_fields else 1]]
        if max(states) > max_state + MAX_STATE_GAP:
            # ids are kept, so a stray huge id would allocate a state array of that size
            raise ValueError(f"{where}: state id {max(states)} is far beyond the states listed "
                             f"so far (up to {max_state}); number the states densely")
        if len(fields) in (1, 2):
            s = states[0]
            w = _parse_weight(fields[1], where) if len(fields) == 2 else 0.0
            finals[s] = w
            if start < 0:
                start = s
            max_state = max(max_state, s)
        elif len(fields) in (narc_fields, narc_fields + 1):
            s, d = states
            i = parse_i(fields[2], where)
            o = i if acceptor else parse_o(fields[3], where)
            w = _parse_weight(fields[narc_fields], where) if len(fields) > narc_fields else 0.0
            if start < 0:
                start = s
            src.append(s)
            dst.append(d)
            ilab.append(i)
            olab.append(o)
            wts.append(w)
            max_state = max(max_state, s, d)
        else:
            kind = "acceptor" if acceptor else "transducer"
            raise ValueError(f"{where}: expected {narc_fields} or {narc_fields + 1} fields on a "
                             f"{kind} arc line or 1-2 on a final line, got {len(fields)}")
    n = max_state + 1
    final = np.full(n, np.inf)
    for s, w in finals.items():
        final[s] = w
    return Fst(n, start if n else -1, final, src, dst, ilab, olab, np.array(wts, np.float64),
               semiring, isymbols, osymbols, dtype=dtype)


def _format_weight(w: float, dtype) -> str:
    if w == np.inf:
        return "Infinity"
    return f"{w:.9g}" if dtype == np.float32 else repr(float(w))


def fst_to_text(fst: Fst, isymbols: SymbolTable | None = None,
                osymbols: SymbolTable | None = None, acceptor: bool = False) -> str:
    """Print ``fst`` as AT&T text, start state's arcs first (fstprint order). ``isymbols`` and
    ``osymbols`` default to the machine's own tables; None everywhere prints integers."""
    isymbols = isymbols if isymbols is not None else fst.isymbols
    osymbols = osymbols if osymbols is not None else fst.osymbols
    if acceptor and not fst.is_acceptor:
        raise ValueError("acceptor=True but the machine has arcs with ilabel != olabel")
    if fst.start < 0:
        return ""

    def namer(table):
        if table is None:
            return str
        return table.symbol

    iname, oname = namer(isymbols), namer(osymbols)
    dtype = fst.dtype
    order = [fst.start] + [s for s in range(fst.num_states) if s != fst.start]
    lines = []
    il, ol, ws, ds = (fst.ilabel.tolist(), fst.olabel.tolist(), fst.weight.tolist(),
                      fst.dst.tolist())
    fin = fst.final.tolist()
    offs = fst.offsets.tolist()
    for s in order:
        for a in range(offs[s], offs[s + 1]):
            parts = [str(s), str(ds[a]), iname(il[a])]
            if not acceptor:
                parts.append(oname(ol[a]))
            if ws[a] != 0.0:
                parts.append(_format_weight(ws[a], dtype))
            lines.append("\t".join(parts))
        if fin[s] != np.inf:
            lines.append(str(s) if fin[s] == 0.0 else f"{s}\t{_format_weight(fin[s], dtype)}")
    return "\n".join(lines) + "\n" if lines else ""


def read_fst_text(path: str | os.PathLike, isymbols: SymbolTable | None = None,
                  osymbols: SymbolTable | None = None, acceptor: bool = False,
                  semiring: str = TROPICAL, dtype=np.float32) -> Fst:
    """Read an AT&T text file; format errors (ValueError) name the file and line, an
    unreadable file raises OSError."""
    from asrkit.utils.textfile import read_text

    return fst_from_text(read_text(path), isymbols, osymbols, acceptor, semiring, dtype,
                         name=os.fspath(path))


def write_fst_text(fst: Fst, path: str | os.PathLike, isymbols: SymbolTable | None = None,
                   osymbols: SymbolTable | None = None, acceptor: bool = False) -> None:
    """Write ``fst`` as AT&T text, atomically."""
    from asrkit.utils import atomic_write_text

    atomic_write_text(path, fst_to_text(fst, isymbols, osymbols, acceptor))
