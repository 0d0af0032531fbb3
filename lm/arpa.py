"""ARPA back-off model files: reading (ours, KenLM's, SRILM's) and writing.

The format (as SRILM's ``ngram-format(5)``)::

    \\data\\
    ngram 1=3
    ngram 2=2

    \\1-grams:
    -1.0\\t<unk>\\t-0.3
    ...

    \\end\\

Fields are separated by any whitespace; a back-off weight is optional (absent = 0) and never
allowed on the highest order. Lines before ``\\data\\`` (e.g. lmplz's ``# Input file`` comments)
are ignored. ``.gz`` files are read and written compressed. Every error names the file and line.
"""

from __future__ import annotations

import gc
import gzip
import itertools
import os
import re
import zlib

import numpy as np

from asrkit.lm.hashing import DuplicateNgramError
from asrkit.lm.vocab import UNK
from asrkit.utils import atomic_open, progress

UNK_MISSING_LOG10 = -100.0  # KenLM's log10 p(<unk>) for a model that lists no <unk>

_COUNT_RE = re.compile(r"^ngram\s+(\d+)\s*=\s*(\d+)$")
_SECTION_RE = re.compile(r"^\\(\d+)-grams:$")


class ArpaFormatError(ValueError):
    """A malformed ARPA file; the message starts with ``path:line:``."""


def _open_text(path: str | os.PathLike):
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def read_arpa(path: str | os.PathLike):
    """Read an ARPA file into an ``NgramLM`` (n-grams keep the file's order for listing)."""
    # a section is held as one list of split lines: millions of small lists, which the cyclic
    # garbage collector would otherwise rescan again and again (none of them form cycles)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _read_arpa(path)
    finally:
        if was_enabled:
            gc.enable()


