"""Kaldi ark/scp tables: round trips through kaldi-io, the binary layout byte by byte, offsets."""

import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

from asrkit.io import (
    RandomAccessTable,
    TableError,
    TableWriter,
    read_rxfilename,
    read_script,
    read_table,
    read_table_dict,
    write_table,
)
from asrkit.io.kaldi_tables import kaldi_io, parse_wspecifier


@pytest.fixture
def tables(rng):
    return {
        "utt-a": rng.standard_normal((5, 3)).astype(np.float32),
        "utt-b": rng.standard_normal((1, 3)).astype(np.float32),
        "utt-c": rng.standard_normal((7, 3)).astype(np.float32),
    }


def _kaldi_float_matrix(key: str, m: np.ndarray) -> bytes:
    """The bytes Kaldi's ``Matrix<float>::Write(binary=true)`` puts in an archive, from its source:
    key, space, "\\0B", token "FM ", then rows and cols each as (size byte 4, int32 LE), then the
    row-major float32 data."""
    return (key.encode() + b" \0BFM " + b"\x04" + struct.pack("<i", m.shape[0]) + b"\x04"
            + struct.pack("<i", m.shape[1]) + m.astype("<f4").tobytes())


def test_binary_layout_byte_by_byte(tmp_path, tables):
    ark, scp = tmp_path / "f.ark", tmp_path / "f.scp"
    write_table(f"ark,scp:{ark},{scp}", tables)
    expected = b"".join(_kaldi_float_matrix(k, m) for k, m in tables.items())
    assert ark.read_bytes() == expected
    # and kaldi-io's own writer produces the same bytes
    ref = tmp_path / "ref.ark"
    with open(ref, "wb") as f:
        for k, m in tables.items():
            kaldi_io().write_mat(f, m, key=k)
    assert ref.read_bytes() == expected
    # scp offsets point just past "key " at the binary marker
    data = ark.read_bytes()
    for key, rx in read_script(str(scp)):
        path, off = rx.rsplit(":", 1)
        off = int(off)
        assert path == str(ark)
        assert data[off - len(key) - 1:off] == key.encode() + b" "
        assert data[off:off + 5] == b"\0BFM "


def test_round_trip_through_kaldi_io(tmp_path, tables, rng):
    ark, scp = tmp_path / "f.ark", tmp_path / "f.scp"
    entries = write_table(f"ark,scp:{ark},{scp}", tables)
    assert [k for k, _ in entries] == list(tables)
    k = kaldi_io()
    by_scp = dict(k.read_mat_scp(str(scp)))
    by_ark = dict(k.read_mat_ark(str(ark)))
    for key, m in tables.items():
        np.testing.assert_array_equal(by_scp[key], m)
        np.testing.assert_array_equal(by_ark[key], m)
    # and the other way: what kaldi-io writes, we read
    ref = tmp_path / "ref.ark"
    with open(ref, "wb") as f:
        for key, m in tables.items():
            k.write_mat(f, m, key=key)
    for spec in (f"ark:{ref}", f"ark:cat {ref} |"):
        got = read_table_dict(spec)
        assert list(got) == list(tables)
        for key, m in tables.items():
            np.testing.assert_array_equal(got[key], m)
            assert got[key].dtype == np.float32


def test_double_matrices_vectors_and_int_vectors(tmp_path, rng):
    values = {
        "spk1": rng.standard_normal((2, 4)),  # cmvn stats: Matrix<double>
        "vec": rng.standard_normal(6).astype(np.float32),
        "dvec": rng.standard_normal(3),
        "ali": np.array([3, 1, 4, 1, 5], dtype=np.int32),
        "empty": np.zeros(0, dtype=np.int32),
    }
    ark, scp = tmp_path / "x.ark", tmp_path / "x.scp"
    write_table(f"ark,scp:{ark},{scp}", values)
    data = ark.read_bytes()
    assert b"spk1 \0BDM " in data and b"vec \0BFV " in data and b"dvec \0BDV " in data
    k = kaldi_io()
    off = dict(read_script(str(scp)))
    np.testing.assert_array_equal(k.read_mat(off["spk1"]), values["spk1"])
    np.testing.assert_array_equal(k.read_vec_flt(off["vec"]), values["vec"])
    np.testing.assert_array_equal(k.read_vec_int(off["ali"]), values["ali"])
    for spec in (f"scp:{scp}", f"ark:{ark}"):
        got = read_table_dict(spec)
        for key, v in values.items():
            assert got[key].dtype == v.dtype, key
            np.testing.assert_array_equal(got[key], v)


