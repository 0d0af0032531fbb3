"""The digits recipe end to end at reduced size: data -> features -> train -> graphs -> decode ->
score -> model folder -> report; then the model folder transcribes a file and exports to ONNX."""

import json
import os
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.recipe
RECIPE = os.path.join(os.path.dirname(__file__), "..", "..", "recipes", "digits")


def test_digits_recipe_runs_end_to_end(tmp_path):
    work = tmp_path / "digits"
    shutil.copytree(RECIPE, work, ignore=shutil.ignore_patterns("data", "exp"))
    shutil.copytree(os.path.join(RECIPE, "..", "utils"), tmp_path / "utils")
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
               ASRKIT_CACHE=str(tmp_path / "cache"))
    r = subprocess.run(["bash", str(work / "run.sh"), "--train-speakers", "6", "--dev-speakers",
                        "2", "--test-speakers", "2", "--utts-per-speaker", "5", "--epochs", "1",
                        "--fsdd-takes", "2", "--no-prepare"],
                       capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    for stage in range(7):
        assert f"stage {stage}:" in r.stdout
    assert "test (tg): %WER" in r.stdout and "test (loop): %WER" in r.stdout
    exp = work / "exp"
    score = json.loads((exp / "blstm/decode_test_tg/score.json").read_text())
    assert score["num_sentences"] == 10
    page = (exp / "blstm/report.html").read_text()
    assert "Results" in page and "data:image/png;base64" in page
    assert "asrkit train conf/train.toml" in (exp / "commands.txt").read_text()
    wav = (work / "data/test/wav.scp").read_text().split()[1]
    r = subprocess.run([sys.executable, "-m", "asrkit", "transcribe", "--model-dir",
                        str(exp / "final"), wav], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and r.stdout.startswith(wav + "\t"), r.stderr
    pytest.importorskip("onnxruntime")
    r = subprocess.run([sys.executable, "-m", "asrkit", "export", "--model-dir",
                        str(exp / "final"), "--onnx", str(tmp_path / "digits.onnx"), "--verify"],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
