"""asrkit package / transcribe / align on a small (untrained) model folder: the plumbing, the
formats, resampling, chunking of long files and error handling."""

import json
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from asrkit.models import Model, save
from asrkit.recognizer import quiet_cuts

TOKENS = ["<blk>", "one", "two", "three"]


def _asrkit(*args):
    return subprocess.run([sys.executable, "-m", "asrkit", *args], capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("md")
    net = {"seed": 0, "layers": [{"type": "blstm", "hidden": 8, "num_layers": 1}]}
    save(str(tmp / "final.mdl"), Model(net, 40, TOKENS, blank=0))
    (tmp / "fbank.toml").write_text('[features]\ntype = "fbank"\nnum_mel_bins = 40\n'
                                    'dither = 1.0\n[cmvn]\nmode = "speaker"\n')
    (tmp / "tokens.txt").write_text("".join(f"{t} {i}\n" for i, t in enumerate(TOKENS)))
    (tmp / "lexicon.txt").write_text("one one\ntwo two\nthree three\n")
    r = _asrkit("graph", "build", "--tokens", str(tmp / "tokens.txt"), "--lexicon",
                str(tmp / "lexicon.txt"), "--word-loop", "--out", str(tmp / "graph"))
    assert r.returncode == 0, r.stderr
    r = _asrkit("package", "--model", str(tmp / "final.mdl"), "--features",
                str(tmp / "fbank.toml"), "--graph", str(tmp / "graph"), "--out",
                str(tmp / "final"))
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp / "final" / "manifest.json").read_text())
    assert manifest["frame_shift"] == pytest.approx(0.01) and manifest["sample_rate"] == 16000
    assert (tmp / "final" / "lexicon.txt").read_text().startswith("one one")
    return tmp


def test_transcribe_any_rate_and_long_files_in_chunks(model_dir, tmp_path):
    rng = np.random.default_rng(0)
    sf.write(tmp_path / "short.flac", (rng.normal(size=16000) * 0.1).astype(np.float32), 8000)
    long = (rng.normal(size=16000 * 75) * 0.05).astype(np.float32)
    long[16000 * 25: 16000 * 26] = 0  # a pause: the chunk boundary goes there
    sf.write(tmp_path / "long.wav", long, 16000)
    (tmp_path / "broken.wav").write_bytes(b"RIFF....not audio")
    md = str(model_dir / "final")
    r = _asrkit("transcribe", "--model-dir", md, str(tmp_path / "short.flac"),
                str(tmp_path / "long.wav"), str(tmp_path / "broken.wav"), "--json")
    assert r.returncode == 1  # one file failed; the others were still transcribed
    assert "broken.wav" in r.stderr
    outs = [json.loads(line) for line in r.stdout.splitlines()]
    assert [o["path"].rsplit("/", 1)[1] for o in outs] == ["short.flac", "long.wav"]
    for o, dur in zip(outs, (2.0, 75.0)):
        assert o["text"] == " ".join(w["word"] for w in o["words"])
        for w in o["words"]:
            assert 0 <= w["start"] <= dur and 0 <= w["confidence"] <= 1
            assert w["word"] in ("one", "two", "three")
    r = _asrkit("transcribe", "--model-dir", md, str(tmp_path / "short.flac"))
    assert r.returncode == 0 and r.stdout.startswith(str(tmp_path / "short.flac") + "\t")


def test_quiet_cuts_split_at_pauses():
    wave = np.ones(16000 * 70, np.float32)
    wave[16000 * 25: 16000 * 25 + 800] = 0
    cuts = quiet_cuts(wave, 16000, 30.0)
    assert cuts[0][0] == 0 and cuts[-1][1] == len(wave)
    assert all(b - a <= 30 * 16000 for a, b in cuts)
    assert 16000 * 25 <= cuts[0][1] <= 16000 * 25 + 800
    assert all(cuts[i][1] == cuts[i + 1][0] for i in range(len(cuts) - 1))


def test_align_writes_ordered_ctm(model_dir, tmp_path):
    rng = np.random.default_rng(1)
    sf.write(tmp_path / "utt.wav", (rng.normal(size=32000) * 0.1).astype(np.float32), 16000)
    md = str(model_dir / "final")
    r = _asrkit("align", "--model-dir", md, str(tmp_path / "utt.wav"), "--text",
                "one two two three")
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines()]
    assert [row[4] for row in rows] == ["one", "two", "two", "three"]
    starts = [float(row[2]) for row in rows]
    assert starts == sorted(starts) and starts[-1] + float(rows[-1][3]) <= 2.0 + 1e-6
    r = _asrkit("align", "--model-dir", md, str(tmp_path / "utt.wav"), "--text", "four")
    assert r.returncode == 1 and "no tokens for" in r.stderr
