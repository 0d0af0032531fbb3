"""``asrkit bench train`` and ``asrkit bench mpi`` on tiny shapes: they run and report."""

import json

import pytest

from asrkit.cli.main import main

pytest.importorskip("torch")


@pytest.mark.slow
def test_bench_train_json_reports_time_memory_and_agreement(capsys):
    assert main(["bench", "train", "--json", "--repeat", "1", "--frames", "20", "--batch", "2",
                 "--dim", "8", "--hidden", "8", "--classes", "5", "--target-length", "4",
                 "--threads", "1"]) == 0
    (case,) = json.loads(capsys.readouterr().out)["cases"]
    assert case["asrkit_s"] > 0 and case["reference_s"] > 0
    assert float(case["extra"]["loss_rel_diff"]) < 1e-4
    assert case["extra"]["asrkit_peak_MB"] >= 0 and case["extra"]["torch_peak_MB"] >= 0


@pytest.mark.mpi
@pytest.mark.slow
def test_bench_mpi_json(capsys):
    assert main(["bench", "mpi", "--json", "--repeat", "2", "--frames", "20", "--batch", "2",
                 "--hidden", "8", "--dim", "8", "--classes", "5", "--modes", "1bit"]) == 0
    (case,) = json.loads(capsys.readouterr().out)["cases"]
    assert case["name"] == "1bit: 2 ranks vs 1"
    assert case["extra"]["bytes_per_step"] > 0 and case["speedup"] > 0
