"""Kaldi tables: archives (``.ark``) and script files (``.scp``), read and written as Kaldi does.

Values are numpy arrays in Kaldi's binary holders, parsed and written by ``kaldi_io``:

- float32 / float64 2-D -> ``Matrix<float>`` (``\\0BFM ``) / ``Matrix<double>`` (``\\0BDM ``);
  compressed ``CM `` matrices are read too;
- float32 / float64 1-D -> ``Vector<float>`` (``\\0BFV ``) / ``Vector<double>`` (``\\0BDV ``);
- int32 1-D -> ``std::vector<int32>`` (alignments).

An archive is ``key value key value ...``; a script file is ``key rxfilename`` lines where the
rxfilename is usually ``/abs/path/feats.ark:OFFSET`` (the byte offset of the value, just after
``key ``), optionally followed by a Kaldi row/column range ``[10:19]`` or ``[10:19,0:12]``.

Specifiers follow Kaldi: read ``scp:feats.scp``, ``ark:feats.ark``, ``ark:-`` (stdin),
``ark:gunzip -c x.ark.gz |``; write ``ark:out.ark``, ``ark,scp:out.ark,out.scp`` (the archive
file comes first whatever the option order), ``ark,t:out.txt`` (text), ``ark:-`` (stdout),
``ark:| gzip -c > x.gz``. Options Kaldi accepts and that change nothing here (``p``, ``o``,
``s``, ``cs``, ``f``, ``nf``, ``b``) are allowed. Archives written to files are atomic: the data
goes to a temporary file renamed into place on ``close()``, and the script file is written
after the archive.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import struct
import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import IO, NamedTuple

import numpy as np

from asrkit.io.pipes import PipeError, PipeReader
from asrkit.utils import atomic_open

_READ_OPTIONS = {"o", "no", "s", "ns", "cs", "ncs", "p", "np", "b", "t", "bg"}
_WRITE_OPTIONS = {"t", "b", "f", "nf", "p"}
_RANGE = re.compile(r"^(.*)\[([0-9:,\s]*)\]$")
_OFFSET = re.compile(r"^(.*):(\d+)$")


class TableError(ValueError):
    """A malformed specifier, script file or archive; the message names the file and key/line."""


_kaldi_io_module = None


def kaldi_io():
    """Return the ``kaldi_io`` module, imported without its KALDI_ROOT banner.

    kaldi_io prints a warning on import when ``$KALDI_ROOT`` is unset and prepends
    ``$KALDI_ROOT/src/*bin`` to ``$PATH``; we keep a user's KALDI_ROOT but do not invent one.
    """
    global _kaldi_io_module
    if _kaldi_io_module is None:
        had_root = "KALDI_ROOT" in os.environ
        saved_path = os.environ.get("PATH", "")
        with contextlib.redirect_stderr(io.StringIO()):
            import kaldi_io as module
        if not had_root:
            os.environ.pop("KALDI_ROOT", None)
            os.environ["PATH"] = saved_path
        _kaldi_io_module = module
    return _kaldi_io_module


# --------------------------------------------------------------------------- specifiers

def parse_rspecifier(rspecifier: str) -> tuple[str, set[str], str]:
    """Split a read specifier into ``(kind, options, target)``, kind "ark" or "scp"."""
    m = re.match(r"^([a-z]+(?:,[a-z]+)*):(.*)$", rspecifier, re.S)
    if not m:
        raise TableError(f"{rspecifier!r}: not a table rspecifier (expected scp:FILE or ark:FILE)")
    words = m.group(1).split(",")
    kinds = [w for w in words if w in ("ark", "scp")]
    options = set(words) - {"ark", "scp"}
    if len(kinds) != 1 or not options <= _READ_OPTIONS:
        raise TableError(f"{rspecifier!r}: bad rspecifier options {m.group(1)!r}")
    target = m.group(2).strip()
    if not target:
        raise TableError(f"{rspecifier!r}: no file named")
    return kinds[0], options, target


def parse_wspecifier(wspecifier: str) -> tuple[str | None, str | None, set[str]]:
    """Split a write specifier into ``(ark_target, scp_path, options)``.

    ``ark,scp:a.ark,a.scp`` gives both; ``ark:a.ark`` no script; ``scp:a.scp`` is not allowed
    for writing values (Kaldi writes scp-only tables only for wav/feature *paths*).
    """
    m = re.match(r"^([a-z]+(?:,[a-z]+)*):(.*)$", wspecifier, re.S)
    if not m:
        raise TableError(f"{wspecifier!r}: not a table wspecifier (expected ark:FILE or "
                         "ark,scp:FILE.ark,FILE.scp)")
    words = m.group(1).split(",")
    options = set(words) - {"ark", "scp"}
    if "ark" not in words or not options <= _WRITE_OPTIONS:
        raise TableError(f"{wspecifier!r}: bad wspecifier options {m.group(1)!r}")
    target = m.group(2).strip()
    if "scp" in words:
        if target.startswith("|") or "," not in target:
            raise TableError(f"{wspecifier!r}: ark,scp needs two files, FILE.ark,FILE.scp")
        ark, scp = (s.strip() for s in target.split(",", 1))
        if ark == "-" or not ark or not scp:
            raise TableError(f"{wspecifier!r}: ark,scp needs a real archive file and a script "
                             "file")
        return ark, scp, options
    if not target:
        raise TableError(f"{wspecifier!r}: no file named")
    return target, None, options


# --------------------------------------------------------------------------- value parsing

_MAX_KEY_BYTES = 1 << 16
_MAX_TOKEN_BYTES = 8
_READ_CHUNK = 1 << 24
_BINARY_TYPES = {b"FM": ("<f4", 2), b"DM": ("<f8", 2), b"FV": ("<f4", 1), b"DV": ("<f8", 1)}


def _bytes_left(fd) -> int | None:
    """Bytes from the position of ``fd`` to the end of its file; None for a stream."""
    try:
        return os.fstat(fd.fileno()).st_size - fd.tell()
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return None


def _read_exact(fd, n: int, where: str, what: str = "data") -> bytearray:
    """Read exactly ``n`` bytes into a (writable) bytearray, or raise TableError.

    On a file the size is checked before anything is allocated; on a stream the bytes come in
    chunks, so a corrupt size cannot make us allocate more than the stream holds.
    """
    left = _bytes_left(fd)
    if left is not None and n > left:
        raise TableError(f"{where}: unexpected end of file: {what} needs {n} bytes, only {left} "
                         "left (truncated archive or corrupt header)")
    out = bytearray()
    while len(out) < n:
        chunk = fd.read(min(n - len(out), _READ_CHUNK))
        if not chunk:
            raise TableError(f"{where}: unexpected end of data: {what} needs {n} bytes, got "
                             f"{len(out)} (truncated archive or corrupt header)")
        out += chunk
    return out


def _read_int32(fd, where: str, what: str) -> int:
    """Kaldi's binary WriteBasicType<int32>: a size byte 4, then the little-endian int32."""
    data = _read_exact(fd, 5, where, what)
    if data[0] != 4:
        raise TableError(f"{where}: corrupt {what}: expected an int32 (size byte 4), got size "
                         f"byte {data[0]}")
    return struct.unpack_from("<i", data, 1)[0]


def _read_dim(fd, where: str, what: str) -> int:
    n = _read_int32(fd, where, what)
    if n < 0:
        raise TableError(f"{where}: negative {what} {n}")
    return n


def _read_token(fd, where: str) -> bytes:
    """A Kaldi token after the binary marker: non-space bytes ended by one space."""
    token = bytearray()
    while True:
        c = fd.read(1)
        if not c:
            raise TableError(f"{where}: unexpected end of data in the object header")
        if c == b" ":
            return bytes(token)
        token += c
        if len(token) > _MAX_TOKEN_BYTES:
            raise TableError(f"{where}: unknown Kaldi object header {bytes(token)!r}")


def _read_binary_array(fd, token: bytes, where: str) -> np.ndarray:
    dtype, ndim = _BINARY_TYPES[token]
    name = token.decode()
    if ndim == 2:
        rows = _read_dim(fd, where, f"{name} row count")
        cols = _read_dim(fd, where, f"{name} column count")
        shape = (rows, cols)
    else:
        shape = (_read_dim(fd, where, f"{name} dimension"),)
    count = int(np.prod(shape, dtype=object))
    data = _read_exact(fd, count * np.dtype(dtype).itemsize, where, f"a {'x'.join(map(str, shape))}"
                       f" {name} object")
    return np.frombuffer(data, dtype=dtype).reshape(shape).astype(dtype[1:], copy=False)


def _read_int_vector(fd, where: str) -> np.ndarray:
    """Kaldi's BasicVectorHolder<int32> (alignments): an int32 length, then (size byte 4,
    int32) pairs; ``fd`` is positioned just after the length's size byte."""
    n = struct.unpack("<i", _read_exact(fd, 4, where, "the integer vector length"))[0]
    if n < 0:
        raise TableError(f"{where}: negative integer vector length {n}")
    data = _read_exact(fd, 5 * n, where, f"an integer vector of {n}")
    pairs = np.frombuffer(data, dtype=[("size", "u1"), ("value", "<i4")])
    if n and np.any(pairs["size"] != 4):
        raise TableError(f"{where}: corrupt integer vector (element size byte is not 4)")
    return pairs["value"].astype(np.int32)


# Kaldi's compressed matrices (src/matrix/compressed-matrix.cc). After the token, the global
# header: float min_value, float range, int32 num_rows, int32 num_cols (its int32 format field
# is implied by the token). Format 1 ("CM"): per column four uint16 percentiles, then one byte
# per element, column-major. Format 2 ("CM2"): uint16 per element, row-major. Format 3 ("CM3"):
# one byte per element, row-major.
_COMPRESSED_FORMATS = {b"CM": 1, b"CM2": 2, b"CM3": 3}


def _uint16_to_float(min_value: np.float32, rng: np.float32, v: np.ndarray) -> np.ndarray:
    # Kaldi: min_value + range * 1.52590218966964e-05F * value, all in float
    return min_value + (rng * np.float32(1.52590218966964e-05)) * v.astype(np.float32)


def _char_to_float(p0, p25, p75, p100, v: np.ndarray) -> np.ndarray:
    """Kaldi's CharToFloat over a column: ``(p25 - p0) * value`` in float, then the ``* (1/64.0)``
    (a double constant) and the sum in double, rounded back to float."""
    f = v.astype(np.float32)
    low = p0.astype(np.float64) + ((p25 - p0) * f).astype(np.float64) * (1 / 64.0)
    mid = p25.astype(np.float64) + ((p75 - p25) * (f - np.float32(64))).astype(
        np.float64) * (1 / 128.0)
    high = p75.astype(np.float64) + ((p100 - p75) * (f - np.float32(192))).astype(
        np.float64) * (1 / 63.0)
    return np.where(v <= 64, low, np.where(v <= 192, mid, high)).astype(np.float32)


def _read_compressed(fd, token: bytes, where: str) -> np.ndarray:
    fmt = _COMPRESSED_FORMATS[token]
    name = token.decode()
    head = _read_exact(fd, 16, where, f"the {name} header")
    min_value, rng, rows, cols = struct.unpack("<ffii", head)
    if rows < 0 or cols < 0:
        raise TableError(f"{where}: negative {name} dimension {rows}x{cols}")
    if cols == 0 or rows == 0:  # Kaldi writes an empty matrix as a "CM" header with zeros
        return np.zeros((0, 0), np.float32)
    if not (np.isfinite(min_value) and np.isfinite(rng)):
        raise TableError(f"{where}: corrupt {name} header (min {min_value}, range {rng})")
    min_value, rng = np.float32(min_value), np.float32(rng)
    if fmt == 1:
        data = _read_exact(fd, cols * (8 + rows), where, f"a {rows}x{cols} {name} matrix")
        headers = _uint16_to_float(min_value, rng, np.frombuffer(
            data, "<u2", 4 * cols).reshape(cols, 4))
        codes = np.frombuffer(data, np.uint8, offset=8 * cols).reshape(cols, rows)
        p = [headers[:, i:i + 1] for i in range(4)]
        return np.ascontiguousarray(_char_to_float(*p, codes).T)
    width, dtype = (65535.0, "<u2") if fmt == 2 else (255.0, np.uint8)
    data = _read_exact(fd, rows * cols * np.dtype(dtype).itemsize, where,
                       f"a {rows}x{cols} {name} matrix")
    # Kaldi: float increment = range * (1.0 / 65535.0) (a double product rounded to float),
    # then min_value + data[j] * increment in float
    increment = np.float32(np.float64(rng) * (1.0 / width))
    codes = np.frombuffer(data, dtype).reshape(rows, cols)
    return min_value + codes.astype(np.float32) * increment


def _read_text_value(first: bytes, fd, where: str) -> np.ndarray:
    line = (first + fd.readline()).decode("latin1")
    body = line.strip()
    if body.startswith("["):
        inner = body[1:].strip()
        try:
            if inner.endswith("]"):  # one-line vector "[ 1 2 3 ]" (or an empty matrix "[ ]")
                return np.array(inner[:-1].split(), dtype=np.float32)
            rows = [inner.split()] if inner else []
            while True:
                raw = fd.readline()
                if not raw:
                    raise TableError(f"{where}: text matrix not closed with ']'")
                tokens = raw.decode("latin1").split()
                if tokens and tokens[-1] == "]":
                    if tokens[:-1]:
                        rows.append(tokens[:-1])
                    break
                if tokens:
                    rows.append(tokens)
            if len({len(r) for r in rows}) > 1:
                raise TableError(f"{where}: ragged text matrix (rows of "
                                 f"{sorted({len(r) for r in rows})} values)")
            return np.array(rows, dtype=np.float32).reshape(len(rows), -1)
        except ValueError as e:
            raise TableError(f"{where}: non-numeric value in a text matrix: {e}") from e
    try:
        return np.array(body.split(), dtype=np.int32)
    except (ValueError, OverflowError) as e:
        raise TableError(f"{where}: cannot parse text value {body[:40]!r}") from e


def read_value(fd, where: str = "<stream>") -> np.ndarray:
    """Read one Kaldi object (binary or text) from ``fd`` positioned at its start.

    Returns a 2-D float32/float64 array for a matrix (compressed ``CM``/``CM2``/``CM3`` ones
    decompressed to float32 exactly as Kaldi's CopyToMat does), 1-D float32/float64 for a vector
    and 1-D int32 for an integer vector. ``where`` names the source in error messages; any
    damage (unknown header, negative or impossible size, truncation) raises TableError.
    """
    flag = fd.read(1)
    if not flag:
        raise TableError(f"{where}: unexpected end of data")
    if flag == b"\n":  # an empty integer vector in text form
        return np.zeros(0, dtype=np.int32)
    flag += fd.read(1)
    if flag != b"\0B":
        return _read_text_value(flag, fd, where)
    first = _read_exact(fd, 1, where, "the object header")
    if first == b"\x04":
        return _read_int_vector(fd, where)
    token = bytes(first) + _read_token(fd, where) if first != b" " else b""
    if token in _BINARY_TYPES:
        return _read_binary_array(fd, token, where)
    if token in _COMPRESSED_FORMATS:
        return _read_compressed(fd, token, where)
    raise TableError(f"{where}: unknown Kaldi object header {token!r} (expected FM, DM, FV, DV, "
                     "CM, CM2 or CM3)")


def _read_key(fd, where: str = "<stream>") -> str | None:
    """Read an archive key and the single separator after it; None at end of archive."""
    chars = bytearray()
    while True:
        c = fd.read(1)
        if not c:
            break
        if c in b" \t\n\r":
            if chars:
                break
            continue
        chars += c
        if len(chars) > _MAX_KEY_BYTES:
            raise TableError(f"{where}: no key here (over {_MAX_KEY_BYTES} bytes without a "
                             "space): not a Kaldi archive, or a corrupt one")
    return chars.decode("utf-8", errors="surrogateescape") if chars else None


# --------------------------------------------------------------------------- opening

@contextlib.contextmanager
def _open_input(target: str, streaming: bool = True) -> Iterator[IO[bytes]]:
    """Open a file, ``-`` (stdin) or ``cmd |`` (pipe, with the pipe timeout; ``streaming``: a
    whole table, else one object) for binary reading. Errors are TableError naming it."""
    if target == "-":
        yield sys.stdin.buffer
        return
    if target.endswith("|"):
        try:
            with PipeReader(target, streaming=streaming) as p:
                yield p
        except PipeError as e:
            raise TableError(str(e)) from None
        except OSError as e:  # the shell itself could not start
            raise TableError(f"{target}: {e.strerror or e}") from None
        return
    try:
        f = open(target, "rb")
    except FileNotFoundError:
        raise TableError(f"{target}: no such file") from None
    except IsADirectoryError:
        raise TableError(f"{target}: is a directory, not a file") from None
    except OSError as e:
        raise TableError(f"{target}: {e.strerror or e}") from None
    with f:
        if os.path.isdir(target):
            raise TableError(f"{target}: is a directory, not a file")
        yield f


def _parse_range(text: str, where: str) -> tuple[slice, ...]:
    """Kaldi's ``[r1:r2]`` or ``[r1:r2,c1:c2]`` (inclusive; an empty side means the end)."""
    parts = [p.strip() for p in text.split(",")]
    if not 1 <= len(parts) <= 2:
        raise TableError(f"{where}: bad range [{text}] (expected [r1:r2] or [r1:r2,c1:c2])")
    slices = []
    for part in parts:
        if part.count(":") != 1:
            raise TableError(f"{where}: bad range [{text}]")
        a, b = (s.strip() for s in part.split(":"))
        try:
            slices.append(slice(int(a) if a else None, int(b) + 1 if b else None))
        except ValueError:
            raise TableError(f"{where}: bad range [{text}]") from None
    return tuple(slices)


def _apply_range(value: np.ndarray, rng: tuple[slice, ...], where: str) -> np.ndarray:
    if value.ndim != 2:
        raise TableError(f"{where}: a range needs a matrix, the value has shape {value.shape}")
    for axis, s in enumerate(rng):
        size = value.shape[axis]
        first = 0 if s.start is None else s.start
        last = size - 1 if s.stop is None else s.stop - 1
        if not 0 <= first <= last < size:
            what = ("row", "column")[axis]
            raise TableError(f"{where}: {what} range {first}:{last} is outside the matrix "
                             f"({size} {what}s)")
    return np.ascontiguousarray(value[rng])


def _split_rxfilename(rxfilename: str) -> tuple[str, int | None, tuple[slice, ...] | None]:
    """``(path or command, byte offset or None, range or None)`` of an rxfilename."""
    rx = rxfilename.strip()
    rng = None
    m = _RANGE.match(rx)
    if m and not rx.endswith("|"):
        rx, rng = m.group(1), _parse_range(m.group(2), rxfilename)
    offset = None
    m = _OFFSET.match(rx)
    if m and not rx.endswith("|") and not os.path.exists(rx):
        rx, offset = m.group(1), int(m.group(2))
    return rx, offset, rng


def _seek(f, offset: int, path: str, where: str) -> None:
    size = _bytes_left(f)
    if size is not None:
        size += f.tell()
        if offset >= size:
            raise TableError(f"{where}: offset {offset} is past the end of {path} "
                             f"({size} bytes)")
    try:
        f.seek(offset)
    except (OSError, ValueError, AttributeError) as e:
        raise TableError(f"{where}: cannot seek to offset {offset} in {path}") from e


def read_rxfilename(rxfilename: str) -> np.ndarray:
    """Read the one object an rxfilename names: ``feats.ark:123``, ``feats.ark:123[0:9]``,
    a file holding one object, ``-`` or ``cmd |``. Returns the array (see ``read_value``).
    """
    rx, offset, rng = _split_rxfilename(rxfilename)
    with _open_input(rx, streaming=False) as f:
        if offset is not None:
            _seek(f, offset, rx, rxfilename)
        value = read_value(f, rxfilename)
    return value if rng is None else _apply_range(value, rng, rxfilename)


# --------------------------------------------------------------------------- script files

def _script_lines(path: str) -> Iterator[tuple[int, str, str | None, TableError | None]]:
    """``(line number, key, rxfilename, None)`` per line, or ``(n, key, None, error)``."""
    with _open_input(path) as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.decode("utf-8", errors="surrogateescape").strip()
            parts = line.split(None, 1)
            if len(parts) != 2:
                yield lineno, (parts[0] if parts else ""), None, TableError(
                    f"{path}:{lineno}: expected 'key rxfilename', got {line[:80]!r}")
                continue
            yield lineno, parts[0], parts[1].strip(), None


def read_script(path: str) -> list[tuple[str, str]]:
    """Parse a script file (``key rxfilename`` lines) into a list of ``(key, rxfilename)``.

    ``path`` may be ``-`` (stdin) or ``cmd |``. Raises ``TableError`` naming ``path:line`` for a
    line with no rxfilename (blank lines are errors too, as in Kaldi) or a repeated key.
    """
    entries, seen = [], {}
    for lineno, key, rx, error in _script_lines(path):
        if error is not None:
            raise error
        if key in seen:
            raise TableError(f"{path}:{lineno}: duplicate key {key!r} (first on line "
                             f"{seen[key]})")
        seen[key] = lineno
        entries.append((key, rx))
    return entries


class TableEntry(NamedTuple):
    """One entry of a table: ``value`` (see ``read_value``), or ``error`` saying why it could
    not be read. ``key`` is the entry's key (or ``file:line`` for a script line without one).
    ``fatal``: nothing after this entry can be read (an archive damaged here)."""

    key: str
    value: np.ndarray | None
    error: TableError | None = None
    fatal: bool = False


def read_table_entries(rspecifier: str) -> Iterator[TableEntry]:
    """Iterate the entries of a table, damaged ones included, for per-utterance error handling.

    Each entry carries its value or its error (a TableError naming the file, line and key).
    In a script file a bad line, a missing target, a bad offset or range fails only that
    entry; a repeated key is an error entry. In an archive a damaged value ends the archive
    (nothing after it can be found): that entry is the last one yielded. A table that cannot
    be opened at all raises TableError.
    """
    kind, _options, target = parse_rspecifier(rspecifier)
    if kind == "scp":
        yield from _script_entries(target)
    else:
        yield from _archive_entries(target)


def _script_entries(target: str) -> Iterator[TableEntry]:
    seen: dict[str, int] = {}
    with contextlib.ExitStack() as stack:
        current: tuple[str, IO[bytes]] | None = None  # the archive the last entry was in
        for lineno, key, rx, error in _script_lines(target):
            where = f"{target}:{lineno}: key {key!r}"
            if error is not None:
                yield TableEntry(key or f"{target}:{lineno}", None, error)
                continue
            if key in seen:
                yield TableEntry(key, None, TableError(
                    f"{where}: duplicate key (first on line {seen[key]})"))
                continue
            seen[key] = lineno
            try:
                path, offset, rng = _split_rxfilename(rx)
                if offset is None or path.endswith("|") or path == "-":
                    yield TableEntry(key, read_rxfilename(rx))
                    continue
                # consecutive entries usually share an archive: keep it open and seek
                if current is None or current[0] != path:
                    stack.close()
                    current = None
                    f = stack.enter_context(_open_input(path))
                    current = (path, f)
                _seek(current[1], offset, path, rx)
                value = read_value(current[1], rx)
                yield TableEntry(key, value if rng is None else _apply_range(value, rng, rx))
            except TableError as e:
                yield TableEntry(key, None, TableError(f"{where}: {e}"))


def _archive_entries(target: str) -> Iterator[TableEntry]:
    seen: set[str] = set()
    with _open_input(target) as f:
        while True:
            key = None
            try:
                key = _read_key(f, target)
                if key is None:
                    return
                value = read_value(f, f"{target}: key {key!r}")
            except TableError as e:
                yield TableEntry(key or target, None, TableError(
                    f"{e} (the rest of the archive cannot be read)"), fatal=True)
                return
            if key in seen:
                yield TableEntry(key, None, TableError(f"{target}: duplicate key {key!r}"))
                continue
            seen.add(key)
            yield TableEntry(key, value)


def read_table(rspecifier: str) -> Iterator[tuple[str, np.ndarray]]:
    """Iterate ``(key, array)`` over a table (``scp:FILE``, ``ark:FILE``, ``ark:-``, pipes).

    Raises TableError (naming the file, line and key) at the first damaged entry or repeated
    key; ``read_table_entries`` yields those instead.
    """
    for entry in read_table_entries(rspecifier):
        if entry.error is not None:
            raise entry.error
        yield entry.key, entry.value


def read_table_dict(rspecifier: str) -> dict[str, np.ndarray]:
    """Read a whole table into a dict ``key -> array`` (duplicate keys are an error)."""
    return dict(read_table(rspecifier))


class RandomAccessTable(Mapping):
    """Random access by key: ``table[key] -> array``, read on demand.

    Built from ``scp:FILE`` (each value read through its ``ark:offset``), or ``ark:FILE`` (the
    archive is scanned once to record each key's offset). Holds no values in memory. A damaged
    value raises TableError naming the table and key when it is read. With ``strict=False`` a
    bad script line or a repeated key does not stop the table from loading: that key raises
    its TableError when read, and ``line_errors`` lists the lines that had no key at all.
    """

    def __init__(self, rspecifier: str, strict: bool = True):
        kind, _options, target = parse_rspecifier(rspecifier)
        self.rspecifier = rspecifier
        self._index: dict[str, str] = {}
        self._errors: dict[str, TableError] = {}
        self.line_errors: list[TableError] = []
        if kind == "scp" and not strict:
            for lineno, key, rx, error in _script_lines(target):
                if error is not None and not key:
                    self.line_errors.append(error)
                elif error is not None:
                    self._errors.setdefault(key, error)
                elif key in self._index or key in self._errors:
                    self._errors[key] = TableError(f"{target}:{lineno}: duplicate key {key!r}")
                    self._index.pop(key, None)
                else:
                    self._index[key] = rx
            return
        if kind == "scp":
            entries = read_script(target)
        else:
            if target == "-" or target.endswith("|"):
                raise TableError(f"{rspecifier}: random access needs a file, not a stream")
            entries = [(k, f"{target}:{off}") for k, off in scan_archive(target)]
        for key, rx in entries:
            if key in self._index:
                raise TableError(f"{target}: duplicate key {key!r}")
            self._index[key] = rx

    def __getitem__(self, key: str) -> np.ndarray:
        if key in self._errors:
            raise self._errors[key]
        try:
            rx = self._index[key]
        except KeyError:
            raise KeyError(f"{self.rspecifier}: no key {key!r}") from None
        try:
            return read_rxfilename(rx)
        except TableError as e:
            raise TableError(f"{self.rspecifier}: key {key!r}: {e}") from None

    def rxfilename(self, key: str) -> str:
        """The rxfilename (``ark:offset``) of ``key``."""
        return self._index[key]

    def __iter__(self):
        return iter([*self._index, *self._errors])

    def __len__(self) -> int:
        return len(self._index) + len(self._errors)

    def __contains__(self, key) -> bool:
        return key in self._index or key in self._errors


def scan_archive(path: str) -> list[tuple[str, int]]:
    """Return ``(key, offset)`` of every object in the archive file ``path``."""
    out = []
    with _open_input(path) as f:
        while True:
            key = _read_key(f, path)
            if key is None:
                return out
            out.append((key, f.tell()))
            read_value(f, f"{path}: key {key!r}")


# --------------------------------------------------------------------------- writing

def _format_number(x) -> str:
    return f"{x:g}" if isinstance(x, (float, np.floating)) else str(x)


def _write_text_value(f: IO[bytes], value: np.ndarray) -> None:
    if value.ndim == 2:
        if value.size == 0:
            f.write(b" [ ]\n")
            return
        rows = "".join("\n  " + "".join(_format_number(x) + " " for x in row) for row in value)
        f.write((" [" + rows + "]\n").encode())
    elif value.dtype.kind == "f":
        f.write((" [ " + "".join(_format_number(x) + " " for x in value) + "]\n").encode())
    else:
        f.write(("".join(str(int(x)) + " " for x in value) + "\n").encode())


def _check_value(value) -> np.ndarray:
    value = np.asarray(value)
    if value.ndim == 2 or (value.ndim == 1 and value.dtype.kind == "f"):
        if value.dtype not in (np.float32, np.float64):
            raise TableError(f"cannot write {value.dtype} arrays: use float32 or float64")
    elif value.ndim == 1 and value.dtype.kind in "iu":
        if value.size and (value.min() < -2**31 or value.max() >= 2**31):
            raise TableError("integer vector does not fit int32")
        value = value.astype(np.int32, copy=False)
    else:
        raise TableError(f"cannot write a {value.ndim}-D {value.dtype} array as a Kaldi object")
    return np.ascontiguousarray(value)


def write_value(f: IO[bytes], value: np.ndarray, binary: bool = True) -> None:
    """Write one Kaldi object (no key) to the binary stream ``f`` (see module docstring)."""
    value = _check_value(value)
    if not binary:
        _write_text_value(f, value)
        return
    k = kaldi_io()
    if value.ndim == 2:
        k.write_mat(f, value)
    elif value.dtype.kind == "f":
        k.write_vec_flt(f, value)
    else:
        k.write_vec_int(f, value)


class _Tee:
    """Counts bytes written so archive offsets are known on streams without ``tell``."""

    def __init__(self, f):
        self.f = f
        self.mode = "wb"
        self.pos = 0

    def write(self, data: bytes) -> int:
        self.pos += len(data)
        return self.f.write(data)


class TableWriter:
    """Write ``(key, array)`` pairs to a wspecifier; use as a context manager or call close().

    ``ark,scp:a.ark,a.scp`` records each value's offset in the script file as ``a.ark:OFFSET``
    with the archive path as given (pass an absolute path for a relocatable-proof script).
    ``entries`` lists ``(key, rxfilename)`` of what was written. Keys must be non-empty and
    without whitespace. If the writer is left by an exception, nothing is renamed into place.
    """

    def __init__(self, wspecifier: str):
        ark, scp, options = parse_wspecifier(wspecifier)
        self.wspecifier = wspecifier
        self.ark_path = ark
        self.scp_path = scp
        self.binary = "t" not in options
        self.entries: list[tuple[str, str]] = []
        self._keys: set[str] = set()
        self._stack = contextlib.ExitStack()
        self._proc = None
        if ark == "-":
            raw = sys.stdout.buffer
        elif ark.startswith("|"):
            self._proc = subprocess.Popen(ark[1:].strip(), shell=True, stdin=subprocess.PIPE)
            raw = self._proc.stdin
        else:
            raw = self._stack.enter_context(atomic_open(ark, "wb"))
        self._out = _Tee(raw)
        self._closed = False

    def write(self, key: str, value) -> None:
        """Append ``value`` under ``key``."""
        if not key or any(c.isspace() for c in key):
            raise TableError(f"{self.wspecifier}: invalid key {key!r} (empty or has whitespace)")
        value = _check_value(value)
        self._out.write(key.encode("utf-8", errors="surrogateescape") + b" ")
        offset = self._out.pos
        write_value(self._out, value, binary=self.binary)
        self.entries.append((key, f"{self.ark_path}:{offset}"))
        self._keys.add(key)

    def __contains__(self, key: str) -> bool:
        return key in self._keys

    def close(self) -> None:
        """Finish the archive (rename into place), then write the script file."""
        if self._closed:
            return
        self._closed = True
        if self._proc is not None:
            self._proc.stdin.close()
            rc = self._proc.wait()
            if rc != 0:
                raise TableError(f"{self.wspecifier}: command exited with status {rc}")
        elif self.ark_path == "-":
            sys.stdout.buffer.flush()
        self._stack.close()
        if self.scp_path is not None:
            write_script(self.scp_path, self.entries)

    def abort(self) -> None:
        """Drop everything written: the temporary archive is removed, no script is written."""
        if self._closed:
            return
        self._closed = True
        self._stack.__exit__(TableError, TableError("aborted"), None)
        if self._proc is not None:
            self._proc.stdin.close()
            self._proc.wait()

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write_script(path: str, entries: Iterable[tuple[str, str]]) -> None:
    """Write ``key rxfilename`` lines to ``path`` atomically (``-`` for stdout)."""
    text = "".join(f"{k} {v}\n" for k, v in entries)
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    with atomic_open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write(text)


def write_table(wspecifier: str, items: Iterable[tuple[str, np.ndarray]] | Mapping) -> list:
    """Write all ``(key, array)`` items (or a dict) to ``wspecifier``; returns the entries."""
    if isinstance(items, Mapping):
        items = items.items()
    with TableWriter(wspecifier) as w:
        for key, value in items:
            w.write(key, value)
    return w.entries
