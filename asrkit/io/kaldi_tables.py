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
import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import IO

import numpy as np

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

class _Prefixed:
    """A read-only stream that first returns ``prefix`` bytes, then reads from ``fd``."""

    def __init__(self, prefix: bytes, fd):
        self._buf = prefix
        self._fd = fd
        self.mode = "rb"

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            out, self._buf = self._buf + self._fd.read(), b""
            return out
        head, self._buf = self._buf[:n], self._buf[n:]
        if len(head) < n:
            head += self._fd.read(n - len(head))
        return head

    def readline(self) -> bytes:
        if b"\n" in self._buf:
            i = self._buf.index(b"\n") + 1
            line, self._buf = self._buf[:i], self._buf[i:]
            return line
        out, self._buf = self._buf + self._fd.readline(), b""
        return out


def _read_exact(fd, n: int, where: str) -> bytes:
    data = fd.read(n)
    if len(data) != n:
        raise TableError(f"{where}: unexpected end of data")
    return data


def _read_text_value(first: bytes, fd, where: str) -> np.ndarray:
    line = (first + fd.readline()).decode("latin1")
    body = line.strip()
    if body.startswith("["):
        inner = body[1:].strip()
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
        try:
            return np.array(rows, dtype=np.float32).reshape(len(rows), -1)
        except ValueError as e:
            raise TableError(f"{where}: ragged or non-numeric text matrix") from e
    try:
        return np.array(body.split(), dtype=np.int32)
    except ValueError as e:
        raise TableError(f"{where}: cannot parse text value {body[:40]!r}") from e


def read_value(fd, where: str = "<stream>") -> np.ndarray:
    """Read one Kaldi object (binary or text) from ``fd`` positioned at its start.

    Returns a 2-D float32/float64 array for a matrix, 1-D float32/float64 for a vector and
    1-D int32 for an integer vector. ``where`` names the source in error messages.
    """
    k = kaldi_io()
    flag = fd.read(1)
    if not flag:
        raise TableError(f"{where}: unexpected end of data")
    if flag == b"\n":  # an empty integer vector in text form
        return np.zeros(0, dtype=np.int32)
    flag += fd.read(1)
    if flag != b"\0B":
        return _read_text_value(flag, fd, where)
    first = _read_exact(fd, 1, where)
    if first == b"\x04":
        return np.array(k.read_vec_int(_Prefixed(b"\0B\x04", fd)), dtype=np.int32)
    header = first + _read_exact(fd, 2, where)
    stream = _Prefixed(b"\0B" + header, fd)
    try:
        if header in (b"FM ", b"DM ") or header.startswith(b"CM"):
            if header in (b"CM2", b"CM3"):
                raise TableError(f"{where}: compressed matrix format {header.decode()} is not "
                                 "supported (re-write it with copy-feats --compress=false)")
            return np.array(k.read_mat(stream))
        if header in (b"FV ", b"DV "):
            return np.array(k.read_vec_flt(stream))
    except (AssertionError, ValueError) as e:
        if isinstance(e, TableError):
            raise
        raise TableError(f"{where}: corrupt {header.decode('latin1').strip()} object: {e}") from e
    raise TableError(f"{where}: unknown Kaldi object header {header!r}")


def _read_key(fd) -> str | None:
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
    return chars.decode("utf-8", errors="surrogateescape") if chars else None


# --------------------------------------------------------------------------- opening

@contextlib.contextmanager
def _open_input(target: str) -> Iterator[IO[bytes]]:
    """Open a file, ``-`` (stdin) or ``cmd |`` (pipe) for binary reading."""
    if target == "-":
        yield sys.stdin.buffer
        return
    if target.endswith("|"):
        cmd = target[:-1].strip()
        proc = subprocess.Popen(cmd, shell=True, stdout=subprocess.PIPE)
        try:
            yield proc.stdout
        finally:
            proc.stdout.close()
            rc = proc.wait()
        if rc != 0:
            raise TableError(f"command '{cmd} |' exited with status {rc}")
        return
    try:
        f = open(target, "rb")
    except FileNotFoundError as e:
        raise TableError(f"{target}: no such file") from e
    with f:
        yield f


def _parse_range(text: str, where: str) -> tuple[slice, ...]:
    slices = []
    for part in text.split(","):
        part = part.strip()
        if ":" not in part:
            raise TableError(f"{where}: bad range {text!r}")
        a, b = part.split(":", 1)
        try:
            # Kaldi ranges are inclusive: [10:19] is rows 10..19
            slices.append(slice(int(a) if a.strip() else None,
                                int(b) + 1 if b.strip() else None))
        except ValueError as e:
            raise TableError(f"{where}: bad range {text!r}") from e
    return tuple(slices)


