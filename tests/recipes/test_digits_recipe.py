"""The digits recipe end to end at reduced size: real (FSDD, from the shared corpora copy) and
synthetic data -> features -> lang -> pretrain -> train -> graphs -> decode -> leave one speaker
out -> peer -> model folder, WER tables and report; then the model folder transcribes a file and
exports to ONNX."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.recipe
RECIPE = os.path.join(os.path.dirname(__file__), "..", "..", "recipes", "digits")
SHARED_FSDD = os.path.join(RECIPE, "..", "..", "..", "shared", "corpora", "fsdd-4spk")


@pytest.mark.skipif(not os.path.isdir(SHARED_FSDD), reason="no shared FSDD copy (../shared)")
def test_digits_recipe_runs_end_to_end(tmp_path):
    work = tmp_path / "digits"
    shutil.copytree(RECIPE, work, ignore=shutil.ignore_patterns("data", "exp"))
    shutil.copytree(os.path.join(RECIPE, "..", "utils"), tmp_path / "utils")
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
               ASRKIT_CACHE=str(tmp_path / "cache"))
    r = subprocess.run(["bash", str(work / "run.sh"), "--train-speakers", "6",
                        "--finetune-speakers", "4", "--loso-speakers", "3", "--dev-speakers",
                        "2", "--test-speakers", "2", "--utts-per-speaker", "5",
                        "--pretrain-epochs", "1", "--epochs", "1", "--loso-epochs", "1",
                        "--fsdd-takes", "2", "--fsdd", SHARED_FSDD, "--no-prepare", "--nj", "1",
                        "--models", "conformer_ctc conformer_transducer", "--model-epochs", "1"],
                       capture_output=True, text=True, env=env, timeout=1200)
    assert r.returncode == 0, r.stdout + r.stderr
    for stage in range(11):
        assert f"stage {stage}:" in r.stdout
    exp = work / "exp"
    # all six synthetic training speakers pre-train; the first four go on with the real speech
    synth = (work / "data/mfcc/synth_train/spk2utt").read_text().split()
    finetune = (work / "data/mfcc/synth_train_ft/spk2utt").read_text().splitlines()
    assert [line.split()[0] for line in finetune] == ["tr000", "tr001", "tr002", "tr003"]
    assert len(synth) == 6 + 6 * 5 and sum(len(line.split()) - 1 for line in finetune) == 20
    train = (work / "data/mfcc/train/utt2spk").read_text().split()[1::2]
    assert {s for s in train if s.startswith("tr")} == {"tr000", "tr001", "tr002", "tr003"}
    loso = (work / "data/mfcc/train_no_lucas/utt2spk").read_text().split()[1::2]
    assert {s for s in loso if s.startswith("tr")} == {"tr000", "tr001", "tr002"}
    assert not any(s.startswith("fsdd-lucas") for s in loso)
    score = json.loads((exp / "blstm/decode_synth_test_tg/score.json").read_text())
    assert score["num_sentences"] == 10
    # the synthetic test set twice: through channels and as the voices said it (same ids)
    clean = json.loads((exp / "blstm/decode_synth_test_clean_tg/score.json").read_text())
    assert clean["num_sentences"] == 10
    ids = {p: [line.split()[0] for line in (work / "data/synth" / p / "text").read_text()
               .splitlines()] for p in ("test", "test_clean")}
    assert ids["test"] == ids["test_clean"]
    # the shipped folder averages its log-probabilities over five VTLN warps; the synthetic
    # test sets go through it too
    manifest = json.loads((exp / "final/manifest.json").read_text())
    assert manifest["vtln_warps"] == [0.84, 0.92, 1.0, 1.08, 1.16]
    assert manifest["decode"]["word_insertion_penalty"] == float(
        (exp / "blstm/decode_dev_tg/best_wip").read_text())
    for part in ("test", "test_clean"):
        hyp = (exp / f"blstm/decode_synth_{part}_warps/hyp.txt").read_text().splitlines()
        assert sorted(line.split()[0] for line in hyp) == sorted(ids["test"])
    said = (work / "data/synth/test_clean/speakers.txt").read_text().splitlines()
    assert len(said) == 2 and all(line.endswith(" channel=clean") for line in said)
    voices = [line.split("\t")[0].split(", ")
              for line in (exp / "tables/synth_voices.tsv").read_text().splitlines()[1:-1]]
    assert {v for s, v in voices if s == "synth_test"} == \
        {v for s, v in voices if s == "synth_test_clean"} != set()
    # leave one speaker out: each real speaker decoded by a model that never heard them, all
    # their test recordings (2 takes of 10 digits, and strings joined from them)
    speakers = ["jackson", "nicolas", "yweweler", "lucas"]
    for spk in speakers:
        ref = (work / "data/fsdd" / spk / "test/text").read_text().splitlines()
        for decode in ("decode", "decode_one_pass"):  # through a folder as exp/final; one pass
            hyp = (exp / "loso" / decode / spk / "hyp.txt").read_text().splitlines()
            assert sorted(line.split()[0] for line in hyp) == sorted(
                line.split()[0] for line in ref)
            assert len(ref) > 20 and all(line.startswith(f"fsdd-{spk}-") for line in hyp)
        folder = json.loads((exp / "loso" / spk / "folder/manifest.json").read_text())
        assert folder["vtln_warps"] == manifest["vtln_warps"]
    table = (exp / "tables/real_speakers.tsv").read_text().splitlines()
    rows = [line.split("\t") for line in table[1:]]
    assert table[0].startswith("test set\twords\tasrkit WER % (errors)\tone pass WER % (errors)")
    assert [r[0] for r in rows] == [f"{s}, {k}" for s in speakers
                                    for k in ("isolated", "strings")] + ["all"]
    words = [int(r[1]) for r in rows]
    assert sum(words[:-1]) == words[-1]
    # the last column: the three most frequent errors of each row, within its error count
    assert table[0].endswith("\tasrkit: most frequent errors") and rows[-1][-1] == ""
    for r in rows[:-1]:
        errors = int(r[2].split("(")[1].rstrip(")"))
        listed = [] if r[-1] == "none" else r[-1].split(", ")
        assert len(listed) <= 3 and (errors == 0) == (r[-1] == "none")
        assert all(re.fullmatch(r"(\w+ -> \w+|[+-] \w+) x\d+", e) for e in listed), r
        assert sum(int(e.rsplit("x", 1)[1]) for e in listed) <= errors
    # stage 9: every model (one epoch; its one checkpoint averaged) on every comparison set
    models = ["blstm", "conformer_ctc", "conformer_transducer"]
    table = (exp / "tables/models.tsv").read_text().splitlines()
    assert table[0].split("\t") == ["test set", "words"] + [f"{m} WER % (errors)" for m in models]
    rows = [line.split("\t") for line in table[1:]]
    assert {r[0].split(",")[0] for r in rows} == {"synth_test", *speakers, "all"}
    assert all(len(r) == 2 + len(models) and "-" not in r[2:] for r in rows)
    page = (exp / "blstm/report.html").read_text()
    assert "Models trained on synthetic speech only" in page
    assert "Results" in page and "data:image/png;base64" in page
    assert "Real speakers never heard in training" in page
    assert "Synthetic voices never heard in training" in page
    assert "asrkit train conf/train.toml" in (exp / "commands.txt").read_text()
    wav = (work / "data/synth/test/wav.scp").read_text().split()[1]
    r = subprocess.run([sys.executable, "-m", "asrkit", "transcribe", "--model-dir",
                        str(exp / "final"), wav], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and r.stdout.startswith(wav + "\t"), r.stderr
    pytest.importorskip("onnxruntime")
    r = subprocess.run([sys.executable, "-m", "asrkit", "export", "--model-dir",
                        str(exp / "final"), "--onnx", str(tmp_path / "digits.onnx"), "--verify"],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
