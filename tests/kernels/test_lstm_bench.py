"""``asrkit bench lstm`` runs end to end on tiny shapes, each side in its own process."""

import json

import pytest

from asrkit.cli.main import main

pytest.importorskip("torch")


def test_bench_lstm_json(capsys):
    status = main(["bench", "lstm", "--json", "--repeat", "2", "--frames", "7", "--batch", "3",
                   "--input", "5", "--hidden", "64", "--threads", "1", "2",
                   "--cases", "lstm", "lstm-lengths", "blstm"])
    assert status == 0
    out = json.loads(capsys.readouterr().out)
    assert out["bench"] == "lstm"
    names = [c["name"] for c in out["cases"]]
    assert len(names) == 6 and sum("threads=2" in n for n in names) == 3
    for case in out["cases"]:
        assert case["asrkit_s"] > 0 and case["reference_s"] > 0 and case["speedup"] > 0
        assert case["reference"].startswith("torch")
        q1, q3 = case["asrkit_spread"]
        assert q1 <= case["asrkit_s"] <= q3
        # the two processes computed the same outputs and weight gradients
        assert float(case["extra"]["y_probe_rel_diff"]) < 1e-4
        assert float(case["extra"]["dw_ih_probe_rel_diff"]) < 1e-3


def test_bench_lstm_alternate_adds_in_process_figures(capsys):
    status = main(["bench", "lstm", "--json", "--repeat", "1", "--frames", "4", "--batch", "2",
                   "--input", "3", "--hidden", "8", "--threads", "1", "--cases", "lstm",
                   "--alternate"])
    assert status == 0
    case = json.loads(capsys.readouterr().out)["cases"][0]
    assert case["extra"]["alternating_asrkit_ms"] > 0
    assert case["extra"]["alternating_torch_ms"] > 0
