"""``asrkit bench nnlm`` runs on tiny sizes and agrees with torch."""

import json

import pytest

from asrkit.cli.main import main


def test_bench_nnlm_json(capsys):
    pytest.importorskip("torch")
    rc = main(["bench", "nnlm", "--sentences", "8", "--vocab", "20", "--embed", "4", "--hidden",
               "6", "--max-len", "5", "--batch", "4", "--beam", "2", "--threads", "1",
               "--repeat", "1", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["bench"] == "nnlm" and len(out["cases"]) == 3
    assert all(c["asrkit_s"] > 0 and c["reference_s"] > 0 for c in out["cases"])
    assert float(out["cases"][0]["extra"]["max_abs_diff_log10"]) < 1e-4
