"""The asrkit binary LM format: one file of memory-mapped numpy arrays behind an offset table.

Layout: the 8-byte magic ``ASRKITLM``, a little-endian uint64 header length, a UTF-8 JSON
header ``{"version", "order", "arrays": {name: {"dtype", "shape", "offset"}}}``, then each array
at a 64-byte-aligned offset. The vocabulary is one array of UTF-8 bytes, words separated by
``\\n`` (words never contain whitespace). The lookup hash index (``query.build_index``) is
stored too, so nothing is rebuilt on load. Loading maps the arrays with ``np.memmap`` (read-only),
so opening a large model costs little more than reading its vocabulary.
"""

from __future__ import annotations

import json
import os
import struct

import numpy as np

from asrkit.utils import atomic_open

MAGIC = b"ASRKITLM"
VERSION = 1
_ALIGN = 64


def is_binary(path: str | os.PathLike) -> bool:
    """True when ``path`` starts with the asrkit binary LM magic."""
    with open(path, "rb") as f:
        return f.read(len(MAGIC)) == MAGIC


def save_binary(lm, path: str | os.PathLike) -> None:
    """Write ``lm`` (an ``NgramLM``) to ``path`` atomically in the binary format."""
    arrays: dict[str, np.ndarray] = {
        "vocab": np.frombuffer("\n".join(lm.vocab).encode("utf-8"), dtype=np.uint8),
        "keys": np.ascontiguousarray(lm._keys, dtype=np.uint64),
        "prob": np.ascontiguousarray(lm._prob, dtype=np.float32),
        "bow": np.ascontiguousarray(lm._bow, dtype=np.float32),
        "offsets": np.ascontiguousarray(lm._offsets, dtype=np.int64),
        "table": np.ascontiguousarray(lm._table, dtype=np.uint64),
        "slots": np.ascontiguousarray(lm._slots, dtype=np.int64),
    }
    for n in range(2, lm.order + 1):
        arrays[f"words{n}"] = np.ascontiguousarray(lm._words[n - 1], dtype=np.int32)
        arrays[f"rank{n}"] = np.ascontiguousarray(lm._ranks[n - 1], dtype=np.int64)
    table = {}
    offset = 0
    for name, a in arrays.items():
        table[name] = {"dtype": a.dtype.str, "shape": list(a.shape), "offset": offset}
        offset += -(-a.nbytes // _ALIGN) * _ALIGN
    header = json.dumps({"version": VERSION, "order": lm.order, "arrays": table}).encode()
    start = -(-(len(MAGIC) + 8 + len(header)) // _ALIGN) * _ALIGN
    with atomic_open(path, "wb") as f:
        f.write(MAGIC + struct.pack("<Q", len(header)) + header)
        f.write(b"\0" * (start - len(MAGIC) - 8 - len(header)))
        for name, a in arrays.items():
            f.write(a.tobytes())
            f.write(b"\0" * (-a.nbytes % _ALIGN))
            assert f.tell() == start + table[name]["offset"] + -(-a.nbytes // _ALIGN) * _ALIGN


def load_binary(path: str | os.PathLike):
    """Memory-map a binary LM written by ``save_binary``; returns an ``NgramLM``."""
    from asrkit.lm.model import NgramLM

    path = os.fspath(path)
    with open(path, "rb") as f:
        if f.read(len(MAGIC)) != MAGIC:
            raise ValueError(f"{path}: not an asrkit binary LM (bad magic)")
        (hlen,) = struct.unpack("<Q", f.read(8))
        try:
            header = json.loads(f.read(hlen))
        except ValueError as e:
            raise ValueError(f"{path}: corrupt binary LM header: {e}") from None
    if header.get("version") != VERSION:
        raise ValueError(f"{path}: binary LM version {header.get('version')} is not supported "
                         f"(this asrkit reads version {VERSION})")
    start = -(-(len(MAGIC) + 8 + hlen) // _ALIGN) * _ALIGN
    size = os.path.getsize(path)

    def array(name: str) -> np.ndarray:
        try:
            spec = header["arrays"][name]
        except KeyError:
            raise ValueError(f"{path}: binary LM lacks the array {name!r}") from None
        dtype, shape = np.dtype(spec["dtype"]), tuple(spec["shape"])
        off = start + spec["offset"]
        nbytes = int(np.prod(shape)) * dtype.itemsize
        if off + nbytes > size:
            raise ValueError(f"{path}: truncated binary LM (array {name!r} runs past the end)")
        if nbytes == 0:
            return np.zeros(shape, dtype=dtype)
        # a plain ndarray view of the map: numba dispatches on it faster than on np.memmap
        return np.asarray(np.memmap(path, dtype=dtype, mode="r", offset=off, shape=shape))

    order = int(header["order"])
    vocab = bytes(array("vocab")).decode("utf-8").split("\n")
    words = [np.arange(len(vocab), dtype=np.int32).reshape(-1, 1)]
    ranks = [np.arange(len(vocab), dtype=np.int64)]
    for n in range(2, order + 1):
        words.append(array(f"words{n}"))
        ranks.append(array(f"rank{n}"))
    return NgramLM(vocab, array("keys"), array("prob"), array("bow"),
                   np.asarray(array("offsets")), words, ranks, source=path,
                   index=(array("table"), np.asarray(array("slots"))))
