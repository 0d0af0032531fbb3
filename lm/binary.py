"""The asrkit binary LM format: one file of memory-mapped numpy arrays behind an offset table.

Layout: the 8-byte magic ``ASRKITLM``, a little-endian uint64 header length, a UTF-8 JSON
header ``{"version", "order", "arrays": {name: {"dtype", "shape", "offset", "crc32"}}}``, then
each array at a 64-byte-aligned offset. The vocabulary is one array of UTF-8 bytes, words
separated by ``\\n`` (words never contain whitespace). The lookup hash index
(``query.build_index``) is stored too, so nothing is rebuilt on load. Loading maps the arrays
with ``np.memmap`` (read-only).

Nothing in the file is trusted: the query kernels index without bounds checks, so the loader
checks every array's dtype (one allowed per array), shape and extent against the file and the
other arrays, each array's CRC-32 (version 2; version 1 files have none), that word ids are
below the vocabulary size and ranks a permutation of their rows, and that each order's hash
table holds exactly its n-grams and so has free slots (lookups also give up after probing a
whole table, so even a table without one could never hang a query). Verifying reads the whole
file once, about 1.2 s per GB here (zlib's CRC-32 runs at about 0.9 GB/s), where mapping it
unverified (``verify=False``, for files you made yourself) takes milliseconds.
"""

from __future__ import annotations

import json
import os
import struct
import zlib

import numpy as np

from asrkit.lm.query import EMPTY
from asrkit.utils import atomic_open

MAGIC = b"ASRKITLM"
VERSION = 2  # 2: each array carries a CRC-32
_ALIGN = 64
_MAX_HEADER = 1 << 20  # bytes; a header lists 2 * order + 5 arrays, a few hundred bytes
MAX_ORDER = 64
_CRC_CHUNK = 1 << 24

# the one dtype each array may have (little-endian, as written)
_DTYPES = {"vocab": "|u1", "keys": "<u8", "prob": "<f4", "bow": "<f4", "offsets": "<i8",
           "table": "<u8", "slots": "<i8", "words": "<i4", "rank": "<i8"}


class BinaryLMError(ValueError):
    """A malformed or corrupt binary LM; the message starts with the file's path."""


def is_binary(path: str | os.PathLike) -> bool:
    """True when ``path`` starts with the asrkit binary LM magic."""
    with open(path, "rb") as f:
        return f.read(len(MAGIC)) == MAGIC


def _crc32(a: np.ndarray) -> int:
    """CRC-32 of an array's bytes (C order), read in chunks so a memory map is never copied."""
    flat = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    crc = 0
    for lo in range(0, flat.size, _CRC_CHUNK):
        crc = zlib.crc32(flat[lo: lo + _CRC_CHUNK], crc)
    return crc


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
    write_arrays(path, lm.order, arrays)


