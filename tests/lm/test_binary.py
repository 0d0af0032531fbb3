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


def _with_table(path, fn):
    """Rewrite ``path``'s arrays through ``fn(arrays) -> arrays`` (checksums recomputed)."""
    from asrkit.lm.binary import write_arrays

    lm = NgramLM.load(path)
    arrays = {"vocab": np.frombuffer("\n".join(lm.vocab).encode(), np.uint8),
              "keys": np.array(lm._keys), "prob": np.array(lm._prob), "bow": np.array(lm._bow),
              "offsets": np.array(lm._offsets), "table": np.array(lm._table),
              "slots": np.array(lm._slots)}
    for n in range(2, lm.order + 1):
        arrays[f"words{n}"] = np.array(lm._words[n - 1])
        arrays[f"rank{n}"] = np.array(lm._ranks[n - 1])
    write_arrays(path, lm.order, fn(arrays))


def test_every_array_is_checksummed(test_arpa, tmp_path):
    from asrkit.lm.binary import BinaryLMError, read_header

    path = tmp_path / "m.lmbin"
    NgramLM.load(test_arpa).save_binary(path)
    header, start, _ = read_header(str(path))
    for name, spec in header["arrays"].items():
        data = bytearray(path.read_bytes())
        data[start + spec["offset"]] ^= 0x10  # one bit of the array's first byte
        bad = tmp_path / f"{name}.lmbin"
        bad.write_bytes(bytes(data))
        with pytest.raises(BinaryLMError, match=f"{bad}: .*'{name}' fails its CRC-32"):
            NgramLM.load(bad)
        # unverified, the structure is still checked; the scores may be wrong but never crash
        if name not in ("vocab", "offsets", "slots"):
            NgramLM.from_binary(bad, verify=False).score("she sees a red ball")


def test_structure_and_values_are_checked_even_with_good_checksums(test_arpa, tmp_path):
    from asrkit.lm.binary import BinaryLMError

    path = tmp_path / "m.lmbin"
    NgramLM.load(test_arpa).save_binary(path)

    def out_of_range(a):
        a["words2"][3, 1] = 10_000
        return a

    def full_table(a):
        a["table"][1::2] = 0  # no free slot: every probe would go round forever
        return a

    def nan_prob(a):
        a["prob"][40] = np.nan
        return a

    def odd_slots(a):
        a["slots"][2] += 1
        a["slots"][3] += 1
        a["table"] = np.concatenate([a["table"], np.zeros(2, np.uint64)])
        return a

    for fn, message in ((out_of_range, "word id outside the vocabulary"),
                        (full_table, "hash table holds"), (nan_prob, "NaN"),
                        (odd_slots, "hash table has 257 slots")):
        bad = tmp_path / f"{fn.__name__}.lmbin"
        bad.write_bytes(path.read_bytes())
        _with_table(bad, fn)
        with pytest.raises(BinaryLMError, match=message):
            NgramLM.load(bad)


def test_lookups_in_a_table_without_free_slots_end(test_arpa):
    from asrkit.lm import query

    lm = NgramLM.load(test_arpa)
    table = np.array(lm._table)
    table[1::2] = 0
    slots = np.asarray(lm._slots)
    assert query.find(table, slots, 2, np.uint64(12345)) == -1


def test_version_1_files_without_checksums_still_load(test_arpa, tmp_path):
    import json
    import struct

    from asrkit.lm.binary import read_header

    path = tmp_path / "v2.lmbin"
    lm = NgramLM.load(test_arpa)
    lm.save_binary(path)
    header, start, _ = read_header(str(path))
    header["version"] = 1
    for spec in header["arrays"].values():
        del spec["crc32"]
    data = path.read_bytes()
    (hlen,) = struct.unpack("<Q", data[8:16])
    text = json.dumps(header).encode().ljust(hlen)  # same length: the arrays stay in place
    old = tmp_path / "v1.lmbin"
    old.write_bytes(data[:16] + text + data[16 + hlen:])
    v1 = NgramLM.load(old)
    assert v1.counts == lm.counts
    assert v1.score("she sees a red ball") == lm.score("she sees a red ball")
