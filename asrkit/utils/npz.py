"""Reading ``.npz`` archives from files a user hands us: lazily, one checked member at a time.

``numpy.load`` trusts the file: a member's npy header may declare a 10^5 x 10^5 array backed by a
few bytes (40 GB allocated before the read fails), an object dtype, or a header numpy's parser
chokes on, and every member is read whether it is needed or not. :class:`NpzReader` reads the zip
directory, then a member's npy header only when the member is asked for, and checks it before
allocating anything: a plain numeric dtype (bool, int, uint, float, complex; never objects or
records), non-negative dimensions, a data size that is exactly what the zip entry holds and that
fits in memory, and (when the caller knows them) the expected shape and dtype kind. The data is
then read into a fresh array; the zip CRC is verified on the way. Every error is an
:class:`NpzError` naming the file and the member.
"""

from __future__ import annotations

import math
import os
import tokenize
import zipfile
import zlib

import numpy as np

from asrkit.utils.memory import format_bytes, memory_limit_bytes

NUMERIC_KINDS = "biufc"
_MAX_HEADER = 10000  # numpy's own limit on an npy header's length
_CHUNK = 1 << 24     # bytes per read: zipfile's readinto allocates a buffer of the request


class NpzError(ValueError):
    """An unreadable or unexpected archive or member; the message names the file."""


# what reading a damaged zip or npy member can raise, besides our own checks
_READ_ERRORS = (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError, KeyError,
                NotImplementedError, RuntimeError, OverflowError, UnicodeDecodeError,
                IndexError, TypeError)


class NpzReader:
    """An open ``.npz`` file: ``names`` (members, without ``.npy``), ``info(name)`` ->
    ``(shape, dtype)`` from the member's header, ``read(name, shape=, kinds=)`` -> a checked
    array. Use as a context manager (or call ``close``)."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        if os.path.isdir(self.path):
            raise NpzError(f"{self.path}: is a directory, not a file")
        if not os.path.exists(self.path):
            raise NpzError(f"{self.path}: no such file")
        if os.path.getsize(self.path) == 0:
            raise NpzError(f"{self.path}: empty file (0 bytes)")
        try:
            self._zip = zipfile.ZipFile(self.path)
            infos = self._zip.infolist()
        except _READ_ERRORS as e:
            raise NpzError(f"{self.path}: not an npz archive ({_why(e)})") from None
        self._infos: dict[str, zipfile.ZipInfo] = {}
        for info in infos:
            name = info.filename.removesuffix(".npy")
            if name in self._infos:
                self.close()
                raise NpzError(f"{self.path}: member {name!r} appears twice")
            self._infos[name] = info
        self._headers: dict[str, tuple] = {}

    @property
    def names(self) -> list[str]:
        """Member names, in file order (``.npy`` removed)."""
        return list(self._infos)

    def __contains__(self, name: str) -> bool:
        return name in self._infos

    def __enter__(self) -> NpzReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close the file."""
        zf = getattr(self, "_zip", None)
        if zf is not None:
            zf.close()

    def _where(self, name: str) -> str:
        return f"{self.path}: member {name!r}"

    def _header(self, name: str):
        """``(shape, fortran_order, dtype, offset)`` of a member, checked."""
        if name in self._headers:
            return self._headers[name]
        if name not in self._infos:
            raise NpzError(f"{self._where(name)}: missing")
        info = self._infos[name]
        try:
            with self._zip.open(info) as fp:
                version = np.lib.format.read_magic(fp)
                if version == (1, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_1_0(
                        fp, max_header_size=_MAX_HEADER)
                elif version == (2, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_2_0(
                        fp, max_header_size=_MAX_HEADER)
                else:
                    raise NpzError(f"{self._where(name)}: npy format version {version} is "
                                   "not supported")
                offset = fp.tell()
        except NpzError:
            raise
        except (*_READ_ERRORS, SyntaxError, tokenize.TokenError, MemoryError,
                RecursionError) as e:  # numpy parses the header dict with ast and tokenize
            raise NpzError(f"{self._where(name)}: bad npy header ({_why(e)})") from None
        if dtype.kind not in NUMERIC_KINDS or dtype.fields is not None or dtype.subdtype:
            raise NpzError(f"{self._where(name)}: dtype {dtype.str!r} is not a plain number "
                           "type")
        if any(d < 0 for d in shape):
            raise NpzError(f"{self._where(name)}: negative dimension in shape {list(shape)}")
        nbytes = math.prod(shape) * dtype.itemsize
        if offset + nbytes != info.file_size:
            raise NpzError(f"{self._where(name)}: header declares shape {list(shape)} of "
                           f"{dtype.str} ({format_bytes(nbytes)}), the file holds "
                           f"{format_bytes(max(info.file_size - offset, 0))} of data")
        self._headers[name] = (tuple(shape), fortran, dtype, offset)
        return self._headers[name]

    def info(self, name: str) -> tuple[tuple[int, ...], np.dtype]:
        """``(shape, dtype)`` a member declares (its npy header, checked; no data is read)."""
        shape, _, dtype, _ = self._header(name)
        return shape, dtype

    def read(self, name: str, shape: tuple | None = None, kinds: str = NUMERIC_KINDS,
             max_bytes: int | None = None) -> np.ndarray:
        """The member ``name`` as a new array, after checking its header: ``shape`` (when
        given) must match exactly, its dtype kind must be one of ``kinds`` (e.g. ``"f"``), and
        its size must fit ``max_bytes`` (default: this machine's memory)."""
        want_shape, fortran, dtype, _ = self._header(name)
        if shape is not None and tuple(shape) != want_shape:
            raise NpzError(f"{self._where(name)}: shape {list(want_shape)}, expected "
                           f"{list(shape)}")
        if dtype.kind not in kinds:
            raise NpzError(f"{self._where(name)}: dtype {dtype.str!r}, expected one of kinds "
                           f"{kinds!r} (b bool, i/u integer, f float, c complex)")
        nbytes = math.prod(want_shape) * dtype.itemsize
        limit = memory_limit_bytes() if max_bytes is None else max_bytes
        if nbytes > limit:
            raise NpzError(f"{self._where(name)}: shape {list(want_shape)} needs "
                           f"{format_bytes(nbytes)}, more than the {format_bytes(limit)} "
                           "allowed")
        out = np.empty(math.prod(want_shape), dtype)
        try:
            with self._zip.open(self._infos[name]) as fp:
                fp.seek(self._headers[name][3])
                view = memoryview(out.view(np.uint8))
                got = 0
                while got < nbytes:
                    n = fp.readinto(view[got:got + _CHUNK])
                    if not n:
                        break
                    got += n
                # reading to the end makes zipfile check the CRC of the whole member
                rest = fp.read(1)
        except _READ_ERRORS as e:
            raise NpzError(f"{self._where(name)}: unreadable data ({_why(e)})") from None
        if got != nbytes or rest:
            raise NpzError(f"{self._where(name)}: data is {got} bytes, the header declares "
                           f"{nbytes}")
        return out.reshape(want_shape, order="F" if fortran else "C")


def _why(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:200]}" if text else type(e).__name__
