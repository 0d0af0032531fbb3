"""Bad input to transcribe / align / package / export and to the Recognizer: a clean failure
naming the file, key or option (issue 13), never a hang, traceback or a file copied from outside
the folders a user ships."""

import json
import os
import shutil

import numpy as np
import pytest

from asrkit import Recognizer
from asrkit.recognizer import ModelFolderError
from tests.fuzz.harness import assert_clean_failure, mutations, run_cli
from tests.recognizer.tones import make_tone_folder, recording, set_manifest, write_wav

TIMEOUT = 300  # seconds: a hang is caught all the same; a loaded machine needs the margin


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("tones")
    folder = make_tone_folder(str(root))
    wav = write_wav(root / "a.wav", recording(["one", "two"])[0])
    return root, folder, wav


def _copy(folder, tmp_path, name="copy"):
    dst = tmp_path / name
    shutil.copytree(folder, dst, symlinks=True)
    return str(dst)


@pytest.mark.parametrize("option,value", [("--max-chunk", "0"), ("--max-chunk", "1e-5"),
                                          ("--beam", "nan")])
def test_transcribe_numbers_are_checked(built, option, value):
    """--max-chunk 0 used to loop for ever; the other options are checked the same way
    (test_recognizer.py::test_bad_options_name_the_option has them all)."""
    _, folder, wav = built
    res = run_cli(["transcribe", "--model-dir", folder, wav, f"{option}={value}"], timeout=TIMEOUT)
    assert_clean_failure(res, option[2:].replace("-", "_"))


def test_align_empty_text_and_missing_folder(built):
    _, folder, wav = built
    res = run_cli(["align", "--model-dir", folder, wav, "--text", ""], timeout=TIMEOUT)
    assert_clean_failure(res, "empty transcript")
    assert res.returncode == 1 and res.stdout == ""
    res = run_cli(["align", "--model-dir", "/nope", wav, "--text", "one"], timeout=TIMEOUT)
    assert_clean_failure(res, "/nope: no such folder")


def test_manifest_paths_are_confined_to_the_folder(built, tmp_path):
    root, folder, wav = built
    (tmp_path / "elsewhere").mkdir()
    shutil.copy(os.path.join(folder, "model.mdl"), tmp_path / "outside.mdl")
    escapes = {"up": {"model": "../outside.mdl"},
               "absolute": {"model": str(tmp_path / "outside.mdl")},
               "graph": {"graph": "../elsewhere"}}
    for name, change in escapes.items():
        copy = _copy(folder, tmp_path, name)
        set_manifest(copy, **change)
        key = next(iter(change))
        with pytest.raises(ModelFolderError, match=rf"manifest.json: {key}: .*(outside|absolute)"):
            Recognizer.from_dir(copy)
    link = _copy(folder, tmp_path, "link")
    os.replace(os.path.join(link, "lexicon.txt"), tmp_path / "lexicon_outside.txt")
    os.symlink(tmp_path / "lexicon_outside.txt", os.path.join(link, "lexicon.txt"))
    with pytest.raises(ModelFolderError, match="lexicon: 'lexicon.txt' points outside"):
        Recognizer.from_dir(link)
    for argv in (["transcribe", "--model-dir", str(tmp_path / "up"), wav],
                 ["export", "--model-dir", str(tmp_path / "up"), "--onnx",
                  str(tmp_path / "x.onnx")]):
        assert_clean_failure(run_cli(argv, timeout=TIMEOUT), "manifest.json: model")
    assert not (tmp_path / "x.onnx").exists()


@pytest.mark.parametrize("change,match", [
    ({"frame_shift": float("nan")}, "frame_shift"), ({"frame_shift": -1}, "frame_shift"),
    ({"sample_rate": 0}, "sample_rate"), ({"sample_rate": 8000}, "sample_rate 8000 differs"),
    ({"cmvn": "bogus"}, "cmvn: expected one of"), ({"norm_vars": "yes"}, "norm_vars"),
    ({"cmvn": "sliding", "cmn_window": -3}, "cmn_window"),
    ({"decode": {"beam": -1}}, r"decode\.beam must be a finite number > 0"),
    ({"decode": {"word_insertion_penalty": float("inf")}}, "decode.word_insertion_penalty"),
    ({"decode": [1]}, "decode: expected a table"), ({"model": 7}, "model: expected a file name"),
])
def test_manifest_values_are_checked(built, tmp_path, change, match):
    copy = _copy(built[1], tmp_path)
    set_manifest(copy, **change)
    with pytest.raises(ModelFolderError, match=rf"manifest.json: {match}"):
        Recognizer.from_dir(copy)


