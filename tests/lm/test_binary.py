"""The memory-mapped binary format: same scores and listings as the ARPA it came from."""

import numpy as np
import pytest

from asrkit.lm import NgramLM
from asrkit.lm.binary import MAGIC, is_binary
from tests.lm.conftest import sentences_with_oovs


def test_binary_round_trip_is_memory_mapped_and_scores_alike(test_arpa, test_text, rng,
                                                              tmp_path):
    lm = NgramLM.load(test_arpa)
    path = tmp_path / "test.lmbin"
    lm.save_binary(path)
    assert is_binary(path) and not is_binary(test_arpa)
    mm = NgramLM.load(path)
    assert isinstance(mm._keys.base, np.memmap) and not mm._keys.flags.writeable
    assert mm.vocab == lm.vocab and mm.order == lm.order and mm.counts == lm.counts
    for n in range(1, lm.order + 1):
        assert list(mm.iter_ngrams(n)) == list(lm.iter_ngrams(n))
    sents = sentences_with_oovs(test_text.read_text().splitlines(), rng, 30)
    np.testing.assert_array_equal(mm.score_sentences(sents), lm.score_sentences(sents))
    mm.write_arpa(tmp_path / "back.arpa")
    assert NgramLM.load(tmp_path / "back.arpa").counts == lm.counts


def test_truncated_or_foreign_binary_is_rejected(test_arpa, tmp_path):
    path = tmp_path / "m.lmbin"
    NgramLM.load(test_arpa).save_binary(path)
    data = path.read_bytes()
    (tmp_path / "short.lmbin").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="truncated"):
        NgramLM.load(tmp_path / "short.lmbin")
    (tmp_path / "bad.lmbin").write_bytes(MAGIC + b"\x05\0\0\0\0\0\0\0{bad}")
    with pytest.raises(ValueError, match="corrupt binary LM header"):
        NgramLM.load(tmp_path / "bad.lmbin")
