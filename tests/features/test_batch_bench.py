"""``asrkit bench fbank`` on tiny sizes: it runs, prints ratios, and its JSON is well formed."""

import json

import numpy as np
import pytest

from asrkit.cli.main import main

pytest.importorskip("kaldi_native_fbank")


def test_bench_fbank_json(capsys):
    assert main(["bench", "fbank", "--json", "--repeat", "1", "--seconds", "2",
                 "--files", "4", "--max-seconds", "1.5"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["bench"] == "fbank"
    names = [c["name"] for c in report["cases"]]
    assert names == ["fbank 2 s file", "mfcc 2 s file", "fbank batch of 4 files"]
    for case in report["cases"]:
        assert case["asrkit_s"] > 0 and case["reference"] == "knf" and case["speedup"] > 0
        assert float(case["extra"]["max_rel_diff_vs_knf"]) < 1e-3


def test_bench_fbank_table_with_wav_file(tmp_path, capsys):
    soundfile = pytest.importorskip("soundfile")
    wav = tmp_path / "a.wav"
    soundfile.write(wav, (np.random.default_rng(0).standard_normal(24000) * 3000)
                    .astype(np.int16), 16000)
    assert main(["bench", "fbank", "--repeat", "1", "--wav", str(wav), "--files", "0"]) == 0
    out = capsys.readouterr().out
    assert "fbank 2 s file" in out and "ratio" in out and "batch of" not in out


def test_bench_fbank_rejects_wrong_sample_rate(tmp_path, capsys):
    soundfile = pytest.importorskip("soundfile")
    wav = tmp_path / "b.wav"
    soundfile.write(wav, np.zeros(8000, dtype=np.int16), 8000)
    assert main(["bench", "fbank", "--repeat", "1", "--wav", str(wav), "--files", "0"]) == 2
    assert "b.wav: sample rate 8000 Hz" in capsys.readouterr().err
