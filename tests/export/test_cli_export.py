"""asrkit export on a packaged model folder and on a bare model file."""

import json
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from asrkit.cli.main import main  # noqa: E402
from asrkit.export import run_onnx  # noqa: E402
from asrkit.models import Model, load, save  # noqa: E402

TOKENS = ["<blk>", "one", "two", "three"]
NET = {"seed": 1, "stack_frames": 3, "subsample_frames": 3,
       "layers": [{"type": "blstm", "hidden": 6, "num_layers": 2, "proj": 4},
                  {"type": "tdnn", "dim": 5, "context": 3}]}


def _asrkit(*args):
    return subprocess.run([sys.executable, "-m", "asrkit", *args], capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("md")
    save(str(tmp / "final.mdl"), Model(NET, 13, TOKENS, blank=0))
    (tmp / "mfcc.toml").write_text('[features]\ntype = "mfcc"\nnum_ceps = 13\n'
                                   'frame_shift = 10.0\n[cmvn]\nmode = "speaker"\n')
    assert main(["package", "--model", str(tmp / "final.mdl"), "--features",
                 str(tmp / "mfcc.toml"), "--out", str(tmp / "final")]) == 0
    return tmp


def test_export_model_dir_with_verify(model_dir, tmp_path):
    out = tmp_path / "am.onnx"
    r = _asrkit("export", "--model-dir", str(model_dir / "final"), "--onnx", str(out),
                "--verify", "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["verify"]["ok"] and summary["verify"]["max_abs_diff"] < 1e-4
    assert summary["subsampling"] == 3 and summary["frame_shift"] == pytest.approx(0.03)
    proto = onnx.load(str(out))
    onnx.checker.check_model(proto, full_check=True)
    meta = {p.key: p.value for p in proto.metadata_props}
    assert json.loads(meta["tokens"]) == TOKENS and meta["feature_type"] == "mfcc"
    assert meta["cmvn"] == "speaker" and meta["sample_rate"] == "16000"
    assert 'type = "mfcc"' in meta["feature_config"]

    model = load(str(model_dir / "final" / "model.mdl"))
    rng = np.random.default_rng(0)
    feats = rng.standard_normal((20, 2, 13)).astype(np.float32)
    lengths = np.array([20, 11], np.int32)
    ref, ref_len = model(feats, lengths)
    got, got_len = run_onnx(str(out), feats, lengths)
    np.testing.assert_array_equal(got_len, ref_len)
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=0)


def test_export_model_file_and_errors(model_dir, tmp_path, capsys):
    out = tmp_path / "am.onnx"
    assert main(["export", "--model", str(model_dir / "final.mdl"), "--features",
                 str(model_dir / "mfcc.toml"), "--onnx", str(out), "--lengths-dtype", "int64",
                 "--opset", "18"]) == 0
    assert "wrote" in capsys.readouterr().out and out.exists()
    assert onnx.load(str(out)).opset_import[0].version == 18

    for argv, message in [
            (["--model", str(tmp_path / "missing.mdl")], "missing.mdl"),
            (["--model-dir", str(tmp_path)], "manifest.json"),
            (["--model", str(model_dir / "final.mdl"), "--opset", "13"], "opset 13"),
            (["--model-dir", str(model_dir / "final"), "--features", "x.toml"], "--features")]:
        assert main(["export", *argv, "--onnx", str(out)]) == 2
        assert message in capsys.readouterr().err
