"""``asrkit bench decode`` at a tiny size, and the pieces of its synthetic task."""

import json

import numpy as np
import pytest

from asrkit.bench import decode as bench
from asrkit.cli.main import main


def test_synthetic_words_are_distinct_and_pronounceable(rng):
    words = bench.synthetic_words(200, rng)
    assert len(set(words)) == 200
    for w in words:
        assert w[0] in bench.CONSONANTS and any(v in w for v in bench.VOWELS)


def test_emissions_spell_the_sentence_when_nothing_is_confused(rng):
    from asrkit.decoders.ctc import ctc_greedy

    e = bench.synthetic_emissions(["kaso", "lutte"], rng, confusion=0.0, peak=12.0, noise=0.5)
    assert e.dtype == np.float32 and e.shape[1] == len(bench.TOKENS)
    np.testing.assert_allclose(np.exp(e).sum(axis=1), 1.0, rtol=1e-5)
    spelled = "".join(bench.TOKENS[i] for i in ctc_greedy(e))
    assert spelled == "kaso|lutte|"  # the double t survives thanks to a blank between


def test_confusions_make_the_greedy_path_wrong(rng):
    from asrkit.decoders.ctc import ctc_greedy

    words = bench.synthetic_words(30, rng)
    e = bench.synthetic_emissions(words, rng, confusion=1.0)
    spelled = "".join(bench.TOKENS[i] for i in ctc_greedy(e)).split("|")[:-1]
    assert len(spelled) == len(words)
    assert sum(a != b for a, b in zip(spelled, words)) == len(words)


def test_bench_decode_tiny_json(capsys):
    pytest.importorskip("flashlight.lib.text.decoder")
    assert main(["bench", "decode", "--json", "--repeat", "1", "--words", "50", "--sentences",
                 "3", "--train-sentences", "300", "--beams", "8,12", "--fl-beams", "5,50",
                 "--ctc-beam", "4"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["bench"] == "decode"
    cases = {c["name"]: c for c in report["cases"]}
    build = cases["build TLG (50 words, 3-gram)"]
    assert build["extra"]["TLG"]["arcs"] > 0 and build["extra"]["lm_ngrams"][0] >= 50
    tlg = cases["asrkit TLG beam=12"]
    assert tlg["asrkit_s"] > 0 and tlg["extra"]["rtf"] < 1.0
    # the lexicon and the LM fix most of what the noisy acoustics get wrong
    greedy = cases["acoustic-only greedy (no lexicon, no LM)"]["extra"]["wer"]
    assert tlg["extra"]["wer"] < greedy
    assert tlg["reference"].startswith("flashlight") or "fl" in tlg["extra"]
    assert {"flashlight+py-LM bs=50", "flashlight+ZeroLM bs=5", "asrkit word-loop beam=8",
            "asrkit CTC prefix beam=4 no LM (numba)"} <= set(cases)
    fl = cases["flashlight+py-LM bs=50"]["extra"]["wer"]
    assert fl < greedy


def test_bench_decode_table_without_references(capsys):
    assert main(["bench", "decode", "--repeat", "1", "--words", "50", "--sentences", "2",
                 "--train-sentences", "200", "--beams", "10", "--no-flashlight",
                 "--no-ctc"]) == 0
    out = capsys.readouterr().out
    assert "asrkit TLG beam=10" in out and "flashlight" not in out and "ratio" in out
