"""Streamed counting against a plain ``collections.Counter`` over padded sentences."""

import collections

import numpy as np
import pytest

from asrkit.lm import count_ngrams
from asrkit.lm.counts import TextFormatError


def _counter(lines, order, vocab=None):
    out = collections.Counter()
    for line in lines:
        toks = line.split()
        if not toks:
            continue
        if vocab is not None:
            toks = [w if w in vocab else "<unk>" for w in toks]
        toks = ["<s>", *toks, "</s>"]
        for n in range(1, order + 1):
            for i in range(len(toks) - n + 1):
                out[tuple(toks[i:i + n])] += 1
    return out


def _as_counter(c):
    out = collections.Counter()
    for words, counts in zip(c.words, c.counts):
        for row, k in zip(words.tolist(), counts.tolist()):
            if k:
                out[tuple(c.vocab[i] for i in row)] = k
    return out


def test_counts_equal_counter_with_odd_whitespace_and_small_chunks(rng):
    words = [f"w{i}" for i in range(30)]
    lines = []
    for _ in range(300):
        toks = [words[int(i)] for i in rng.zipf(1.5, int(rng.integers(0, 15))) % 30]
        sep = ["  ", "\t", " ", " \t "][int(rng.integers(0, 4))]
        lines.append(sep.join(toks) + [" \n", "\r\n", "\n", "\t\n"][int(rng.integers(0, 4))])
    lines += ["\n", "   \n", "\r\n"]
    c = count_ngrams(lines, 4, chunk_bytes=200)  # many chunks: exercises the merges
    assert _as_counter(c) == _counter(lines, 4)
    assert c.sentences == sum(1 for line in lines if line.split())
    assert c.tokens == sum(len(line.split()) for line in lines)
    assert c.vocab[:3] == ["<unk>", "<s>", "</s>"]
    for h in c.hashes[1:]:
        assert np.all(h[1:] > h[:-1])


def test_file_and_iterable_agree(tmp_path, test_text):
    lines = test_text.read_text().splitlines(keepends=True)
    a = _as_counter(count_ngrams(str(test_text), 3, chunk_bytes=64))
    b = _as_counter(count_ngrams(lines, 3))
    assert a == b == _counter(lines, 3)


def test_top_k_and_vocab_file_map_other_words_to_unk(tmp_path):
    lines = ["a b c d", "a b a", "c a e", "a a b"]
    c = count_ngrams(lines, 3, vocab_size=2)
    assert c.vocab == ["<unk>", "<s>", "</s>", "a", "b"]
    assert _as_counter(c) == _counter(lines, 3, vocab={"a", "b"})
    vocab_file = tmp_path / "words.txt"
    vocab_file.write_text("c 10\ne\nzz\n")
    c = count_ngrams(lines, 2, vocab_file=str(vocab_file))
    assert c.vocab == ["<unk>", "<s>", "</s>", "c", "e", "zz"]
    assert c.counts[0][c.vocab.index("zz")] == 0
    expect = _counter(lines, 2, vocab={"c", "e"})
    assert _as_counter(c) == expect


def test_sentence_markers_in_text_name_the_line(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("a b\n\nc </s> d\n")
    with pytest.raises(TextFormatError, match=r"t\.txt:3: .*</s>"):
        count_ngrams(str(path), 2)


@pytest.mark.parametrize("chunk_bytes", [1 << 18, 8])
def test_bad_utf8_names_the_line(tmp_path, chunk_bytes):
    from asrkit.utils.textfile import TextFileError

    path = tmp_path / "t.txt"
    path.write_bytes(b"a b\nc d\ne f\ng \xff d\n")
    with pytest.raises(TextFileError, match=r"t\.txt:4: not UTF-8"):
        count_ngrams(str(path), 2, chunk_bytes=chunk_bytes)


def test_many_chunk_merges_on_a_larger_text_give_the_one_chunk_counts(tmp_path):
    from asrkit.bench.lm import synthetic_text

    path = tmp_path / "big.txt"
    path.write_text("\n".join(synthetic_text(300_000, 5_000)) + "\n")
    small = count_ngrams(str(path), 4, chunk_bytes=1 << 14)
    whole = count_ngrams(str(path), 4, chunk_bytes=1 << 30)
    assert small.vocab == whole.vocab
    for a, b, c, d in zip(small.words, whole.words, small.counts, whole.counts):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(c, d)
