"""``asrkit bench ctc`` runs end to end on tiny shapes and reports both libraries."""

import json

import pytest

from asrkit.cli.main import main

pytest.importorskip("torch")


def test_bench_ctc_json(capsys):
    status = main(["bench", "ctc", "--json", "--repeat", "1", "--frames", "12", "--batch", "2",
                   "--target-length", "4", "--classes", "5", "7"])
    assert status == 0
    out = json.loads(capsys.readouterr().out)
    assert out["bench"] == "ctc" and len(out["cases"]) == 2
    for case in out["cases"]:
        assert case["asrkit_s"] > 0 and case["reference_s"] > 0 and case["speedup"] > 0
        assert float(case["extra"]["cost_rel_diff"]) < 1e-5
