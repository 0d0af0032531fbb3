"""The Fst type, its builder, symbol tables, the OpenFst text format and the binary form."""

import numpy as np
import pytest

from asrkit.decoders.fst import (
    Fst,
    FstBuilder,
    SymbolTable,
    accept,
    linear_fst,
    load_fst,
    read_fst_text,
    relabel,
    remove_disambig,
    write_fst_text,
)

TEXT = """0\t1\ta\tx\t0.5
0\t2\tb\t<eps>\t1.25
1\t3\tc\ty
2\t3\ta\tx\t0.25
3\t1.5
"""


def tables():
    isyms = SymbolTable.from_symbols(["a", "b", "c"])
    osyms = SymbolTable.from_symbols(["x", "y"])
    return isyms, osyms


def test_builder_compiles_sorted_csr():
    b = FstBuilder()
    s = [b.add_state() for _ in range(3)]
    b.set_start(s[0])
    b.add_arc(s[1], s[2], 3, 3, 0.5)
    b.add_arc(s[0], s[1], 1, 2, 1.0)
    b.add_arc(s[0], s[2], 2)
    b.set_final(s[2], 0.25)
    f = b.compile()
    assert (f.num_states, f.num_arcs, f.start) == (3, 3, 0)
    np.testing.assert_array_equal(f.offsets, [0, 2, 3, 3])
    assert f.arcs(0) == [(1, 2, 1.0, 1), (2, 2, 0.0, 2)]  # insertion order kept per state
    assert f.weight.dtype == np.float32 and b.compile(np.float64).weight.dtype == np.float64
    assert f.is_final(2) and not f.is_final(0)
    with pytest.raises(ValueError, match="out of range"):
        b.add_arc(0, 7, 1)


def test_text_round_trip_with_symbols():
    isyms, osyms = tables()
    f = Fst.from_text(TEXT, isymbols=isyms, osymbols=osyms)
    assert (f.num_states, f.num_arcs, f.start) == (4, 4, 0)
    assert f.arcs(0) == [(1, 1, 0.5, 1), (2, 0, 1.25, 2)]
    assert f.final[3] == pytest.approx(1.5)
    assert f.to_text() == TEXT
    ints = Fst(f.num_states, f.start, f.final, f.src, f.dst, f.ilabel, f.olabel, f.weight)
    assert ints.to_text().splitlines()[0] == "0\t1\t1\t1\t0.5"


def test_acceptor_text_and_start_from_first_line():
    f = Fst.from_text("2\t0\t1\n0\t1\t2\t0.5\n1\n", acceptor=True)
    assert f.start == 2 and f.is_acceptor
    assert f.to_text(acceptor=True).splitlines()[0] == "2\t0\t1"
    assert Fst.from_text("").num_states == 0
    only_final = Fst.from_text("0 0.5\n")
    assert only_final.start == 0 and accept(only_final, []) == pytest.approx(0.5)


def test_text_errors_name_the_line(tmp_path):
    isyms, osyms = tables()
    with pytest.raises(ValueError, match=r"<string>:2: input symbol 'q'"):
        Fst.from_text("0 1 a x\n1 2 q y\n2\n", isymbols=isyms, osymbols=osyms)
    with pytest.raises(ValueError, match=r":1: .*not an integer"):
        Fst.from_text("0 1 a x\n")
    with pytest.raises(ValueError, match=r":1: weight 'w'"):
        Fst.from_text("0 1 1 1 w\n")
    p = tmp_path / "bad.fst.txt"
    p.write_text("0 1 1 1\n0 1 1 1 1 1 1\n")
    with pytest.raises(ValueError, match=r"bad.fst.txt:2: expected 4 or 5 fields"):
        read_fst_text(p)


def test_text_and_binary_files(tmp_path):
    isyms, osyms = tables()
    f = Fst.from_text(TEXT, isymbols=isyms, osymbols=osyms)
    write_fst_text(f, tmp_path / "f.txt")
    g = read_fst_text(tmp_path / "f.txt", isymbols=isyms, osymbols=osyms)
    np.testing.assert_array_equal(g.ilabel, f.ilabel)
    f.astype(np.float64).save(tmp_path / "f.npz")
    h = load_fst(tmp_path / "f.npz")
    assert h.weight.dtype == np.float64 and h.isymbols == isyms and h.osymbols == osyms
    for name in ("src", "dst", "ilabel", "olabel", "final", "offsets"):
        np.testing.assert_array_equal(getattr(h, name), getattr(f, name))
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="junk.npz: not an asrkit binary FST"):
        load_fst(tmp_path / "junk.npz")


def test_symbol_table(tmp_path):
    t = SymbolTable.from_symbols(["a", "b"])
    assert t.id("b") == 2 and t.symbol(0) == "<eps>" and len(t) == 3
    assert t.add_symbol("z", 10) == 10 and t.add_symbol("y") == 11
    t.write_text(tmp_path / "words.txt")
    assert SymbolTable.read_text(tmp_path / "words.txt") == t
    (tmp_path / "bad.txt").write_text("<eps> 0\na 1\nb 1\n")
    with pytest.raises(ValueError, match=r"bad.txt:3: id 1 of 'b' is already used by 'a'"):
        SymbolTable.read_text(tmp_path / "bad.txt")
    with pytest.raises(KeyError, match="'nope'"):
        t.id("nope")


def test_relabel_and_remove_disambig():
    isyms, osyms = tables()
    f = Fst.from_text(TEXT, isymbols=isyms, osymbols=osyms)
    g = relabel(f, imap={1: 3, 3: 1})
    np.testing.assert_array_equal(g.ilabel, [3, 2, 1, 3])
    new_isyms = SymbolTable.from_symbols(["c", "b", "a"])
    h = relabel(f, isymbols=new_isyms)
    assert [new_isyms.symbol(i) for i in h.ilabel] == [isyms.symbol(i) for i in f.ilabel]
    r = remove_disambig(f, ilabels=[2], olabels=[2])
    np.testing.assert_array_equal(r.ilabel, [1, 0, 3, 1])
    np.testing.assert_array_equal(r.olabel, [1, 0, 0, 1])


def test_linear_fst_and_accept():
    lin = linear_fst([1, 2, 3], [4, 0, 5], weight=0.5)
    assert lin.num_states == 4 and accept(lin, [1, 2, 3]) == pytest.approx(0.5)
    assert accept(lin, [1, 2]) == np.inf
