"""A transducer exports as sherpa-onnx's encoder.onnx / decoder.onnx / joiner.onnx: onnxruntime on
each equals asrkit to float32 rounding, and greedy search over the three files gives asrkit's
words (the hand-set tone transducer of tests/transducer, and small Conformer transducers)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from asrkit.decoders.transducer import transducer_greedy, words_of  # noqa: E402
from asrkit.export import (  # noqa: E402
    ExportError,
    OnnxTransducer,
    build_onnx,
    compare_transducer,
    read_metadata,
    transducer_to_onnx,
)
from asrkit.models import TransducerModel  # noqa: E402
from asrkit.ops.transducer import predictor_step  # noqa: E402
from asrkit.recognizer import Recognizer  # noqa: E402
from tests.recognizer.tones import RATE, recording  # noqa: E402
from tests.transducer.test_recognizer import FBANK, tone_transducer_model  # noqa: E402

NET = {"seed": 3, "layers": [
    {"type": "conv2d_subsampling", "dim": 16, "factor": 4, "channels": 4},
    {"type": "conformer", "dim": 16, "heads": 2, "ff_dim": 32, "num_layers": 1,
     "kernel_size": 3}]}
TOKENS = ["<blk>"] + [f"w{i}" for i in range(1, 7)]


@pytest.fixture(scope="module")
def tone_transducer(tmp_path_factory):
    """The hand-set tone transducer's model folder and its parent."""
    from asrkit.models import save
    from asrkit.recognizer import package_model_folder

    root = tmp_path_factory.mktemp("rnnt_tones_onnx")
    save(str(root / "final.mdl"), tone_transducer_model())
    (root / "fbank.toml").write_text(FBANK)
    package_model_folder(str(root / "final"), str(root / "final.mdl"), str(root / "fbank.toml"))
    return str(root / "final"), root


def _conformer_transducer(kind, **spec):
    return TransducerModel(NET, 8, TOKENS, 0, transducer={"predictor": kind, "predictor_dim": 7,
                                                          "joiner_dim": 6, **spec})


@pytest.mark.parametrize("kind,spec", [("stateless", {"context_size": 2}),
                                       ("lstm", {"predictor_layers": 2})])
def test_each_piece_equals_asrkit_and_greedy_search_agrees(kind, spec, tmp_path):
    model = _conformer_transducer(kind, **spec)
    # a sharper joiner, so greedy search emits labels on random features
    model = model.copy_with({**model.state_dict(),
                             "joiner.weight": 4 * model.state_dict()["joiner.weight"]})
    paths = transducer_to_onnx(model, tmp_path / "onnx")
    for part in ("encoder", "decoder", "joiner"):
        onnx.checker.check_model(onnx.load(paths[part]), full_check=True)
    rng = np.random.default_rng(1)
    lengths = np.array([41, 30, 7], np.int32)
    feats = rng.standard_normal((41, 3, 8)).astype(np.float32)
    feats[30:, 1] = 1e3  # padding never reaches a valid frame
    res = compare_transducer(model, tmp_path / "onnx", feats, lengths)
    assert res["lengths_equal"] and res["greedy_equal"] == 3
    assert res["encoder_max_abs_diff"] < 1e-5
    assert res["decoder_max_abs_diff"] < 1e-5 and res["joiner_max_abs_diff"] < 1e-5
    # padded frames of encoder_out are zeros, the batch's lengths are asrkit's
    onx = OnnxTransducer(tmp_path / "onnx")
    enc, lens = onx.encode(feats, lengths)
    np.testing.assert_array_equal(lens, model.encode(feats, lengths)[1])
    assert not np.any(enc[lens[2]:, 2])
    # greedy search emits something here, and the same tokens through either side
    e, n = model.encode(feats[:, 0])
    step = predictor_step(kind, model.predictor_arrays(), 0)
    mine = transducer_greedy(e, step, np.asarray(model.joiner.weight.value),
                             np.asarray(model.joiner.bias.value), 0, 3, TOKENS)
    assert mine.tokens and onx.greedy(feats[:, 0])[:2] == (mine.tokens, mine.frames)


