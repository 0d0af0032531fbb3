"""The checked npz reader: what numpy writes reads back bit for bit; what a damaged or hostile
file declares is checked before anything is allocated or read."""

import io
import zipfile

import numpy as np
import pytest

from asrkit.utils.npz import NpzError, NpzReader
from tests.fuzz.npz_files import npy_bytes, npy_header, write_members

F4 = "'descr': '<f4', 'fortran_order': False"


@pytest.mark.parametrize("compress", [False, True], ids=["stored", "deflated"])
def test_reads_what_numpy_writes(tmp_path, rng, compress):
    arrays = {"f32": rng.standard_normal((3, 4)).astype(np.float32),
              "f64_fortran": np.asfortranarray(rng.standard_normal((5, 2))),
              "big_endian": np.arange(6, dtype=">i4").reshape(2, 3),
              "u8": np.frombuffer(b"hello", np.uint8), "bool": np.array([True, False]),
              "c64": (rng.standard_normal(3) + 1j).astype(np.complex64),
              "scalar": np.float32(2.5), "empty": np.zeros((0, 7), np.float32)}
    path = tmp_path / "a.npz"
    (np.savez_compressed if compress else np.savez)(path, **arrays)
    with NpzReader(path) as z, np.load(path) as ref:
        assert z.names == list(arrays)
        for k in arrays:
            got = z.read(k)
            assert got.dtype == ref[k].dtype and got.shape == ref[k].shape
            np.testing.assert_array_equal(got, ref[k])
            assert z.info(k) == (ref[k].shape, ref[k].dtype)


def test_checks_shape_and_kind_the_caller_expects(tmp_path):
    path = tmp_path / "a.npz"
    np.savez(path, w=np.zeros((4, 3), np.float32), i=np.arange(3))
    with NpzReader(path) as z:
        assert z.read("w", shape=(4, 3), kinds="f").shape == (4, 3)
        with pytest.raises(NpzError, match=r"a.npz: member 'w': shape \[4, 3\], expected \[3, 4\]"):
            z.read("w", shape=(3, 4))
        with pytest.raises(NpzError, match="member 'i': dtype '<i8', expected one of kinds 'f'"):
            z.read("i", kinds="f")
        with pytest.raises(NpzError, match="member 'nope': missing"):
            z.read("nope")
        with pytest.raises(NpzError, match="needs 48 B, more than the 10 B allowed"):
            z.read("w", max_bytes=10)


@pytest.mark.parametrize("member,match", [
    (npy_header(f"{{{F4}, 'shape': (100000, 100000), }}", b"\0" * 64),
     r"header declares shape \[100000, 100000\] of <f4 \(37.3 GiB\), the file holds 64 B"),
    (npy_header("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", b"\0" * 16),
     "dtype '|O' is not a plain number type"),
    (npy_header("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", b"\0" * 8),
     "dtype '.V4' is not a plain number type"),
    (npy_header(f"{{{F4}, 'shape': (-4, 3), }}", b"\0" * 48), "negative dimension"),
    (npy_header(f"{{{F4}, 'shape': (4, 3), ", b"\0" * 48), "bad npy header"),
    (npy_header("[1, 2, 3]", b""), "bad npy header"),
    (b"\x93NUMPY\x07\x00" + b"\0" * 100, r"npy format version \(7, 0\) is not supported"),
    (b"not npy at all", "bad npy header"),
], ids=["declared-37GiB", "object", "record", "negative-dim", "unterminated", "not-a-dict",
        "version-7", "no-magic"])
def test_a_hostile_member_is_refused_before_its_data_is_read(tmp_path, member, match):
    path = tmp_path / "h.npz"
    write_members(path, {"ok": npy_bytes(np.ones(2, np.float32)), "bad": member})
    with NpzReader(path) as z:
        np.testing.assert_array_equal(z.read("ok"), [1, 1])  # the others still read
        with pytest.raises(NpzError, match=f"h.npz: member 'bad': {match}"):
            z.read("bad")


def test_damaged_data_fails_the_zip_crc(tmp_path):
    path = tmp_path / "c.npz"
    np.savez(path, w=np.arange(1000, dtype=np.float32))
    data = bytearray(path.read_bytes())
    data[data.index(b"\x00\x00\x80\x3f") + 2] ^= 0xFF  # a byte inside w's data (1.0f)
    path.write_bytes(bytes(data))
    with NpzReader(path) as z, pytest.raises(NpzError, match="member 'w': unreadable data "
                                                             r"\(BadZipFile: Bad CRC-32"):
        z.read("w")


@pytest.mark.parametrize("content,match", [
    (b"", "empty file"), (b"PK\x03\x04 torn", "not an npz archive"),
    (b"\x00" * 100, "not an npz archive")], ids=["empty", "torn", "zeros"])
def test_a_file_that_is_no_zip(tmp_path, content, match):
    path = tmp_path / "x.npz"
    path.write_bytes(content)
    with pytest.raises(NpzError, match=f"x.npz: {match}"):
        NpzReader(path)
    with pytest.raises(NpzError, match="is a directory"):
        NpzReader(tmp_path)
    with pytest.raises(NpzError, match="no such file"):
        NpzReader(tmp_path / "nope.npz")


@pytest.mark.filterwarnings("ignore:Duplicate name")
def test_a_name_twice_is_refused(tmp_path):
    path = tmp_path / "d.npz"
    with zipfile.ZipFile(path, "w") as z:
        for _ in range(2):
            buf = io.BytesIO()
            np.save(buf, np.zeros(2))
            z.writestr("w.npy", buf.getvalue())
    with pytest.raises(NpzError, match="member 'w' appears twice"):
        NpzReader(path)
