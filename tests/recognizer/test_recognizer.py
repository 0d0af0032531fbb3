"""``asrkit.Recognizer`` on the tone model folder (tests/recognizer/tones.py), whose right answers
are known: each tone is a word starting where the tone starts."""

import json
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from asrkit import Recognizer
from asrkit.features import apply_cmvn, cmvn_stats, fbank
from asrkit.recognizer import RecognizerError
from tests.recognizer.test_normalize import kaldi_sliding_cmvn
from tests.recognizer.tones import make_tone_folder, recording, set_manifest, write_wav

FRAME_TOL_S = 0.03  # a word starts within a few 10 ms frames of its tone (25 ms window)
WORDS = ["one", "two", "three", "two", "one"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_tone_folder(str(tmp_path_factory.mktemp("tones")))


@pytest.fixture(scope="module")
def rec(folder):
    return Recognizer.from_dir(folder)


def _asrkit(*args):
    return subprocess.run([sys.executable, "-m", "asrkit", *args], capture_output=True,
                          text=True, timeout=300)


def _check_words(result, words, starts):
    assert result.text == " ".join(words)
    assert [w.word for w in result.words] == words
    for w, s in zip(result.words, starts):
        assert abs(w.start - s) <= FRAME_TOL_S, (w, s)
        assert 0 < w.duration and 0 <= w.confidence <= 1


def test_path_and_samples_at_8_and_16_khz_match_the_command(folder, rec, tmp_path):
    cases = {}
    for rate in (8000, 16000):
        wave, starts = recording(WORDS, rate=rate, seed=rate)
        cases[rate] = (write_wav(tmp_path / f"r{rate}.wav", wave, rate), starts)
    r = _asrkit("transcribe", "--model-dir", folder, "--json", *(p for p, _ in cases.values()))
    assert r.returncode == 0, r.stderr
    command = [json.loads(line) for line in r.stdout.splitlines()]
    for (rate, (path, starts)), line in zip(cases.items(), command):
        by_path = rec.transcribe(path)
        _check_words(by_path, WORDS, starts)
        assert line == {"path": path, **by_path.as_dict()}
        floats, file_rate = sf.read(path, dtype="float32")
        ints, _ = sf.read(path, dtype="int16")
        assert file_rate == rate
        for samples in (floats, ints):
            assert rec.transcribe(samples, rate).as_dict() == by_path.as_dict()
        with open(path, "rb") as f:
            assert rec.transcribe(f.read()).as_dict() == by_path.as_dict()


def test_long_recording_is_cut_at_pauses_and_keeps_times(rec):
    words = (WORDS * 20)[:90]
    wave, starts = recording(words)  # ~66 s: three chunks
    assert len(wave) / 16000 > 2 * rec.max_chunk
    chunked = rec.transcribe(wave, 16000)
    _check_words(chunked, words, starts)
    whole = Recognizer(rec.folder, rec.options, max_chunk=120.0).transcribe(wave, 16000)
    # the same words at the same times (a chunk's last word may end sooner: at the cut)
    assert [(w["word"], w["start"], w["confidence"]) for w in chunked.as_dict()["words"]] == [
        (w["word"], w["start"], w["confidence"]) for w in whole.as_dict()["words"]]


@pytest.mark.parametrize("manifest", [
    {"cmvn": "none"}, {"cmvn": "utterance", "norm_vars": True}, {"cmvn": "speaker"},
    {"cmvn": "sliding", "cmn_window": 200, "min_cmn_window": 50},
    {"cmvn": "sliding", "cmn_window": 150, "cmn_center": True, "norm_vars": True},
])
def test_chunks_are_normalised_as_training_normalises_the_recording(tmp_path, manifest,
                                                                     monkeypatch):
    folder = make_tone_folder(str(tmp_path / "m"))
    set_manifest(folder, **manifest)
    rec = Recognizer.from_dir(folder, max_chunk=4.0)
    wave, _ = recording(WORDS * 3)  # ~10.5 s: three chunks
    seen = []
    real = Recognizer.log_probs
    monkeypatch.setattr(Recognizer, "log_probs", lambda self, f: seen.append(f) or real(self, f))
    rec.transcribe(wave, 16000)
    assert len(seen) >= 3
    raw = fbank(wave * 32768, num_mel_bins=40, dither=0.0)  # the whole recording's features
    norm_vars = manifest.get("norm_vars", False)
    want = {
        "none": lambda: raw,
        "utterance": lambda: apply_cmvn(raw, cmvn_stats(raw), norm_vars=norm_vars),
        "speaker": lambda: apply_cmvn(raw, cmvn_stats(raw), norm_vars=norm_vars),
        "sliding": lambda: kaldi_sliding_cmvn(raw, manifest.get("cmn_window"),
                                              manifest.get("min_cmn_window", 100),
                                              manifest.get("cmn_center", False), norm_vars),
    }[manifest["cmvn"]]()
    np.testing.assert_allclose(np.concatenate(seen), want, rtol=1e-5, atol=1e-4)


def test_transcribe_many_keeps_input_order(folder, rec, tmp_path):
    items, expected = [], []
    for i, words in enumerate([["three"], ["one", "two"], ["two", "two", "three"], ["one"]]):
        wave, _ = recording(words, seed=i)
        items.append(write_wav(tmp_path / f"{i}.wav", wave) if i % 2 else (wave, 16000))
        expected.append(" ".join(words))
    (tmp_path / "broken.wav").write_bytes(b"RIFF....not audio")
    items.insert(2, str(tmp_path / "broken.wav"))
    for nj in (1, 2):
        out = rec.transcribe_many(items, nj=nj, errors="keep")
        assert isinstance(out[2], RecognizerError) and "broken.wav" in str(out[2])
        assert [r.text for r in out[:2] + out[3:]] == expected
    with pytest.raises(RecognizerError, match="broken.wav"):
        rec.transcribe_many(items, nj=1)
    with pytest.raises(RecognizerError, match="nj: expected a positive number"):
        rec.transcribe_many(items, nj=0)
    paths = [i for i in items if isinstance(i, str)]
    r = _asrkit("transcribe", "--model-dir", folder, "--nj", "2", *paths)
    assert r.returncode == 1
    assert [line.split("\t")[0] for line in r.stdout.splitlines()] == [paths[0], paths[2]]
    assert "broken.wav" in r.stderr and "1 of 3 files failed" in r.stderr


def test_align_gives_word_times(rec):
    words = ["two", "one", "three", "three"]
    wave, starts = recording(words, seed=3)
    a = rec.align(wave, " ".join(words), 16000)
    assert [w.word for w in a.words] == words
    for w, s in zip(a.words, starts):
        assert abs(w.start - s) <= FRAME_TOL_S and abs(w.duration - 0.3) <= FRAME_TOL_S
    assert -0.1 < a.log_prob_per_frame <= 0
    lines = a.ctm_lines("utt")
    assert lines[0].split()[:5] == ["utt", "1", f"{a.words[0].start:.3f}",
                                    f"{a.words[0].duration:.3f}", "two"]
    for text, match in (("", "empty transcript"), ("one four", "word 'four': no tokens"),
                        (" ".join(["one", "two"] * 200), "does not fit the audio")):
        with pytest.raises(RecognizerError, match=match):
            rec.align(wave, text, 16000)


@pytest.mark.parametrize("audio,rate,match", [
    (np.zeros(0, np.float32), 16000, "1-D array"),
    (np.zeros((2, 100), np.float32), 16000, "1-D array"),
    (np.full(8000, np.nan, np.float32), 16000, "NaN or infinite"),
    (np.zeros(8000, np.float32), None, "need their sample_rate"),
    (np.zeros(8000, np.float32), 0, "sample_rate must be"),
    (np.zeros(8000, np.int32), 16000, "int16 or float"),
    (np.zeros(100, np.float32), 16000, "too short for one feature frame"),
    ("/nonexistent.wav", None, "/nonexistent.wav: no such file"),
])
def test_bad_audio_is_a_recognizer_error(rec, audio, rate, match):
    with pytest.raises(RecognizerError, match=match):
        rec.transcribe(audio, rate)


@pytest.mark.parametrize("options,match", [
    ({"beam": -5}, "beam must be a finite number > 0"),
    ({"beam": float("nan")}, "beam must be a finite number"),
    ({"nbest": 0}, "nbest must be an integer >= 1"),
    ({"nbest": 10**9}, "nbest must be at most 1000"),
    ({"acoustic_scale": float("inf")}, "acoustic_scale must be a finite"),
    ({"max_chunk": 0}, "max_chunk must be a finite number >= 1"),
    ({"max_chunk": 1e-5}, "max_chunk"),
    ({"lattice_beam": 0}, "lattice_beam"),
    ({"max_active": 2.5}, "max_active must be an integer"),
    ({"min_active": 9000}, r"min_active \(9000\) exceeds max_active"),
    ({"bogus": 1}, "bogus: unknown search option"),
])
def test_bad_options_name_the_option(folder, options, match):
    with pytest.raises(RecognizerError, match=match):
        Recognizer.from_dir(folder, **options)
