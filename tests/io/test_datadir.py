"""Kaldi data directories: validation with file:line, fixing, subsets, and reading audio."""

import os

import numpy as np
import pytest
import soundfile as sf

from asrkit.io import AudioError, DataDir, fix_data_dir, validate_data_dir
from tests.io.synth import tone, write_kaldi_files


@pytest.fixture
def corpus(tmp_path, rng):
    """A valid data dir: 4 utterances of 2 speakers, whole-file wavs."""
    audio = {}
    wav = {}
    for i, utt in enumerate(["spk1-a", "spk1-b", "spk2-a", "spk2-b"]):
        x = tone(1600 + 160 * i, rng)
        path = tmp_path / f"{utt}.wav"
        sf.write(path, x, 16000, subtype="PCM_16")
        audio[utt] = x
        wav[utt] = str(path)
    tables = {
        "wav.scp": wav,
        "utt2spk": {u: u.split("-")[0] for u in wav},
        "text": {u: f"words of {u}" for u in wav},
        "utt2dur": {u: f"{audio[u].shape[0] / 16000:.3f}" for u in wav},
        "spk2gender": {"spk1": "f", "spk2": "m"},
    }
    data = str(tmp_path / "data")
    write_kaldi_files(data, tables)
    return data, audio


def _messages(data, **kw):
    return [str(p) for p in validate_data_dir(data, **kw) if p.severity == "error"]


def _edit(path, lines):
    with open(path, "w") as f:
        f.write("".join(line + "\n" for line in lines))


def _lines(path):
    with open(path) as f:
        return f.read().splitlines()


def test_valid_dir_has_no_problems(corpus):
    data, _ = corpus
    assert validate_data_dir(data) == []
    d = DataDir.read(data)
    assert d.utt_ids() == ["spk1-a", "spk1-b", "spk2-a", "spk2-b"]
    assert d.spk2utt() == {"spk1": ["spk1-a", "spk1-b"], "spk2": ["spk2-a", "spk2-b"]}


@pytest.mark.parametrize("name,edit,expected", [
    ("text", lambda ls: ls + ["zz-x hello"], "text:5: utterance id 'zz-x' not in utt2spk"),
    ("text", lambda ls: ls[:2] + ls[3:], "utt2spk:3: utterance id 'spk2-a' has no line in text"),
    ("text", lambda ls: [ls[1], ls[0]] + ls[2:], "text:2: not sorted: 'spk1-a' comes after"),
    ("utt2spk", lambda ls: ls + [ls[-1]], "utt2spk:5: duplicate key 'spk2-b' (first on line 4)"),
    ("utt2spk", lambda ls: ls[:1] + ["spk1-b spk9"] + ls[2:],
     "utt2spk:2: utt2spk is not in sorted order when sorted first on speaker id"),
    ("spk2utt", lambda ls: ["spk1 spk1-a"] + ls[1:],
     "spk2utt:1: utterances of speaker 'spk1' do not match utt2spk"),
    ("wav.scp", lambda ls: ls[:3], "utt2spk:4: utterance id 'spk2-b' has no line in wav.scp"),
    ("wav.scp", lambda ls: ls + ["spk3-a /x.wav"],
     "wav.scp:5: utterance id 'spk3-a' not in utt2spk"),
    ("utt2dur", lambda ls: ls[:1] + ["spk1-b -1"] + ls[2:],
     "utt2dur:2: spk1-b: expected a positive number, got '-1'"),
    ("utt2dur", lambda ls: ls[:1] + ["spk1-b"] + ls[2:], "utt2dur:2: expected 2 fields, got 1"),
    ("spk2gender", lambda ls: ["spk1 x"] + ls[1:], "spk2gender:1: gender of 'spk1' must be"),
    ("spk2gender", lambda ls: ls[:1], "spk2utt:2: speaker id 'spk2' has no line in spk2gender"),
    ("utt2spk", lambda ls: ls[:2] + [""] + ls[2:], "utt2spk:3: empty line"),
])
def test_each_inconsistency_is_caught_with_file_and_line(corpus, name, edit, expected):
    data, _ = corpus
    path = os.path.join(data, name)
    _edit(path, edit(_lines(path)))
    messages = _messages(data)
    assert any(m.startswith(os.path.join(data, expected.split(":")[0]))
               and expected.split(":", 1)[1] in m for m in messages), messages


