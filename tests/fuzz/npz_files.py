"""Building and taking apart ``.npz`` archives byte by byte, for the model and checkpoint fuzz
tests: members with hand-written npy headers (a declared shape the data does not back, an object
dtype, a garbled header dict), and the JSON header of an asrkit archive edited as text."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np

HEADER = "__header__"


def npy_bytes(array: np.ndarray) -> bytes:
    """``array`` as the bytes of a ``.npy`` file."""
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asarray(array), allow_pickle=False)
    return buf.getvalue()


def npy_header(header_text: str, data: bytes = b"") -> bytes:
    """A version 1.0 ``.npy`` file whose header dict is ``header_text`` verbatim (padded as
    numpy pads it), followed by ``data``."""
    text = header_text.encode("latin1")
    pad = 64 - (10 + len(text) + 1) % 64
    text = text + b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text + data


def read_members(path) -> dict[str, bytes]:
    """``{member name without .npy: raw npy bytes}`` of an npz file, in file order."""
    with zipfile.ZipFile(path) as z:
        return {i.filename.removesuffix(".npy"): z.read(i) for i in z.infolist()}


def write_members(path, members: dict[str, bytes], compress: bool = False) -> None:
    """Write ``{name: npy bytes}`` as an npz file (valid zip, correct CRCs)."""
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", method) as z:
        for name, data in members.items():
            z.writestr(name + ".npy", data)


def header_of(members: dict[str, bytes]) -> dict:
    """The JSON header of an asrkit archive's members."""
    arr = np.load(io.BytesIO(members[HEADER]), allow_pickle=False)
    return json.loads(arr.tobytes().decode("utf-8"))


def header_member(header_text: str | bytes) -> bytes:
    """The npy bytes of a ``__header__`` member holding ``header_text`` (JSON, maybe broken)."""
    raw = header_text.encode("utf-8") if isinstance(header_text, str) else header_text
    return npy_bytes(np.frombuffer(raw, np.uint8))


def with_header(members: dict[str, bytes], header: dict | str | bytes) -> dict[str, bytes]:
    """A copy of ``members`` whose JSON header is ``header`` (a dict, or raw text)."""
    text = json.dumps(header, indent=1) if isinstance(header, dict) else header
    return {**members, HEADER: header_member(text)}
