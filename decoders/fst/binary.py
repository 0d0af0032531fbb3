"""asrkit's own binary WFST file: one uncompressed ``.npz`` holding the arrays, so loading a
large decoding graph is a few memory copies instead of parsing text.

Keys: ``format`` ("asrkit-fst"), ``version``, ``semiring``, ``start``, ``final``, ``src``, ``dst``,
``ilabel``, ``olabel``, ``weight``, and for each symbol table present ``isymbols_ids`` /
``isymbols_syms`` (and ``osymbols_*``).
"""

from __future__ import annotations

import os

import numpy as np

from asrkit.decoders.fst.fst import Fst
from asrkit.decoders.fst.symbols import SymbolTable

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


def load_fst(path: str | os.PathLike) -> Fst:
    """Read a machine written by ``save_fst``; a foreign file raises ValueError naming it."""
    path = os.fspath(path)
    try:
        z = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not an asrkit binary FST ({e})") from None
    with z:
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
                    t.add_symbol(s, i)
                tables[key] = t
        final = z["final"]
        return Fst(final.size, int(z["start"]), final, z["src"], z["dst"], z["ilabel"],
                   z["olabel"], z["weight"], str(z["semiring"]), tables.get("isymbols"),
                   tables.get("osymbols"), dtype=final.dtype)