def test_text_utterance_not_in_wav_scp(corpus):
    data, _ = corpus
    _edit(os.path.join(data, "wav.scp"), _lines(os.path.join(data, "wav.scp"))[1:])
    assert f"{data}/text:1: utterance id 'spk1-a' not in wav.scp" in _messages(data)


def test_missing_newline_missing_files_and_flags(corpus):
    data, _ = corpus
    with open(os.path.join(data, "text"), "a") as f:
        f.write("spk9-z no newline")
    msgs = _messages(data)
    assert any(m.startswith(f"{data}/text:5: no newline at end of file") for m in msgs), msgs
    assert _messages(data, no_text=True) == []
    os.unlink(os.path.join(data, "wav.scp"))
    assert f"{data}/wav.scp: no such file" in _messages(data, no_text=True)
    assert _messages(data, no_text=True, no_wav=True) == []


def test_feats_and_cmvn_scp_must_match(corpus):
    data, _ = corpus
    _edit(os.path.join(data, "feats.scp"), ["spk1-a /f.ark:5", "spk1-b /f.ark:9"])
    _edit(os.path.join(data, "cmvn.scp"), ["spk1 /c.ark:5", "spk3 /c.ark:9"])
    msgs = _messages(data)
    assert f"{data}/utt2spk:3: utterance id 'spk2-a' has no line in feats.scp" in msgs
    assert f"{data}/cmvn.scp:2: speaker id 'spk3' not in spk2utt" in msgs
    assert f"{data}/spk2utt:2: speaker id 'spk2' has no line in cmvn.scp" in msgs
    assert not any("feats.scp" in m for m in _messages(data, no_feats=True))


def test_segments_checks(corpus):
    data, _ = corpus
    wav = os.path.join(data, "wav.scp")
    rec = _lines(wav)[0].split()[1]
    _edit(wav, [f"rec1 {rec}"])
    _edit(os.path.join(data, "segments"), ["spk1-a rec1 0.0 0.05", "spk1-b rec1 0.05 0.02",
                                           "spk2-a rec2 0 -1", "spk2-b rec1 0.02 x"])
    msgs = _messages(data)
    assert f"{data}/segments:2: bad segment times: start 0.05, end 0.02 (need 0 <= start < end, " \
           "or end -1)" in msgs
    assert f"{data}/segments:3: recording id 'rec2' not in wav.scp" in msgs
    assert any(m.startswith(f"{data}/segments:4: start and end must be numbers") for m in msgs)


def test_fix_drops_inconsistent_entries_and_regenerates_spk2utt(corpus):
    data, _ = corpus
    text = _lines(os.path.join(data, "text"))
    _edit(os.path.join(data, "text"), [text[2], text[0], "zzz-x stray"] + text[3:])  # no spk1-b
    _edit(os.path.join(data, "spk2utt"), ["spk1 spk1-a"])
    _edit(os.path.join(data, "spk2gender"), ["spk1 f"])  # spk2 dropped, as fix_data_dir.sh
    report = fix_data_dir(data)
    assert report.dropped["utt2spk"] == ["spk1-b", "spk2-a", "spk2-b"]
    assert report.dropped["text"] == ["spk2-a", "spk2-b", "zzz-x"]
    assert report.num_utterances == 1 and report.num_speakers == 1
    assert "utt2spk: dropped 3 entries" in report.summary()
    assert validate_data_dir(data) == []
    assert _lines(os.path.join(data, "spk2utt")) == ["spk1 spk1-a"]
    assert os.path.isfile(os.path.join(data, ".backup", "text"))


def test_fix_sorts_and_removes_duplicates(corpus):
    data, _ = corpus
    u = _lines(os.path.join(data, "utt2spk"))
    _edit(os.path.join(data, "utt2spk"), [u[3], u[1], u[0], u[2], u[0]])
    assert _messages(data)
    fix_data_dir(data, backup=False)
    assert validate_data_dir(data) == []
    assert _lines(os.path.join(data, "utt2spk")) == u
    assert not os.path.exists(os.path.join(data, ".backup"))