def test_sherpa_metadata_and_tokens(tmp_path):
    model = _conformer_transducer("stateless", context_size=2)
    paths = transducer_to_onnx(model, tmp_path / "onnx")
    dec = {p.key: p.value for p in onnx.load(paths["decoder"]).metadata_props}
    assert dec["vocab_size"] == "7" and dec["context_size"] == "2"
    assert dec["joiner_dim"] == "6" and dec["component"] == "decoder"
    enc = read_metadata(paths["encoder"])
    assert enc["tokens"] == TOKENS and enc["subsampling"] == 4 and enc["vocab_size"] == 7
    lines = open(paths["tokens"]).read().splitlines()
    assert lines[0] == "<blk> 0" and lines[-1] == "w6 6"
    sess = {k: [i.name for i in OnnxTransducer(tmp_path / "onnx").sessions[k].get_inputs()]
            for k in ("encoder", "decoder", "joiner")}
    assert sess == {"encoder": ["x", "x_lens"], "decoder": ["y"],
                    "joiner": ["encoder_out", "decoder_out"]}
    with pytest.raises(ExportError, match="transducer model exports as three files"):
        build_onnx(model)


def test_the_tone_transducer_gives_the_same_words_through_onnx(tone_transducer, tmp_path):
    folder, _ = tone_transducer
    rec = Recognizer.from_dir(folder, method="greedy")
    wave, _ = recording(["three", "one", "two"], seed=77, word_s=0.25, gap_s=0.25, lead_s=0.2)
    feats = rec.normalize(rec.features(rec.load_audio(wave, RATE)))
    model = rec.folder.model
    paths = transducer_to_onnx(model, tmp_path / "onnx")
    onx = OnnxTransducer(tmp_path / "onnx")
    enc = model.encode(feats)[0]
    np.testing.assert_allclose(onx.encode(feats)[0], enc, atol=1e-5, rtol=1e-5)
    tokens, frames, _ = onx.greedy(feats)
    assert words_of(tokens, frames, model.tokens)[0] == ["three", "one", "two"]
    assert rec.transcribe(wave, RATE).text == "three one two"
    assert len(paths) == 4


def _asrkit(*args):
    return subprocess.run([sys.executable, "-m", "asrkit", *args], capture_output=True,
                          text=True, timeout=300)