def _read_arpa(path: str | os.PathLike):
    from asrkit.lm.model import NgramLM

    path = os.fspath(path)
    name = path

    def fail(lineno: int, msg: str):
        raise ArpaFormatError(f"{name}:{lineno}: {msg}" if lineno else f"{name}: {msg}")

    first_lines: list[int] = []  # line of each order's first n-gram
    with _open_text(path) as f:
        lines = enumerate(f, start=1)
        lineno = 0
        try:
            # header
            for lineno, line in lines:  # noqa: B007 (lineno is read after the loop)
                if line.strip() == "\\data\\":
                    break
            else:
                fail(lineno, "no \\data\\ line: not an ARPA file")
            counts: list[int] = []
            for lineno, line in lines:
                s = line.strip()
                if not s:
                    if counts:
                        break
                    continue
                m = _COUNT_RE.match(s)
                if m is None:
                    if _SECTION_RE.match(s) and counts:
                        fail(lineno, "expected an empty line after the ngram counts")
                    fail(lineno, f"bad count header {s!r}: expected 'ngram N=COUNT'")
                n, c = int(m.group(1)), int(m.group(2))
                if n != len(counts) + 1:
                    fail(lineno, f"bad count header {s!r}: expected order {len(counts) + 1}")
                counts.append(c)
            if not counts:
                fail(lineno, "no 'ngram N=COUNT' lines after \\data\\")
            order = len(counts)

            vocab: list[str] = []
            ids: dict[str, int] = {}
            tables = []
            bar = progress(total=sum(counts), desc=f"reading {os.path.basename(name)}",
                           unit="ngram")
            for n in range(1, order + 1):
                # section header (skipping blank lines)
                for lineno, line in lines:
                    s = line.strip()
                    if not s:
                        continue
                    m = _SECTION_RE.match(s)
                    if m is None or int(m.group(1)) != n:
                        fail(lineno, f"expected \\{n}-grams: section, got {s[:60]!r}")
                    break
                else:
                    fail(lineno, f"file ends before the \\{n}-grams: section")
                section_line = lineno
                first_lines.append(section_line + 1)
                expected = counts[n - 1]
                block: list[list[str]] = []
                ended_by = None
                for lineno, line in lines:
                    fields = line.split()
                    if not fields:
                        break
                    if fields[0][0] == "\\":
                        ended_by = (lineno, line.strip())
                        break
                    block.append(fields)
                    if len(block) > expected:
                        fail(lineno, f"more {n}-grams than the {expected} announced in the "
                             "header (n-gram count mismatch)")
                k = len(block)
                words, probs, bows = _parse_block(block, n, order, section_line + 1, ids, vocab,
                                                  fail)
                bar.update(k)
                if k != expected:
                    fail(lineno if ended_by is None else ended_by[0],
                         f"n-gram count mismatch: header says {expected} {n}-grams, the section "
                         f"starting at line {section_line} has {k}")
                tables.append([words, probs, bows])
                if ended_by is not None:
                    if n == order and ended_by[1] == "\\end\\":
                        break
                    fail(ended_by[0], f"expected an empty line after the {n}-grams, got "
                         f"{ended_by[1][:60]!r}")
            else:
                pass
            bar.close()
            if not (ended_by is not None and ended_by[1] == "\\end\\"):
                for lineno, line in lines:
                    s = line.strip()
                    if not s:
                        continue
                    if s == "\\end\\":
                        break
                    fail(lineno, f"expected \\end\\, got {s[:60]!r}")
                else:
                    fail(lineno, "missing \\end\\ (file truncated?)")
        except UnicodeDecodeError as e:
            raise ArpaFormatError(f"{name}:{lineno + 1}: not UTF-8 ({e.reason})") from None
        except (EOFError, zlib.error, gzip.BadGzipFile) as e:
            raise ArpaFormatError(f"{name}:{lineno + 1}: cannot decompress ({e}); the gzip "
                                  "file is truncated or damaged") from None

    if UNK not in ids:
        vocab.append(UNK)
        w, p, b = tables[0]
        tables[0] = [np.append(w, [[len(vocab) - 1]], axis=0).astype(np.int32),
                     np.append(p, np.float32(UNK_MISSING_LOG10)), np.append(b, np.float32(0))]
    try:
        return NgramLM.from_tables(vocab, [tuple(t) for t in tables], arpa_order=True,
                                   source=name)
    except DuplicateNgramError as e:
        n = len(e.words)
        rows = np.flatnonzero((tables[n - 1][0] == np.asarray(e.words)).all(axis=1))
        text = " ".join(vocab[i] for i in e.words)
        fail(first_lines[n - 1] + int(rows[-1]), f"{n}-gram {text!r} is listed twice (also "
             f"at line {first_lines[n - 1] + int(rows[0])})")