def test_utterances_whole_files(corpus):
    data, audio = corpus
    d = DataDir.read(data)
    got = {u: (x, r) for u, x, r in d.utterances(scale="int16")}
    assert list(got) == d.utt_ids()
    for utt, (x, rate) in got.items():
        assert rate == 16000 and x.dtype == np.float32
        np.testing.assert_array_equal(x, audio[utt])


def test_utterances_with_segments_as_extract_segments(tmp_path, rng):
    x = tone(16000, rng)
    sf.write(tmp_path / "rec.wav", x, 16000, subtype="PCM_16")
    data = str(tmp_path / "data")
    segs = {"s-1": "rec 0.0 0.25", "s-2": "rec 0.3337 0.71", "s-3": "rec 0.9 1.2",
            "s-4": "rec 0.5 -1"}
    write_kaldi_files(data, {"wav.scp": {"rec": f"cat {tmp_path / 'rec.wav'} |"},
                             "segments": segs, "utt2spk": {u: "s" for u in segs},
                             "text": {u: "x" for u in segs}})
    assert validate_data_dir(data) == []
    got = {u: w for u, w, _ in DataDir.read(data).utterances(scale="int16")}
    for utt, seg in segs.items():
        _, start, end = seg.split()
        first, last = int(float(start) * 16000), int(float(end) * 16000)
        last = 16000 if last in (-16000, 19200) else last  # -1: to the end; 1.2: overshoot < 0.5s
        np.testing.assert_array_equal(got[utt], x[first:last])


def test_unreadable_audio_names_utterance(corpus):
    data, _ = corpus
    wav = os.path.join(data, "wav.scp")
    lines = _lines(wav)
    _edit(wav, lines[:1] + ["spk1-b /no/such/file.wav"] + lines[2:])
    d = DataDir.read(data)
    with pytest.raises(AudioError, match=r"utterance 'spk1-b' \(/no/such/file.wav\)"):
        list(d.utterances())
    results = list(d.audio())
    assert [r.error is None for r in results] == [True, False, True, True]
    assert "no such file" in results[1].error


def test_subset_write_read_round_trip(corpus, tmp_path):
    data, _ = corpus
    d = DataDir.read(data)
    sub = d.subset(["spk2-b", "spk1-a"])
    out = str(tmp_path / "sub")
    sub.write(out)
    assert validate_data_dir(out) == []
    again = DataDir.read(out)
    assert again.utt_ids() == ["spk1-a", "spk2-b"]
    assert again.table("spk2gender") == {"spk1": "f", "spk2": "m"}
    assert again.text()["spk2-b"] == "words of spk2-b"


def test_segment_channel_field_picks_the_channel(tmp_path, rng):
    st = np.stack([tone(8000, rng), tone(8000, rng, freq=1200)], axis=1)
    sf.write(tmp_path / "st.wav", st, 16000, subtype="PCM_16")
    data = str(tmp_path / "data")
    segs = {"a-left": "rec 0.1 0.2 0", "a-right": "rec 0.1 0.2 1", "a-mix": "rec 0.1 0.2"}
    write_kaldi_files(data, {"wav.scp": {"rec": str(tmp_path / "st.wav")}, "segments": segs,
                             "utt2spk": {u: "a" for u in segs}, "text": {u: "x" for u in segs}})
    assert validate_data_dir(data) == []
    got = {u: w for u, w, _ in DataDir.read(data).utterances(scale="int16")}
    np.testing.assert_array_equal(got["a-left"], st[1600:3200, 0])
    np.testing.assert_array_equal(got["a-right"], st[1600:3200, 1])
    np.testing.assert_allclose(got["a-mix"], st[1600:3200].mean(axis=1), atol=1e-3)
    _edit(os.path.join(data, "segments"), ["a-left rec 0.1 0.2 x", "a-mix rec 0.1 0.2 0 9",
                                           "a-right rec 0.1 0.2 1"])
    msgs = _messages(data)
    assert f"{data}/segments:1: channel must be an integer >= 0, got 'x'" in msgs
    assert any(m.startswith(f"{data}/segments:2: expected 4 or 5 fields") for m in msgs)