def write_arrays(path: str | os.PathLike, order: int, arrays: dict[str, np.ndarray]) -> None:
    """Write named arrays (those ``save_binary`` makes) as a binary LM file, atomically."""
    table = {}
    offset = 0
    for name, a in arrays.items():
        table[name] = {"dtype": a.dtype.str, "shape": list(a.shape), "offset": offset,
                       "crc32": _crc32(a)}
        offset += -(-a.nbytes // _ALIGN) * _ALIGN
    header = json.dumps({"version": VERSION, "order": order, "arrays": table}).encode()
    start = -(-(len(MAGIC) + 8 + len(header)) // _ALIGN) * _ALIGN
    with atomic_open(path, "wb") as f:
        f.write(MAGIC + struct.pack("<Q", len(header)) + header)
        f.write(b"\0" * (start - len(MAGIC) - 8 - len(header)))
        for name, a in arrays.items():
            f.write(np.ascontiguousarray(a).tobytes())
            f.write(b"\0" * (-a.nbytes % _ALIGN))
            assert f.tell() == start + table[name]["offset"] + -(-a.nbytes // _ALIGN) * _ALIGN


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def read_header(path: str) -> tuple[dict, int, int]:
    """``(header, start of the array region, file size)`` of a binary LM, the header's
    structure checked. Raises ``BinaryLMError`` naming ``path``; OSError when unreadable."""
    def bad(msg: str) -> BinaryLMError:
        return BinaryLMError(f"{path}: {msg}")

    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(len(MAGIC) + 8)
        if head[: len(MAGIC)] != MAGIC:
            raise bad("not an asrkit binary LM (bad magic)")
        if len(head) < len(MAGIC) + 8:
            raise bad("truncated binary LM (no header length)")
        (hlen,) = struct.unpack("<Q", head[len(MAGIC):])
        if hlen > min(_MAX_HEADER, size - len(head)):
            raise bad(f"corrupt binary LM: header length {hlen} does not fit the file "
                      f"({size} bytes)")
        raw = f.read(hlen)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise bad(f"corrupt binary LM header: {e}") from None
    if not isinstance(header, dict):
        raise bad("corrupt binary LM header: not a JSON object")
    version = header.get("version")
    if version not in (1, VERSION) or not _is_int(version):
        raise bad(f"binary LM version {version!r} is not supported (this asrkit reads "
                  f"versions 1 and {VERSION})")
    order = header.get("order")
    if not _is_int(order) or not 1 <= order <= MAX_ORDER:
        raise bad(f"corrupt binary LM header: order {order!r} is not in 1..{MAX_ORDER}")
    arrays = header.get("arrays")
    if not isinstance(arrays, dict):
        raise bad("corrupt binary LM header: no 'arrays' table")
    names = ["vocab", "keys", "prob", "bow", "offsets", "table", "slots"]
    names += [f"{kind}{n}" for n in range(2, order + 1) for kind in ("words", "rank")]
    if set(arrays) != set(names):
        extra, missing = sorted(set(arrays) - set(names)), sorted(set(names) - set(arrays))
        raise bad(f"corrupt binary LM header: arrays {missing} missing, {extra} unexpected "
                  f"for order {order}")
    start = -(-(len(MAGIC) + 8 + hlen) // _ALIGN) * _ALIGN
    for name in names:
        spec = arrays[name]
        kind = name.rstrip("0123456789")
        ndim = 2 if kind == "words" else 1
        if not isinstance(spec, dict):
            raise bad(f"corrupt binary LM header: array {name!r} is not described")
        if spec.get("dtype") != _DTYPES[kind]:
            raise bad(f"corrupt binary LM header: array {name!r} has dtype "
                      f"{spec.get('dtype')!r}, expected {_DTYPES[kind]!r}")
        shape, off = spec.get("shape"), spec.get("offset")
        if (not isinstance(shape, list) or len(shape) != ndim
                or not all(_is_int(d) and d >= 0 for d in shape)):
            raise bad(f"corrupt binary LM header: array {name!r} has shape {shape!r}")
        if not _is_int(off) or off < 0 or off % _ALIGN:
            raise bad(f"corrupt binary LM header: array {name!r} has offset {off!r}")
        nbytes = int(np.prod(shape, dtype=object)) * np.dtype(_DTYPES[kind]).itemsize
        if start + off + nbytes > size:
            raise bad(f"truncated binary LM (array {name!r} runs past the end)")
        crc = spec.get("crc32")
        if version >= 2 and not (_is_int(crc) and 0 <= crc < 2**32):
            raise bad(f"corrupt binary LM header: array {name!r} has no valid crc32")
    return header, start, size


def load_binary(path: str | os.PathLike, verify: bool = True):
    """Memory-map a binary LM written by ``save_binary``; returns an ``NgramLM``.

    Every structural fact the query kernels rely on is checked (see the module docstring);
    ``verify`` (default) also checks the CRC-32s, the word ids and ranks, and the values
    (log10 probabilities finite or -inf and <= 0, back-off weights finite), which reads the
    whole file. Errors raise ``BinaryLMError`` naming the file (OSError when it is unreadable).
    """
    from asrkit.lm.model import NgramLM

    path = os.fspath(path)
    header, start, _ = read_header(path)
    specs, order = header["arrays"], header["order"]

    def bad(msg: str) -> BinaryLMError:
        return BinaryLMError(f"{path}: corrupt binary LM: {msg}")

    def array(name: str) -> np.ndarray:
        spec = specs[name]
        dtype, shape = np.dtype(spec["dtype"]), tuple(spec["shape"])
        if 0 in shape:
            a = np.zeros(shape, dtype=dtype)
        else:
            # a plain ndarray view of the map: numba dispatches on it faster than on np.memmap
            a = np.asarray(np.memmap(path, dtype=dtype, mode="r", offset=start + spec["offset"],
                                     shape=shape))
        if verify and "crc32" in spec and _crc32(a) != spec["crc32"]:
            raise bad(f"array {name!r} fails its CRC-32 check (the file is damaged)")
        return a

    offsets = np.array(array("offsets"))
    if (len(offsets) != order + 1 or offsets[0] != 0 or np.any(np.diff(offsets) < 0)
            or offsets[1] < 1):
        raise bad("the n-gram offsets are not a non-decreasing list from 0")
    total = int(offsets[-1])
    counts = np.diff(offsets).tolist()
    keys, prob, bow = array("keys"), array("prob"), array("bow")
    if not len(keys) == len(prob) == len(bow) == total:
        raise bad(f"keys, prob and bow have {len(keys)}, {len(prob)} and {len(bow)} rows, "
                  f"the offsets say {total}")
    slots = np.array(array("slots"))
    if len(slots) != order + 1 or slots[0] != 0 or slots[1] != 0:
        raise bad("the hash slot offsets do not start 0, 0")
    for n in range(2, order + 1):
        m = int(slots[n] - slots[n - 1])
        # a power of two (the probe masks with size - 1) with at least one free slot
        if m < 2 or m & (m - 1) or m <= counts[n - 1]:
            raise bad(f"the {n}-gram hash table has {m} slots for {counts[n - 1]} n-grams")
    table = array("table")
    if len(table) != 2 * int(slots[-1]):
        raise bad(f"the hash table has {len(table)} words, the slot offsets say "
                  f"{2 * int(slots[-1])}")
    try:
        vocab = bytes(array("vocab")).decode("utf-8").split("\n")
    except UnicodeDecodeError as e:
        raise bad(f"the vocabulary is not UTF-8 ({e.reason})") from None
    v = counts[0]
    if len(vocab) != v:
        raise bad(f"the vocabulary has {len(vocab)} words, the model {v} unigrams")
    if len(set(vocab)) != v:
        raise bad("the vocabulary lists a word twice")
    words = [np.arange(v, dtype=np.int32).reshape(-1, 1)]
    ranks = [np.arange(v, dtype=np.int64)]
    for n in range(2, order + 1):
        w, r = array(f"words{n}"), array(f"rank{n}")
        m = counts[n - 1]
        if w.shape != (m, n) or r.shape != (m,):
            raise bad(f"the {n}-gram arrays have shapes {w.shape} and {r.shape}, the offsets "
                      f"say {m} rows")
        words.append(w)
        ranks.append(r)
    if verify:
        _check_values(bad, v, words, ranks, prob, bow)
        for n in range(2, order + 1):  # each n-gram in one slot, the other slots free
            used = np.count_nonzero(table[2 * slots[n - 1] + 1: 2 * slots[n]: 2] != EMPTY)
            if used != counts[n - 1]:
                raise bad(f"the {n}-gram hash table holds {used} entries for "
                          f"{counts[n - 1]} n-grams")
    return NgramLM(vocab, keys, prob, bow, offsets, words, ranks, source=path,
                   index=(table, slots))


def _check_values(bad, v: int, words, ranks, prob, bow) -> None:
    """Word ids below ``v``, ranks a permutation of their rows, log10 probabilities <= 0 and
    not NaN, back-off weights finite; raises ``bad(message)``."""
    for n in range(2, len(words) + 1):
        w, r = words[n - 1], ranks[n - 1]
        if w.size and (w.min() < 0 or w.max() >= v):
            raise bad(f"a {n}-gram has a word id outside the vocabulary (0..{v - 1})")
        if r.size and (r.min() < 0 or r.max() >= len(r)
                       or np.bincount(r, minlength=len(r)).max() != 1):
            raise bad(f"the {n}-gram ranks are not a permutation of their rows")
    if np.isnan(prob).any() or (prob > 0).any():
        raise bad("a log10 probability is NaN or above 0")
    if not np.isfinite(bow).all():
        raise bad("a back-off weight is not finite")
