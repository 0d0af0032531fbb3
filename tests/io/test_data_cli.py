"""``asrkit data validate|fix|subset|split``, as Kaldi's utils/*_data_dir.sh scripts."""

import json
import os

import pytest

from asrkit.cli.main import main
from asrkit.io import DataDir, validate_data_dir
from tests.io.synth import write_kaldi_files


@pytest.fixture
def data(tmp_path):
    utts = {f"spk{s}-u{i}": f"spk{s}" for s in range(1, 4) for i in range(1, 1 + s)}  # 1+2+3
    folder = str(tmp_path / "train")
    write_kaldi_files(folder, {
        "utt2spk": utts,
        "wav.scp": {u: f"/audio/{u}.wav" for u in utts},
        "text": {u: "a b" for u in utts},
        "utt2dur": dict(zip(sorted(utts), ["2.5", "1.0", "3.0", "0.5", "9.0", "4.0"])),
    })
    return folder


def _utts(folder):
    return DataDir.read(folder).utt_ids()


def test_validate_exit_status_and_json(data, capsys):
    assert main(["data", "validate", data]) == 0
    assert "valid data directory" in capsys.readouterr().out
    with open(os.path.join(data, "text"), "a") as f:
        f.write("aaa stray\n")
    assert main(["data", "validate", data]) == 1
    assert f"{data}/text:7: not sorted" in capsys.readouterr().err
    assert main(["data", "validate", data, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert not report["valid"]
    assert {"file": f"{data}/text", "line": 7, "severity": "error",
            "message": "utterance id 'aaa' not in utt2spk"} in report["problems"]


def test_fix(data, capsys):
    with open(os.path.join(data, "text"), "a") as f:
        f.write("aaa stray\n")
    assert main(["data", "fix", data, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["dropped"]["text"] == ["aaa"] and report["num_utterances"] == 6
    assert validate_data_dir(data) == []


@pytest.mark.parametrize("option,expected", [
    (["--first", "2"], ["spk1-u1", "spk2-u1"]),
    (["--last", "2"], ["spk3-u2", "spk3-u3"]),
    (["--num", "3"], ["spk1-u1", "spk2-u2", "spk3-u2"]),
    (["--per-spk", "1"], ["spk1-u1", "spk2-u1", "spk3-u1"]),
    (["--speakers", "3"], ["spk1-u1", "spk2-u1", "spk2-u2"]),
    (["--shortest", "2"], ["spk2-u1", "spk3-u1"]),
])
def test_subset(data, tmp_path, capsys, option, expected):
    dest = str(tmp_path / "sub")
    assert main(["data", "subset", data, dest, *option]) == 0
    assert _utts(dest) == expected
    assert validate_data_dir(dest) == []


def test_subset_by_lists(data, tmp_path):
    (tmp_path / "utts").write_text("spk2-u2\nspk1-u1 extra fields\n")
    (tmp_path / "spks").write_text("spk2\n")
    assert main(["data", "subset", data, str(tmp_path / "a"), "--utt-list",
                 str(tmp_path / "utts")]) == 0
    assert _utts(str(tmp_path / "a")) == ["spk1-u1", "spk2-u2"]
    assert main(["data", "subset", data, str(tmp_path / "b"), "--spk-list",
                 str(tmp_path / "spks")]) == 0
    assert _utts(str(tmp_path / "b")) == ["spk2-u1", "spk2-u2"]
    assert main(["data", "subset", data, str(tmp_path / "c"), "--random", "4"]) == 0
    assert len(_utts(str(tmp_path / "c"))) == 4


def test_split_keeps_speakers_together(data, capsys):
    assert main(["data", "split", data, "2"]) == 0
    parts = [DataDir.read(os.path.join(data, "split2", str(j))) for j in (1, 2)]
    assert [p.speakers() for p in parts] == [["spk1", "spk2"], ["spk3"]]
    assert sorted(u for p in parts for u in p.utt_ids()) == _utts(data)
    assert main(["data", "split", data, "4"]) == 2
    assert "cannot split 3 speakers into 4 parts" in capsys.readouterr().err
    assert main(["data", "split", data, "4", "--per-utt"]) == 0
    sizes = [len(_utts(os.path.join(data, "split4utt", str(j)))) for j in range(1, 5)]
    assert sum(sizes) == 6 and max(sizes) - min(sizes) <= 1


def test_not_a_data_dir(tmp_path, capsys):
    assert main(["data", "fix", str(tmp_path)]) == 2
    assert "utt2spk: no such file" in capsys.readouterr().err