def test_random_access_by_scp_offsets_and_ranges(tmp_path, tables):
    ark, scp = tmp_path / "f.ark", tmp_path / "f.scp"
    write_table(f"ark,scp:{ark},{scp}", tables)
    for spec in (f"scp:{scp}", f"ark:{ark}"):
        table = RandomAccessTable(spec)
        assert len(table) == 3 and "utt-b" in table and "nope" not in table
        for key in ("utt-c", "utt-a", "utt-b"):  # any order
            np.testing.assert_array_equal(table[key], tables[key])
        with pytest.raises(KeyError, match="nope"):
            table["nope"]
    rx = dict(read_script(str(scp)))["utt-c"]
    np.testing.assert_array_equal(read_rxfilename(rx + "[2:4]"), tables["utt-c"][2:5])
    np.testing.assert_array_equal(read_rxfilename(rx + "[1:3,0:1]"), tables["utt-c"][1:4, 0:2])
    np.testing.assert_array_equal(read_rxfilename(rx + "[:,2:2]"), tables["utt-c"][:, 2:3])


def test_text_mode_is_read_by_kaldi_io(tmp_path, tables):
    txt = tmp_path / "f.txt"
    write_table(f"ark,t:{txt}", tables)
    text = txt.read_text()
    assert text.startswith("utt-a  [\n  ") and text.rstrip().endswith("]")
    ours = read_table_dict(f"ark:{txt}")
    theirs = dict(kaldi_io().read_mat_ark(str(txt)))
    for key, m in tables.items():
        np.testing.assert_allclose(ours[key], m, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(theirs[key], m, rtol=1e-5, atol=1e-6)


def test_stdin_and_stdout_streams(tmp_path, tables):
    ark = tmp_path / "f.ark"
    write_table(f"ark:{ark}", tables)
    code = ("import sys; from asrkit.io import read_table; "
            "print(' '.join(f'{k}:{v.shape[0]}' for k, v in read_table('ark:-')))")
    with open(ark, "rb") as f:
        out = subprocess.run([sys.executable, "-c", code], stdin=f, capture_output=True,
                             check=True, text=True).stdout
    assert out.split() == [f"{k}:{m.shape[0]}" for k, m in tables.items()]
    code = ("import numpy as np; from asrkit.io import write_table; "
            "write_table('ark:-', {'k1': np.ones((2, 2), np.float32)})")
    raw = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True).stdout
    assert raw == _kaldi_float_matrix_ones()
    piped = tmp_path / "piped.ark"
    write_table(f"ark:| cat > {piped}", tables)
    assert piped.read_bytes() == ark.read_bytes()


def _kaldi_float_matrix_ones():
    return b"k1 \0BFM \x04" + struct.pack("<i", 2) + b"\x04" + struct.pack("<i", 2) + \
        np.ones(4, "<f4").tobytes()


def test_writer_is_atomic(tmp_path, tables):
    ark, scp = tmp_path / "f.ark", tmp_path / "f.scp"
    with pytest.raises(RuntimeError):
        with TableWriter(f"ark,scp:{ark},{scp}") as w:
            w.write("utt-a", tables["utt-a"])
            raise RuntimeError("crash in the middle")
    assert os.listdir(tmp_path) == []
    with TableWriter(f"ark,scp:{ark},{scp}") as w:
        w.write("utt-a", tables["utt-a"])
        assert not ark.exists()  # only the temporary file until close
    assert ark.exists() and scp.exists()


def test_bad_input_is_named(tmp_path, tables):
    with pytest.raises(TableError, match="not a table rspecifier"):
        list(read_table("feats.scp"))
    with pytest.raises(TableError, match="two files"):
        parse_wspecifier("ark,scp:only.ark")
    assert parse_wspecifier("scp,ark:a.ark,a.scp")[:2] == ("a.ark", "a.scp")
    bad_scp = tmp_path / "bad.scp"
    bad_scp.write_text("utt-a /x.ark:0\nlonely\n")
    with pytest.raises(TableError, match=r"bad\.scp:2: expected 'key rxfilename'"):
        read_script(str(bad_scp))
    ark = tmp_path / "f.ark"
    write_table(f"ark:{ark}", tables)
    truncated = tmp_path / "t.ark"
    truncated.write_bytes(ark.read_bytes()[:-10])
    with pytest.raises(TableError, match=r"t\.ark: key 'utt-c'"):
        list(read_table(f"ark:{truncated}"))
    with TableWriter(f"ark:{tmp_path / 'k.ark'}") as w:
        with pytest.raises(TableError, match="invalid key"):
            w.write("has space", tables["utt-a"])
        with pytest.raises(TableError, match="int8"):
            w.write("k", np.zeros((2, 2), np.int8))
    with pytest.raises(TableError, match="exited with status"):
        list(read_table("ark:exit 4 |"))