def read_rxfilename(rxfilename: str) -> np.ndarray:
    """Read the one object an rxfilename names: ``feats.ark:123``, ``feats.ark:123[0:9]``,
    a file holding one object, ``-`` or ``cmd |``. Returns the array (see ``read_value``).
    """
    rx = rxfilename.strip()
    rng = None
    m = _RANGE.match(rx)
    if m:
        rx, rng = m.group(1), _parse_range(m.group(2), rxfilename)
    offset = None
    m = _OFFSET.match(rx)
    if m and not rx.endswith("|") and not os.path.exists(rx):
        rx, offset = m.group(1), int(m.group(2))
    with _open_input(rx) as f:
        if offset is not None:
            f.seek(offset)
        value = read_value(f, rxfilename)
    if rng is not None:
        value = np.ascontiguousarray(value[rng])
    return value


# --------------------------------------------------------------------------- script files

def read_script(path: str) -> list[tuple[str, str]]:
    """Parse a script file (``key rxfilename`` lines) into a list of ``(key, rxfilename)``.

    ``path`` may be ``-`` (stdin). Raises ``TableError`` naming ``path:line`` for a line with no
    rxfilename; blank lines are errors too, as in Kaldi.
    """
    entries = []
    with _open_input(path) as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.decode("utf-8", errors="surrogateescape").strip()
            parts = line.split(None, 1)
            if len(parts) != 2:
                raise TableError(f"{path}:{lineno}: expected 'key rxfilename', got {line!r}")
            entries.append((parts[0], parts[1].strip()))
    return entries


def read_table(rspecifier: str) -> Iterator[tuple[str, np.ndarray]]:
    """Iterate ``(key, array)`` over a table (``scp:FILE``, ``ark:FILE``, ``ark:-``, pipes)."""
    kind, _options, target = parse_rspecifier(rspecifier)
    if kind == "scp":
        with contextlib.ExitStack() as stack:
            current: tuple[str, IO[bytes]] | None = None  # the archive the last entry was in
            for key, rx in read_script(target):
                try:
                    m = _OFFSET.match(rx)
                    if m is None or rx.endswith("|") or os.path.exists(rx):
                        yield key, read_rxfilename(rx)
                        continue
                    # consecutive entries usually share an archive: keep it open and seek
                    if current is None or current[0] != m.group(1):
                        stack.close()
                        f = stack.enter_context(_open_input(m.group(1)))
                        current = (m.group(1), f)
                    current[1].seek(int(m.group(2)))
                    yield key, read_value(current[1], rx)
                except TableError as e:
                    raise TableError(f"{target}: key {key!r}: {e}") from e
        return
    with _open_input(target) as f:
        while True:
            key = _read_key(f)
            if key is None:
                return
            yield key, read_value(f, f"{target}: key {key!r}")


def read_table_dict(rspecifier: str) -> dict[str, np.ndarray]:
    """Read a whole table into a dict ``key -> array`` (duplicate keys are an error)."""
    out: dict[str, np.ndarray] = {}
    for key, value in read_table(rspecifier):
        if key in out:
            raise TableError(f"{rspecifier}: duplicate key {key!r}")
        out[key] = value
    return out


class RandomAccessTable(Mapping):
    """Random access by key: ``table[key] -> array``, read on demand.

    Built from ``scp:FILE`` (each value read through its ``ark:offset``), or ``ark:FILE`` (the
    archive is scanned once to record each key's offset). Holds no values in memory.
    """

    def __init__(self, rspecifier: str):
        kind, _options, target = parse_rspecifier(rspecifier)
        self.rspecifier = rspecifier
        self._index: dict[str, str] = {}
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
        try:
            rx = self._index[key]
        except KeyError:
            raise KeyError(f"{self.rspecifier}: no key {key!r}") from None
        return read_rxfilename(rx)

    def rxfilename(self, key: str) -> str:
        """The rxfilename (``ark:offset``) of ``key``."""
        return self._index[key]

    def __iter__(self):
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, key) -> bool:
        return key in self._index


def scan_archive(path: str) -> list[tuple[str, int]]:
    """Return ``(key, offset)`` of every object in the archive file ``path``."""
    out = []
    with open(path, "rb") as f:
        while True:
            key = _read_key(f)
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