def test_asrkit_export_writes_and_verifies_a_transducer_folder(tone_transducer, tmp_path):
    folder, _ = tone_transducer
    out = tmp_path / "onnx"
    r = _asrkit("export", "--model-dir", folder, "--onnx", str(out), "--verify", "--int8",
                "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["verify"]["ok"] and summary["verify"]["greedy_equal"] == 3
    assert sorted(p.name for p in out.iterdir()) == [
        "decoder.int8.onnx", "decoder.onnx", "encoder.int8.onnx", "encoder.onnx",
        "joiner.int8.onnx", "joiner.onnx", "tokens.txt"]
    # the int8 files run and still spell the tone words
    model = Recognizer.from_dir(folder).folder.model
    int8 = tmp_path / "int8"
    int8.mkdir()
    for part in ("encoder", "decoder", "joiner"):
        (int8 / f"{part}.onnx").write_bytes((out / f"{part}.int8.onnx").read_bytes())
    rec = Recognizer.from_dir(folder, method="greedy")
    wave, _ = recording(["two", "three"], seed=2, word_s=0.25, gap_s=0.25, lead_s=0.2)
    feats = rec.normalize(rec.features(rec.load_audio(wave, RATE)))
    tokens, frames, _ = OnnxTransducer(int8).greedy(feats)
    assert words_of(tokens, frames, model.tokens)[0] == ["two", "three"]
    assert read_metadata(str(out / "encoder.onnx"))["feature_type"] == "fbank"
    r = _asrkit("export", "--model-dir", folder, "--onnx", str(tmp_path / "am.onnx"))
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "a transducer exports a folder" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_sherpa_onnx_decodes_the_exported_files(tone_transducer, tmp_path):
    """sherpa-onnx's OfflineRecognizer loads encoder.onnx, decoder.onnx, joiner.onnx and
    tokens.txt as written, and its own features and greedy search give the tone words."""
    sherpa_onnx = pytest.importorskip("sherpa_onnx")
    folder, _ = tone_transducer
    model = Recognizer.from_dir(folder).folder.model
    p = transducer_to_onnx(model, tmp_path / "onnx")
    wave, _ = recording(["three", "one", "two"], seed=77, word_s=0.25, gap_s=0.25, lead_s=0.2)
    for method in ("greedy_search", "modified_beam_search"):
        rec = sherpa_onnx.OfflineRecognizer.from_transducer(
            p["encoder"], p["decoder"], p["joiner"], p["tokens"], feature_dim=40,
            sample_rate=RATE, decoding_method=method)
        s = rec.create_stream()
        # int16 scale, as the tone model's Kaldi features are (icefall's are on [-1, 1])
        s.accept_waveform(RATE, (32768 * wave).astype(np.float32))
        rec.decode_stream(s)
        assert list(s.result.tokens) == ["three", "one", "two"], method


@pytest.fixture(scope="module")
def tone_test_set(tmp_path_factory):
    """Five tone recordings as a Kaldi data dir (tests/recognizer/tone_lstm.py), one reference
    word changed so that no WER is zero: ``(data dir, {utt: reference}, {utt: wav path})``."""
    from tests.recognizer.tone_lstm import tone_utterance, write_data_dir

    rng = np.random.default_rng(7)
    data = tmp_path_factory.mktemp("tone_test") / "data"
    write_data_dir(str(data), [tone_utterance(rng) for _ in range(5)], "u")
    refs = dict(line.split(" ", 1) for line in (data / "text").read_text().splitlines())
    first, *rest = refs["u-0001"].split()
    refs["u-0001"] = " ".join(["five" if first != "five" else "one", *rest])
    (data / "text").write_text("".join(f"{u} {t}\n" for u, t in refs.items()))
    wavs = dict(line.split(" ", 1) for line in (data / "wav.scp").read_text().splitlines())
    return data, refs, wavs


def _wer(refs: dict, hyps: dict) -> float:
    import jiwer

    return 100 * jiwer.wer([refs[u] for u in refs], [hyps[u] for u in refs])


@pytest.mark.parametrize("decode", [{}, {"method": "greedy"}])
def test_export_test_set_of_the_conformer_transducer(decode, tone_test_set, tmp_path, capsys):
    """``asrkit export --int8 --test`` on the streaming tone Conformer-transducer: the WERs it
    gives are jiwer's of asrkit's own transcripts and, under greedy search, of the fp32 and
    int8 files decoded by OnnxTransducer.greedy; the fp32 files give asrkit's words."""
    import re
    import shutil

    from asrkit.cli.main import main
    from tests.streaming.tone_conformer_transducer import FOLDER

    data, refs, wavs = tone_test_set
    folder = tmp_path / "model"
    shutil.copytree(FOLDER, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**manifest, "decode": decode}))
    out = tmp_path / "onnx"
    args = ["export", "--model-dir", str(folder), "--onnx", str(out), "--int8", "--test",
            str(data)]
    rec = Recognizer.from_dir(folder)
    hyps = {u: rec.transcribe(wavs[u]).text for u in refs}
    assert 0 < _wer(refs, hyps) < 50
    if not decode:
        assert main([*args, "--json"]) == 0
        t = json.loads(capsys.readouterr().out)["test"]
        assert t["search"]["method"] == "beam" and t["utterances"] == 5
        wers = {name: row["wer"] for name, row in t["models"].items()}
        assert t["models"]["fp32"]["same_text_as_asrkit"] == 5
        assert t["models"]["fp32"]["network_seconds"] > 0
        sizes = [t["models"][k]["bytes"] for k in ("fp32", "int8")]
        assert sizes[0] == sum(os.path.getsize(out / f"{p}.onnx")
                               for p in ("encoder", "decoder", "joiner")) > sizes[1]
    else:
        assert main(args) == 0
        text = capsys.readouterr().out
        assert "search: method greedy, beam 4, max_symbols 3" in text
        assert "same text as asrkit on 5/5" in text
        wers = {n: float(w) for n, w in re.findall(r"^  (\w+) +WER +([\d.]+)%", text, re.M)}
        for name, int8 in (("fp32", False), ("int8", True)):
            onx = OnnxTransducer(out, int8=int8)
            mine = {}
            for u in refs:
                feats = rec.normalize(rec.features(rec.load_audio(wavs[u])))
                tokens, frames, _ = onx.greedy(feats)
                mine[u] = " ".join(words_of(tokens, frames, onx.tokens)[0])
            assert wers[name] == pytest.approx(_wer(refs, mine), abs=5e-3), name
    assert set(wers) == {"asrkit", "fp32", "int8"}
    assert wers["asrkit"] == pytest.approx(_wer(refs, hyps), abs=5e-3)
    assert wers["fp32"] == wers["asrkit"]
    with pytest.raises(ExportError, match="encoder.int8.onnx: missing: .* with int8 files"):
        OnnxTransducer(tmp_path, int8=True)
