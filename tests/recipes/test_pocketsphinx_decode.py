"""The digits recipe's peer decoder (recipes/digits/local/pocketsphinx_decode.py): its cache key
follows the samples pocketsphinx would decode, the words and the version, and nothing else; and
with pocketsphinx installed, a rerun reads the cache and gives the very hypotheses decoded."""

import importlib.util
import os
import shutil

import numpy as np
import pytest
import soundfile as sf

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(REPO, "recipes", "digits", "local", "pocketsphinx_decode.py")


def load_script():
    spec = importlib.util.spec_from_file_location("pocketsphinx_decode", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_data_dir(folder, waves, sample_rate=8000):
    """A Kaldi data dir of 16-bit WAV files, one per utterance u0, u1, ..."""
    os.makedirs(folder, exist_ok=True)
    scp, text, utt2spk = [], [], []
    for i, wave in enumerate(waves):
        path = os.path.join(folder, f"u{i}.wav")
        sf.write(path, wave, sample_rate, subtype="PCM_16")
        scp.append(f"u{i} {path}\n")
        text.append(f"u{i} one\n")
        utt2spk.append(f"u{i} s{i}\n")
    for name, lines in (("wav.scp", scp), ("text", text), ("utt2spk", utt2spk)):
        with open(os.path.join(folder, name), "w") as f:
            f.writelines(lines)
    return folder


def waves(seed=0, n=3):
    rng = np.random.default_rng(seed)
    return [0.1 * rng.standard_normal(4000 + 800 * i) for i in range(n)]


def test_cache_key_follows_the_audio_words_and_version(tmp_path):
    ps = load_script()
    a = make_data_dir(str(tmp_path / "a"), waves())
    b = make_data_dir(str(tmp_path / "b"), waves())  # the same samples in other files
    changed = waves()
    changed[1][100] += 0.01  # one sample, a few steps of 16 bits
    c = make_data_dir(str(tmp_path / "c"), changed)
    utts = ["u0", "u1", "u2"]
    key = ps.cache_key(a, utts, ps.WORDS, "5.1.1")
    assert len(key) == 24 and int(key, 16) >= 0
    assert ps.cache_key(b, utts, ps.WORDS, "5.1.1") == key
    assert ps.cache_key(c, utts, ps.WORDS, "5.1.1") != key
    assert ps.cache_key(a, utts[:2], ps.WORDS, "5.1.1") != key
    assert ps.cache_key(a, utts, ps.WORDS[:-1], "5.1.1") != key
    assert ps.cache_key(a, utts, ps.WORDS, "5.1.2") != key
    os.remove(os.path.join(a, "u2.wav"))
    assert ps.cache_key(a, utts, ps.WORDS, "5.1.1") is None  # unreadable: nothing cached


def test_rerun_reads_the_cache(tmp_path, capsys):
    pytest.importorskip("pocketsphinx")
    ps = load_script()
    data = make_data_dir(str(tmp_path / "data"), waves(n=2))
    cache = str(tmp_path / "cache")
    assert ps.main([data, str(tmp_path / "out1"), "--cache", cache]) == 0
    assert "decoded 2 utterances, 0 failed" in capsys.readouterr().out
    assert ps.main([data, str(tmp_path / "out2"), "--cache", cache]) == 0
    assert "2 utterances from the cache" in capsys.readouterr().out
    first = (tmp_path / "out1" / "hyp.txt").read_text()
    assert (tmp_path / "out2" / "hyp.txt").read_text() == first
    assert [line.split()[0] for line in first.splitlines()] == ["u0", "u1"]
    shutil.rmtree(tmp_path / "out2")
    assert ps.main([data, str(tmp_path / "out2"), "--cache", cache, "--no-cache"]) == 0
    assert "decoded 2 utterances" in capsys.readouterr().out