def test_folder_files_are_checked(built, tmp_path):
    folder = built[1]
    copy = _copy(folder, tmp_path, "tokens")
    with open(os.path.join(copy, "tokens.txt"), "a") as f:
        f.write("four 4\n")
    with pytest.raises(ModelFolderError, match="tokens.txt: lists 5 tokens that differ"):
        Recognizer.from_dir(copy)
    copy = _copy(folder, tmp_path, "lexicon")
    with open(os.path.join(copy, "lexicon.txt"), "a") as f:
        f.write("four f o u r\n")
    with pytest.raises(ModelFolderError, match=r"lexicon.txt:4: token 'f' of word 'four'"):
        Recognizer.from_dir(copy)
    copy = _copy(folder, tmp_path, "json")
    with open(os.path.join(copy, "manifest.json"), "w") as f:
        f.write('{"model": "model.mdl",\n "frame_shift": }')
    with pytest.raises(ModelFolderError, match=r"manifest.json:2: invalid JSON"):
        Recognizer.from_dir(copy)


def test_package_refuses_a_lexicon_outside_the_graph_folder(built, tmp_path):
    from asrkit.recognizer import package_model_folder

    root, _, _ = built
    graph = tmp_path / "graph"
    shutil.copytree(root / "graph", graph)
    secret = tmp_path / "secret.txt"
    secret.write_text("one one\n")  # a readable lexicon: refused for where it is, not for what
    info = json.loads((graph / "graph.json").read_text())
    model, feats = str(root / "final.mdl"), str(root / "fbank.toml")
    (graph / "graph.json").write_text(json.dumps({**info, "lexicon": str(secret)}))
    res = run_cli(["package", "--model", model, "--features", feats, "--graph", str(graph),
                   "--out", str(tmp_path / "out")], timeout=TIMEOUT)
    assert_clean_failure(res, "graph.json: lexicon")
    assert "outside the graph folder" in res.stderr
    assert not (tmp_path / "out" / "lexicon.txt").exists()
    (graph / "graph.json").write_text(json.dumps({**info, "lexicon": "../secret.txt"}))
    with pytest.raises(ModelFolderError, match="graph.json: lexicon: '../secret.txt' lies "
                                               "outside the graph folder"):
        package_model_folder(str(tmp_path / "out"), model, feats, str(graph))
    assert not (tmp_path / "out" / "lexicon.txt").exists()
    (graph / "graph.json").write_text(json.dumps(info))
    os.remove(graph / "words.txt")
    os.symlink(secret, graph / "words.txt")
    with pytest.raises(ModelFolderError, match="words.txt: 'words.txt' lies outside"):
        package_model_folder(str(tmp_path / "out2"), model, feats, str(graph))
    assert not (tmp_path / "out2" / "graph" / "words.txt").exists()
    # the lexicon inside the graph folder, as asrkit graph build writes it, is what goes in
    os.remove(graph / "words.txt")
    shutil.copy(root / "graph" / "words.txt", graph / "words.txt")
    manifest = package_model_folder(str(tmp_path / "out3"), model, feats, str(graph))
    assert manifest["lexicon"] == "lexicon.txt"
    assert (tmp_path / "out3" / "lexicon.txt").read_text() == (graph / "lexicon.txt").read_text()
    assert sorted(os.listdir(tmp_path / "out3" / "graph")) == sorted(
        ["TLG.npz", "words.txt", "graph.json", "tokens.txt", "disambig_tokens.int",
         "disambig_words.int"])


def test_mutated_manifests_fail_cleanly(built, tmp_path):
    """Seeded mutants of manifest.json load or fail with a ModelFolderError naming the file
    (the commands turn it into a one-line error, as the cases above show)."""
    folder = built[1]
    data = open(os.path.join(folder, "manifest.json"), "rb").read()
    copy = _copy(folder, tmp_path)
    failed = 0
    for mutant in mutations(data, seed=13, count=40):
        with open(os.path.join(copy, "manifest.json"), "wb") as f:
            f.write(mutant)
        try:
            Recognizer.from_dir(copy)
        except ModelFolderError as e:
            assert "manifest.json" in str(e) or copy in str(e), str(e)
            failed += 1
    assert failed >= 10


def test_a_bad_item_among_many_is_counted(built, tmp_path):
    _, folder, wav = built
    short = write_wav(tmp_path / "short.wav", np.zeros(50, np.float32))
    res = run_cli(["transcribe", "--model-dir", folder, wav, short, str(tmp_path / "none.wav"),
                   "--json"], timeout=TIMEOUT)
    assert_clean_failure(res, "2 of 3 files failed")
    assert "short.wav" in res.stderr and "none.wav: no such file" in res.stderr
    assert [json.loads(line)["text"] for line in res.stdout.splitlines()] == ["one two"]
