"""`asrkit bench fst` on a tiny synthetic lexicon and LM: it runs and reports sizes."""

import argparse

import pytest


def test_bench_fst_runs_small():
    pytest.importorskip("pynini")
    from asrkit.bench import fst as bench

    args = argparse.Namespace(words=60, sentences=300, order=3, repeat=1, prune=0.0,
                              cases=list(bench.CASES))
    cases = bench.run(args)
    assert [c.name for c in cases] == ["compose L o G", "determinize L o G",
                                       "minimize det(L o G)", "compose T o LG"]
    assert all(c.asrkit_s > 0 and c.reference_s and c.reference_s > 0 for c in cases)
    # L o G with OpenFst's default filter: the same machine size
    assert cases[0].extra["states"] == cases[0].extra["openfst states"]
