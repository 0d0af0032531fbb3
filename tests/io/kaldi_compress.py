"""Kaldi's compressed matrices (``CM``, ``CM2``, ``CM3``), written and read element by element
as ``src/matrix/compressed-matrix.cc`` does, for the tests.

This is the test suite's ground truth for what ``copy-feats --compress=true`` writes: each step
repeats Kaldi's arithmetic in its own precision (float where Kaldi uses float, double where a
double constant promotes the expression), in plain scalar Python so it reads against the C++.

Layout of a binary compressed matrix: ``\\0B``, the token ``CM `` (format 1, 8-bit with
per-column headers, column-major), ``CM2 `` (format 2, 16-bit, row-major) or ``CM3 `` (format 3,
8-bit, row-major), then the global header without its format field: float32 ``min_value``,
float32 ``range``, int32 ``num_rows``, int32 ``num_cols``; for format 1, ``num_cols`` column
headers of four uint16 percentiles (0, 25, 75, 100) come before the bytes.
"""

from __future__ import annotations

import math
import struct

import numpy as np

F = np.float32
TOKENS = {1: b"CM ", 2: b"CM2 ", 3: b"CM3 "}


def _to_int(x: float) -> int:
    """C++ ``static_cast<int>`` of a double: truncation toward zero."""
    return int(math.trunc(x))


def _float_to_uint16(min_value: F, rng: F, value: F) -> int:
    f = F(F(F(value) - min_value) / rng)
    f = min(max(f, F(0.0)), F(1.0))
    return _to_int(float(F(f * F(65535))) + 0.499)


def _float_to_uint8(min_value: F, rng: F, value: F) -> int:
    f = F(F(F(value) - min_value) / rng)
    f = min(max(f, F(0.0)), F(1.0))
    return _to_int(float(F(f * F(255))) + 0.499)


def uint16_to_float(min_value: F, rng: F, value: int) -> F:
    """Kaldi's Uint16ToFloat: ``min + range * 1.52590218966964e-05F * value``, all in float."""
    return F(min_value + F(F(rng * F(1.52590218966964e-05)) * F(value)))


def char_to_float(p0: F, p25: F, p75: F, p100: F, value: int) -> F:
    """Kaldi's CharToFloat: the ``* (1/64.0)`` (a double) makes the rest of the sum double."""
    if value <= 64:
        return F(float(p0) + float(F(F(p25 - p0) * F(value))) * (1 / 64.0))
    if value <= 192:
        return F(float(p25) + float(F(F(p75 - p25) * F(value - 64))) * (1 / 128.0))
    return F(float(p75) + float(F(F(p100 - p75) * F(value - 192))) * (1 / 63.0))


def _float_to_char(p0: F, p25: F, p75: F, p100: F, value: F) -> int:
    if value < p25:
        ans = _to_int(float(F(F(F(value - p0) / F(p25 - p0)) * F(64))) + 0.5)
        return min(max(ans, 0), 64)
    if value < p75:
        ans = 64 + _to_int(float(F(F(F(value - p25) / F(p75 - p25)) * F(128))) + 0.5)
        return min(max(ans, 64), 192)
    ans = 192 + _to_int(float(F(F(F(value - p75) / F(p100 - p75)) * F(63))) + 0.5)
    return min(max(ans, 192), 255)


def _col_header(min_value: F, rng: F, column: np.ndarray) -> tuple[int, int, int, int]:
    s = sorted(F(x) for x in column)
    n = len(s)

    def q(x):
        return _float_to_uint16(min_value, rng, x)

    if n >= 5:
        quarter = n // 4
        p0 = min(q(s[0]), 65532)
        p25 = min(max(q(s[quarter]), p0 + 1), 65533)
        p75 = min(max(q(s[3 * quarter]), p25 + 1), 65534)
        p100 = max(q(s[n - 1]), p75 + 1)
    else:
        p0 = min(q(s[0]), 65532)
        p25 = min(max(q(s[1]), p0 + 1), 65533) if n > 1 else p0 + 1
        p75 = min(max(q(s[2]), p25 + 1), 65534) if n > 2 else p25 + 1
        p100 = max(q(s[3]), p75 + 1) if n > 3 else p75 + 1
    return p0, p25, p75, p100


def compressed_matrix_bytes(mat: np.ndarray, fmt: int) -> bytes:
    """The bytes ``CompressedMatrix::Write(binary=true)`` writes for ``mat`` (float32 [R, C],
    R > 0) compressed as format ``fmt`` (1: kSpeechFeature, 2: kTwoByteAuto, 3: kOneByteAuto)."""
    mat = np.asarray(mat, dtype=np.float32)
    rows, cols = mat.shape
    min_value, max_value = F(mat.min()), F(mat.max())
    if max_value == min_value:
        max_value = F(float(min_value) + (1.0 + abs(float(min_value))))
    rng = F(max_value - min_value)
    out = b"\0B" + TOKENS[fmt] + struct.pack("<ffii", min_value, rng, rows, cols)
    if fmt == 1:
        headers, data = [], bytearray()
        for c in range(cols):
            h = _col_header(min_value, rng, mat[:, c])
            headers.append(struct.pack("<4H", *h))
            p = [uint16_to_float(min_value, rng, v) for v in h]
            data += bytes(_float_to_char(*p, F(x)) for x in mat[:, c])
        return out + b"".join(headers) + bytes(data)
    if fmt == 2:
        return out + struct.pack(f"<{rows * cols}H", *(_float_to_uint16(min_value, rng, F(x))
                                                       for x in mat.ravel()))
    return out + bytes(_float_to_uint8(min_value, rng, F(x)) for x in mat.ravel())


def decompress(data: bytes) -> np.ndarray:
    """Kaldi's CompressedMatrix::CopyToMat of the bytes ``compressed_matrix_bytes`` returns:
    float32 [R, C], element by element."""
    assert data[:2] == b"\0B"
    fmt = {b"CM ": 1, b"CM2": 2, b"CM3": 3}[data[2:5]]
    pos = 2 + len(TOKENS[fmt])
    min_value, rng, rows, cols = struct.unpack_from("<ffii", data, pos)
    min_value, rng = F(min_value), F(rng)
    pos += 16
    out = np.zeros((rows, cols), np.float32)
    if fmt == 1:
        headers = [struct.unpack_from("<4H", data, pos + 8 * c) for c in range(cols)]
        pos += 8 * cols
        for c in range(cols):
            p = [uint16_to_float(min_value, rng, v) for v in headers[c]]
            for r in range(rows):
                out[r, c] = char_to_float(*p, data[pos + c * rows + r])
        return out
    width = 65535.0 if fmt == 2 else 255.0
    increment = F(float(rng) * (1.0 / width))  # float increment = range * (1.0 / 65535.0)
    values = (struct.unpack_from(f"<{rows * cols}H", data, pos) if fmt == 2
              else data[pos:pos + rows * cols])
    for i, v in enumerate(values):
        out[i // cols, i % cols] = F(min_value + F(F(v) * increment))
    return out