def _parse_block(block: list[list[str]], n: int, order: int, first_line: int,
                 ids: dict[str, int], vocab: list[str], fail):
    """Convert the split lines of one order's section (the first at ``first_line``) to
    ``(words int32 [M, n], log10 prob float32 [M], log10 backoff float32 [M])``.

    For unigrams, fills ``ids`` and ``vocab``. Calls ``fail(lineno, message)`` on bad lines.
    """
    k = len(block)
    lens = np.fromiter(map(len, block), dtype=np.int64, count=k)
    ok = (lens == n + 1) | ((lens == n + 2) & (n < order))
    if not ok.all():
        i = int(np.argmin(ok))
        want = f"{n + 1}" if n == order else f"{n + 1} or {n + 2}"
        fail(first_line + i, f"wrong number of fields for a {n}-gram: got {lens[i]}, expected "
             f"{want} (prob, {n} word{'s' * (n > 1)}{'' if n == order else ', optional backoff'})")
    try:
        probs64 = np.array([f[0] for f in block], dtype=np.float64)
        bows64 = np.array([f[n + 1] if len(f) == n + 2 else "0" for f in block],
                          dtype=np.float64)
    except ValueError as e:
        for i, f in enumerate(block):
            for x in (f[0], f[-1] if len(f) == n + 2 else "0"):
                if not _is_float(x):
                    fail(first_line + i, f"non-numeric probability or backoff {x!r}")
        fail(first_line, f"cannot read the numbers of the {n}-grams ({e})")
    with np.errstate(over="ignore"):
        probs, bows = probs64.astype(np.float32), bows64.astype(np.float32)
    # log10 p: at most 0 (p <= 1), -inf allowed (p = 0); back-offs finite in float32
    bad_prob = np.isnan(probs) | (probs64 > 0)
    bad_bow = ~np.isfinite(bows)
    if bad_prob.any() or bad_bow.any():
        i = int(np.argmax(bad_prob | bad_bow))
        if bad_prob[i]:
            fail(first_line + i, f"log10 probability {block[i][0]!r} is not a number <= 0")
        fail(first_line + i, f"back-off weight {block[i][-1]!r} is not a finite number")
    words = np.empty((k, n), dtype=np.int32)
    if n == 1:
        col = [f[1] for f in block]
        ids.update(zip(col, range(len(vocab), len(vocab) + k)))
        if len(ids) != len(vocab) + k:
            seen: set[str] = set(vocab)
            for i, w in enumerate(col):
                if w in seen:
                    fail(first_line + i, f"unigram {w!r} is listed twice")
                seen.add(w)
        words[:, 0] = np.arange(len(vocab), len(vocab) + k)
        vocab.extend(col)
    else:
        for j in range(n):
            col = [f[1 + j] for f in block]
            words[:, j] = np.fromiter(map(ids.get, col, itertools.repeat(-1)), dtype=np.int32,
                                      count=k)
            missing = np.flatnonzero(words[:, j] < 0)
            if len(missing):
                i = int(missing[0])
                fail(first_line + i, f"word {col[i]!r} is not among the unigrams")
    return words, probs, bows


def _is_float(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def _fmt(values: np.ndarray) -> list[str]:
    """Shortest strings that read back as the same float32 values."""
    return [str(v) for v in np.asarray(values, dtype=np.float32)]


def format_arpa_lines(lm, n: int, chunk: int = 1 << 16):
    """Yield the ARPA lines (with newlines) of the order-``n`` section of ``lm``, in chunks."""
    words, prob, bow = lm.ngram_arrays(n)
    vocab = lm.vocab
    top = n == lm.order
    for lo in range(0, len(prob), chunk):
        w = words[lo: lo + chunk].tolist()
        p = _fmt(prob[lo: lo + chunk])
        b = bow[lo: lo + chunk]
        bs = _fmt(b)
        out = []
        for i, ws in enumerate(w):
            text = " ".join([vocab[x] for x in ws])
            if top or b[i] == 0:
                out.append(f"{p[i]}\t{text}\n")
            else:
                out.append(f"{p[i]}\t{text}\t{bs[i]}\n")
        yield "".join(out)


def write_arpa(lm, path: str | os.PathLike, comment: str | None = None) -> None:
    """Write ``lm`` as ARPA text to ``path`` atomically (gzip when it ends in ``.gz``).

    Probabilities are written as the shortest decimals that read back as the same float32
    values; back-off weights of 0 are omitted (as lmplz does).
    """
    path = os.fspath(path)
    counts = lm.counts
    with atomic_open(path, "wb") as raw:
        f = gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) if path.endswith(".gz") else raw
        try:
            if comment:
                f.write("".join(f"# {c}\n" for c in comment.splitlines()).encode())
            header = ["\\data\\\n"] + [f"ngram {n}={c}\n" for n, c in enumerate(counts, 1)]
            f.write(("".join(header) + "\n").encode())
            bar = progress(total=sum(counts), desc=f"writing {os.path.basename(path)}",
                           unit="ngram")
            for n in range(1, lm.order + 1):
                f.write(f"\\{n}-grams:\n".encode())
                for block in format_arpa_lines(lm, n):
                    f.write(block.encode("utf-8"))
                    bar.update(block.count("\n"))
                f.write(b"\n")
            bar.close()
            f.write(b"\\end\\\n")
        finally:
            if f is not raw:
                f.close()
