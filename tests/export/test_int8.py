"""int8 exports (onnxruntime dynamic quantization): weights within half a quantization step of
the fp32 export, outputs close to it, metadata kept; asrkit export --int8 --test on a tone model
folder whose words are known."""

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import numpy_helper  # noqa: E402

from asrkit.export import (  # noqa: E402
    OnnxModel,
    int8_path,
    quantize_int8,
    read_metadata,
    run_onnx,
    to_onnx,
)
from tests.export.test_onnx_export import NETWORKS, _batch, _model  # noqa: E402


@pytest.mark.parametrize("name", ["blstm_2layers", "lstm_2layers", "dense_activations",
                                  "mixed"])
def test_int8_weights_and_outputs_follow_fp32(name, tmp_path, rng):
    model = _model(NETWORKS[name])
    fp32 = str(tmp_path / "am.onnx")
    to_onnx(model, fp32)
    dst = int8_path(fp32)
    assert dst == str(tmp_path / "am.int8.onnx")
    info = quantize_int8(fp32, dst)
    assert info["fp32_bytes"] > 0 and info["int8_bytes"] > 0  # (tiny nets: headers dominate)
    assert sum(info["quantized_ops"].values()) >= 1
    # every quantized weight is its fp32 weight rounded to the nearest step of its scale
    ref = {t.name: numpy_helper.to_array(t) for t in onnx.load(fp32).graph.initializer}
    q = {t.name: numpy_helper.to_array(t) for t in onnx.load(dst).graph.initializer}
    checked = 0
    for qname, qw in q.items():
        if not qname.endswith("_quantized") or qname[: -len("_quantized")] not in ref:
            continue
        base = qname[: -len("_quantized")]
        scale, zero = q[base + "_scale"], q[base + "_zero_point"].astype(np.float32)
        assert qw.dtype == np.int8
        w = ref[base]
        if w.shape != qw.shape:  # an LSTM's [directions, 4H, in]: stored as [.., in, 4H]
            w = w.transpose(0, 2, 1)
        if scale.size > 1:  # one scale per LSTM direction
            scale, zero = scale.reshape(-1, 1, 1), zero.reshape(-1, 1, 1)
        assert qw.shape == w.shape and 4 * qw.nbytes == w.nbytes, base
        back = (qw.astype(np.float32) - zero) * scale
        assert np.all(np.abs(back - w) <= scale / 2 + 1e-6), base
        assert np.all(np.abs(back - w) <= np.abs(w).max() / 127), base
        checked += 1
    assert checked >= 1
    feats, lengths = _batch(rng)
    a, la = run_onnx(fp32, feats, lengths)
    b, lb = run_onnx(dst, feats, lengths)
    assert np.array_equal(la, lb)
    valid = np.arange(a.shape[0])[:, None] < la[None, :]
    assert np.abs(a - b)[valid].max() < 0.25
    meta = read_metadata(dst)
    assert meta["tokens"] == model.tokens and meta["quantization"] == "int8-dynamic"


def test_onnx_model_is_called_like_an_asrkit_model(tmp_path, rng):
    model = _model(NETWORKS["stack3_sub3_blstm"])
    path = str(tmp_path / "am.onnx")
    to_onnx(model, path, lengths_dtype="int64")
    net = OnnxModel(path)
    assert (net.input_dim, net.num_classes, net.tokens) == (model.input_dim,
                                                            model.num_classes, model.tokens)
    feats, lengths = _batch(rng)
    ref, ref_len = model(feats, lengths)
    got, got_len = net(feats, lengths)
    assert got_len.dtype == np.int32 and np.array_equal(got_len, ref_len)
    one, one_len = net(feats[:13, 0])
    np.testing.assert_allclose(one, ref[: ref_len[0], 0], atol=1e-4)
    assert one_len.tolist() == [ref_len[0]] and net.seconds > 0


def test_export_int8_with_a_test_set(tmp_path):
    from asrkit.cli.main import main
    from tests.recognizer.tones import make_tone_folder, recording, write_wav

    folder = make_tone_folder(str(tmp_path / "m"))
    data = tmp_path / "test"
    data.mkdir()
    texts = {"u1": "one two", "u2": "three", "u3": "two three one"}
    scp = []
    for i, (u, text) in enumerate(texts.items()):
        x, _ = recording(text.split(), seed=i)
        scp.append(f"{u} {write_wav(data / f'{u}.wav', x)}\n")
    scp.append("u4 /nonexistent.wav\n")
    (data / "wav.scp").write_text("".join(scp))
    (data / "text").write_text("".join(f"{u} {t}\n" for u, t in texts.items()) + "u4 one\n")
    (data / "utt2spk").write_text("".join(f"{u} {u}\n" for u in [*texts, "u4"]))
    out = tmp_path / "am.onnx"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        status = main(["export", "--model-dir", folder, "--onnx", str(out), "--int8",
                       "--test", str(data), "--json"])
    assert status == 0
    summary = json.loads(buf.getvalue())
    assert summary["int8"]["onnx"] == str(tmp_path / "am.int8.onnx")
    assert summary["int8"]["quantized_ops"] == {"MatMulInteger": 2}
    t = summary["test"]
    assert t["utterances"] == 3 and t["unreadable"] == 1
    assert set(t["models"]) == {"asrkit", "fp32", "int8"}
    for name, row in t["models"].items():
        assert row["wer"] == 0.0, (name, row)
    assert t["models"]["int8"]["same_text_as_asrkit"] == 3
    assert t["models"]["int8"]["network_seconds"] > 0


def test_export_int8_errors(tmp_path, capsys):
    from asrkit.cli.main import main
    from tests.recognizer.tones import make_tone_folder

    folder = make_tone_folder(str(tmp_path / "m"))
    out = str(tmp_path / "am.onnx")
    assert main(["export", "--model", f"{folder}/model.mdl", "--onnx", out,
                 "--test", str(tmp_path)]) == 2
    assert "--test needs --model-dir" in capsys.readouterr().err
    assert main(["export", "--model-dir", folder, "--onnx", out, "--test",
                 str(tmp_path / "nope")]) == 2
    assert "nope: no such data directory" in capsys.readouterr().err
    assert main(["export", "--model-dir", folder, "--onnx", out, "--per-channel"]) == 2
    assert "--per-channel goes with --int8" in capsys.readouterr().err
    (tmp_path / "notext").mkdir()
    (tmp_path / "notext" / "wav.scp").write_text("u1 /x.wav\n")
    (tmp_path / "notext" / "utt2spk").write_text("u1 u1\n")
    assert main(["export", "--model-dir", folder, "--onnx", out, "--int8", "--test",
                 str(tmp_path / "notext")]) == 2
    assert "no text file" in capsys.readouterr().err