@pytest.mark.skipif(shutil.which("copy-feats") is None, reason="Kaldi's copy-feats not installed")
def test_kaldi_copy_feats_reads_our_archive(tmp_path, tables):
    ark, scp = tmp_path / "f.ark", tmp_path / "f.scp"
    write_table(f"ark,scp:{ark},{scp}", tables)
    out = tmp_path / "copy.ark"
    subprocess.run(["copy-feats", f"scp:{scp}", f"ark:{out}"], check=True)
    assert out.read_bytes() == ark.read_bytes()


# ------------------------------------------------------------------ compressed matrices

def _feature_like(rng, rows, cols):
    """Log-mel-like values: a different offset and spread per column, as copy-feats sees."""
    return (rng.standard_normal((rows, cols)) * rng.uniform(0.5, 4, cols)
            + rng.uniform(-5, 15, cols)).astype(np.float32)


@pytest.mark.parametrize("fmt", [1, 2, 3])
@pytest.mark.parametrize("shape", [(40, 23), (9, 3), (4, 5), (1, 2), (6, 1)])
def test_compressed_matrices_decode_as_kaldi_does(tmp_path, rng, fmt, shape):
    """Archives as copy-feats --compress=true writes them (bytes from compressed-matrix.cc, see
    tests/io/kaldi_compress.py) read back exactly as Kaldi's CopyToMat computes them."""
    from tests.io.kaldi_compress import compressed_matrix_bytes, decompress

    mats = {"a": _feature_like(rng, *shape), "b": np.full(shape, 2.5, np.float32),
            "c": _feature_like(rng, shape[0] + 2, shape[1])}
    blobs = {k: compressed_matrix_bytes(m, fmt) for k, m in mats.items()}
    ark = tmp_path / "c.ark"
    ark.write_bytes(b"".join(k.encode() + b" " + b for k, b in blobs.items()))
    got = read_table_dict(f"ark:{ark}")
    for key, m in mats.items():
        ref = decompress(blobs[key])  # Kaldi's formulas, element by element
        assert got[key].dtype == np.float32 and got[key].shape == m.shape
        np.testing.assert_array_equal(got[key], ref)
        # and the quantisation error is what the format allows
        step = {1: (m.max() - m.min()) / 63 + 1e-6, 2: (m.max() - m.min()) / 65535 + 1e-6,
                3: (m.max() - m.min()) / 255 + 1e-6}[fmt]
        assert np.abs(got[key] - m).max() <= max(step, 1e-5) * 1.01
    # through a script file with offsets and a row range, and random access
    scp = tmp_path / "c.scp"
    data = ark.read_bytes()
    scp.write_text("".join(f"{k} {ark}:{data.index(k.encode() + b' ' + b[:4]) + 2}\n"
                           for k, b in blobs.items()))
    np.testing.assert_array_equal(RandomAccessTable(f"scp:{scp}")["c"], got["c"])
    rx = dict(read_script(str(scp)))["c"]
    np.testing.assert_array_equal(read_rxfilename(rx + "[1:2]"), got["c"][1:3])


@pytest.mark.parametrize("fmt,method", [(1, 2), (2, 3), (3, 5)])
def test_compressed_bytes_agree_with_kaldiio(tmp_path, rng, fmt, method):
    """kaldiio (a second, independent implementation) writes the same bytes for typical feature
    matrices, and reads our archive to the same values. Two known kaldiio deviations from
    compressed-matrix.cc are avoided: it adds the 0.499 rounding term in float32 (Kaldi: double)
    and it computes the percentiles of matrices under 5 rows in float."""
    kaldiio = pytest.importorskip("kaldiio")
    from tests.io.kaldi_compress import compressed_matrix_bytes

    m = _feature_like(rng, 30, 13)
    ours = compressed_matrix_bytes(m, fmt)
    kaldiio.save_ark(str(tmp_path / "k.ark"), {"u": m}, compression_method=method)
    theirs = (tmp_path / "k.ark").read_bytes()[2:]
    a = np.frombuffer(ours, np.uint8).astype(int)
    b = np.frombuffer(theirs, np.uint8).astype(int)
    assert a.shape == b.shape and ours[:22] == theirs[:22]
    assert np.mean(a != b) < 0.01  # only the float32 rounding-term ties differ
    (tmp_path / "o.ark").write_bytes(b"u " + ours)
    np.testing.assert_allclose(read_table_dict(f"ark:{tmp_path / 'o.ark'}")["u"],
                               dict(kaldiio.load_ark(str(tmp_path / "o.ark")))["u"],
                               rtol=0, atol=1e-5)


# ------------------------------------------------------------------ damage is an error

