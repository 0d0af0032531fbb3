"""asrkit's own binary WFST file: one uncompressed ``.npz`` holding the arrays, so loading a
large decoding graph is a few memory copies instead of parsing text.

Keys: ``format`` ("asrkit-fst"), ``version``, ``semiring``, ``start``, ``final``, ``src``, ``dst``,
``ilabel``, ``olabel``, ``weight``, and for each symbol table present ``isymbols_ids`` /
``isymbols_syms`` (and ``osymbols_*``).
"""

from __future__ import annotations

import errno
import os
import zipfile
import zlib

import numpy as np

from asrkit.decoders.fst.fst import Fst
from asrkit.decoders.fst.symbols import MAX_ID, SymbolTable

FORMAT = "asrkit-fst"
VERSION = 1


def save_fst(fst: Fst, path: str | os.PathLike) -> None:
    """Write ``fst`` (arrays and symbol tables) to ``path`` atomically."""
    from asrkit.utils import atomic_open

    arrays = dict(format=np.array(FORMAT), version=np.array(VERSION),
                  semiring=np.array(fst.semiring), start=np.array(fst.start, np.int64),
                  final=fst.final, src=fst.src, dst=fst.dst, ilabel=fst.ilabel,
                  olabel=fst.olabel, weight=fst.weight)
    for key, table in (("isymbols", fst.isymbols), ("osymbols", fst.osymbols)):
        if table is not None:
            items = list(table)
            arrays[f"{key}_ids"] = np.array([i for i, _ in items], np.int64)
            arrays[f"{key}_syms"] = np.array([s for _, s in items], dtype=str)
    with atomic_open(path, "wb") as f:
        np.savez(f, **arrays)


# what reading a damaged archive raises (zipfile: a mangled compression method is
# NotImplementedError, a set "encrypted" flag RuntimeError)
_DAMAGED = (KeyError, ValueError, TypeError, IndexError, OSError, EOFError, zipfile.BadZipFile,
            zlib.error, NotImplementedError, RuntimeError)


def load_fst(path: str | os.PathLike) -> Fst:
    """Read a machine written by ``save_fst``. A foreign, damaged or inconsistent file raises
    ValueError naming it; an unreadable one OSError."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, "is a directory, expected a file", path)
    try:
        z = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise
    except _DAMAGED as e:
        raise ValueError(f"{path}: not an asrkit binary FST ({e})") from None
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise ValueError(f"{path}: not an asrkit binary FST (a single array, not an archive)")
    try:
        with z:
            return _from_archive(z, path)
    except _DAMAGED as e:
        if isinstance(e, ValueError) and str(e).startswith(path):
            raise
        raise ValueError(f"{path}: damaged asrkit binary FST ({type(e).__name__}: {e})") from None
    except MemoryError:
        raise ValueError(f"{path}: damaged asrkit binary FST (an array larger than memory)"
                         ) from None


def _from_archive(z, path: str) -> Fst:
    if "format" not in z.files or str(z["format"]) != FORMAT:
        raise ValueError(f"{path}: not an asrkit binary FST (no 'format' = {FORMAT!r})")
    if int(z["version"]) > VERSION:
        raise ValueError(f"{path}: format version {int(z['version'])} is newer than "
                         f"this asrkit reads ({VERSION})")
    tables = {}
    for key in ("isymbols", "osymbols"):
        if f"{key}_ids" in z.files:
            t = SymbolTable(eps=None, name=f"{path}:{key}")
            for i, s in zip(z[f"{key}_ids"].tolist(), z[f"{key}_syms"].tolist(), strict=True):
                t.add_symbol(str(s), int(i))
            tables[key] = t
    arrays = {}
    for key, kind in (("final", "f"), ("src", "iu"), ("dst", "iu"), ("ilabel", "iu"),
                      ("olabel", "iu"), ("weight", "f")):
        a = z[key]
        if a.ndim != 1 or a.dtype.kind not in kind or (kind == "f" and a.itemsize not in (4, 8)):
            raise ValueError(f"{path}: array {key!r} has shape {a.shape} and dtype {a.dtype}")
        arrays[key] = a
    for key in ("src", "dst", "ilabel", "olabel"):
        a = arrays[key]
        if a.size and (a.min() < 0 or a.max() > MAX_ID):
            raise ValueError(f"{path}: array {key!r} holds values outside 0..{MAX_ID}")
    final = arrays["final"]
    return Fst(final.size, int(z["start"]), final, arrays["src"], arrays["dst"],
               arrays["ilabel"], arrays["olabel"], arrays["weight"], str(z["semiring"]),
               tables.get("isymbols"), tables.get("osymbols"), dtype=final.dtype)
