"""The vocabulary follows asrkit.lm's conventions."""

import pytest

from asrkit.nnlm import TextFormatError, Vocabulary, read_sentences
from tests.nnlm.conftest import ngram

TEXT = ["b a c", "a d", "e a a b"]


def test_ids_match_the_ngram_toolkit():
    voc = Vocabulary.from_sentences([s.split() for s in TEXT])
    assert voc.words == ngram(TEXT, 2).vocab  # <unk> <s> </s>, then first appearance
    assert voc.encode(["a", "zzz", "</s>"]).tolist() == [voc.ids["a"], 0, 2]
    assert voc.is_oov("zzz") and voc.is_oov("<unk>") and not voc.is_oov("a")


def test_top_k_and_vocab_file(tmp_path):
    top = Vocabulary.from_sentences([s.split() for s in TEXT], top_k=2)
    assert top.words == ["<unk>", "<s>", "</s>", "b", "a"]
    f = tmp_path / "words.txt"
    f.write_text("d 10\nz\na\n")
    limited = Vocabulary.from_sentences([s.split() for s in TEXT], vocab_file=str(f))
    assert limited.words == ["<unk>", "<s>", "</s>", "a", "d", "z"]
    assert Vocabulary.from_file(f).words == ["<unk>", "<s>", "</s>", "d", "z", "a"]


def test_bad_vocabularies_and_text(tmp_path):
    with pytest.raises(ValueError, match="starts with"):
        Vocabulary(["a", "<s>", "</s>"])
    with pytest.raises(ValueError, match="twice"):
        Vocabulary(["<unk>", "<s>", "</s>", "a", "a"])
    t = tmp_path / "t.txt"
    t.write_text("a b\n\nc <s> d\n")
    with pytest.raises(TextFormatError, match=r"t.txt:3"):
        read_sentences(t)


def test_a_line_that_is_not_utf8_is_named(tmp_path):
    t = tmp_path / "text.txt"
    t.write_bytes(b"one two\nthree four\n" + b"caf\xe9 five\n")
    with pytest.raises(TextFormatError, match=r"text\.txt:3: not UTF-8: invalid .* at byte 3"):
        read_sentences(t)
    t.write_bytes(b"one two\n\nthree\n")
    assert read_sentences(t) == [["one", "two"], ["three"]]