def _fm(m):
    return (b"\0BFM \x04" + struct.pack("<i", m.shape[0]) + b"\x04" + struct.pack("<i", m.shape[1])
            + m.astype("<f4").tobytes())


def test_negative_and_impossible_dimensions(tmp_path, tables):
    good = _fm(tables["utt-a"])
    for rows, message in ((-3, "negative FM row count -3"),
                          (2**31 - 1, "needs 25769803764 bytes")):
        bad = bytearray(good)
        struct.pack_into("<i", bad, 6, rows)
        (tmp_path / "n.ark").write_bytes(b"k " + bytes(bad))
        with pytest.raises(TableError, match=message):
            read_table_dict(f"ark:{tmp_path / 'n.ark'}")
        with pytest.raises(TableError, match=message):  # and through a pipe
            read_table_dict(f"ark:cat {tmp_path / 'n.ark'} |")
    from tests.io.kaldi_compress import compressed_matrix_bytes

    bad = bytearray(compressed_matrix_bytes(tables["utt-a"], 2))
    struct.pack_into("<i", bad, 18, -1)
    (tmp_path / "c.ark").write_bytes(b"k " + bytes(bad))
    with pytest.raises(TableError, match=r"negative CM2 dimension 5x-1"):
        read_table_dict(f"ark:{tmp_path / 'c.ark'}")


def test_duplicate_keys_are_errors(tmp_path, tables):
    ark = tmp_path / "d.ark"
    ark.write_bytes(b"x " + _fm(tables["utt-a"]) + b"y " + _fm(tables["utt-b"]) + b"x "
                    + _fm(tables["utt-c"]))
    with pytest.raises(TableError, match=r"d\.ark: duplicate key 'x'"):
        list(read_table(f"ark:{ark}"))
    scp = tmp_path / "d.scp"
    scp.write_text(f"x {ark}:2\nx {ark}:2\n")
    with pytest.raises(TableError, match=r"d\.scp:2: duplicate key 'x' \(first on line 1\)"):
        read_script(str(scp))


def test_entries_carry_their_own_errors(tmp_path, tables):
    """read_table_entries: a bad script line fails that entry only; a damaged archive value
    ends the archive with an error entry naming the key."""
    from asrkit.io import read_table_entries

    ark, scp = tmp_path / "f.ark", tmp_path / "f.scp"
    write_table(f"ark,scp:{ark},{scp}", tables)
    lines = scp.read_text().splitlines()
    size = ark.stat().st_size
    off_b = int(lines[1].rsplit(":", 1)[1])
    bad = [lines[0], f"utt-b {ark}:{size + 5}", f"utt-x {ark}.gone:{off_b}",
           f"utt-y {ark}:{off_b}[0:9]", "lonely", lines[2], lines[0]]
    scp.write_text("\n".join(bad) + "\n")
    got = list(read_table_entries(f"scp:{scp}"))
    assert [e.key for e in got] == ["utt-a", "utt-b", "utt-x", "utt-y", "lonely", "utt-c",
                                    "utt-a"]
    assert [e.error is None for e in got] == [True, False, False, False, False, True, False]
    messages = [str(e.error) for e in got if e.error is not None]
    assert "f.scp:2: key 'utt-b'" in messages[0] and "past the end" in messages[0]
    assert "f.ark.gone: no such file" in messages[1]
    assert "row range 0:9 is outside the matrix (1 rows)" in messages[2]
    assert "f.scp:5: expected 'key rxfilename'" in messages[3]
    assert "f.scp:7: key 'utt-a': duplicate key (first on line 1)" in messages[4]

    data = ark.read_bytes()
    cut = tmp_path / "cut.ark"
    cut.write_bytes(data[:data.index(b"utt-c") + 20])
    got = list(read_table_entries(f"ark:{cut}"))
    assert [e.key for e in got] == ["utt-a", "utt-b", "utt-c"]
    assert "cut.ark: key 'utt-c': unexpected end of file" in str(got[2].error)
    assert "rest of the archive cannot be read" in str(got[2].error)


def test_pipes_time_out(tmp_path, monkeypatch):
    monkeypatch.setenv("ASRKIT_PIPE_TIMEOUT", "0.5")
    import time

    t0 = time.monotonic()
    with pytest.raises(TableError, match=r"'sleep 20 \|' timed out after 0.5 s"):
        list(read_table("ark:sleep 20 |"))
    with pytest.raises(TableError, match="timed out"):
        read_rxfilename("printf '\\0BFM '; sleep 20 |")
    assert time.monotonic() - t0 < 5
    with pytest.raises(TableError, match=r"exited with status 3: oops"):
        read_rxfilename("echo oops >&2; exit 3 |")
