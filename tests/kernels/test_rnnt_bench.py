"""``asrkit bench rnnt`` runs end to end on tiny shapes, each side in its own process."""

import json

import pytest

from asrkit.cli.main import main

pytest.importorskip("torch")


def test_bench_rnnt_json(capsys):
    status = main(["bench", "rnnt", "--json", "--repeat", "1", "--batch", "2", "--frames", "6",
                   "--target-length", "3", "--classes", "7", "--joiner-dim", "4",
                   "--threads", "1"])
    assert status == 0
    out = json.loads(capsys.readouterr().out)
    assert out["bench"] == "rnnt" and len(out["cases"]) == 2
    for case in out["cases"]:
        assert case["asrkit_s"] > 0 and case["reference_s"] > 0 and case["speedup"] > 0
        assert "autograd DP" in case["reference"] or "torchaudio" in case["reference"]
        # the two sides computed the same loss and the same gradients
        assert float(case["extra"]["cost_rel_diff"]) < 1e-5
        assert float(case["extra"]["grad_probe_rel_diff"]) < 1e-4
        assert case["extra"]["asrkit_peak_MB"] >= 0 and case["extra"]["reference_peak_MB"] >= 0
