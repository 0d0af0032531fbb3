"""``asrkit data combine``, as Kaldi's utils/combine_data.sh: the union of data directories."""

import os

from asrkit.cli.main import main
from asrkit.io import DataDir, validate_data_dir
from tests.io.synth import write_kaldi_files


def _dir(root, name, speakers, utts_per_speaker=2, **extra):
    utts = {f"{s}-u{i}": s for s in speakers for i in range(utts_per_speaker)}
    tables = {"utt2spk": utts, "wav.scp": {u: f"/audio/{name}/{u}.wav" for u in utts},
              "text": {u: f"{name} words" for u in utts},
              "utt2dur": {u: "1.5" for u in utts}}
    for file, make in extra.items():
        tables[file.replace("_", ".") if file.endswith("_scp") else file] = make(utts)
    folder = str(root / name)
    write_kaldi_files(folder, tables)
    return folder


def test_combine_is_the_union_and_validates(tmp_path, capsys):
    a = _dir(tmp_path, "a", ["jackson", "lucas"])
    b = _dir(tmp_path, "b", ["tr001", "tr002", "tr003"], utts_per_speaker=3,
             segments=lambda utts: {u: f"{u} 0.5 1.0" for u in utts})
    c = _dir(tmp_path, "c", ["zz"], utts_per_speaker=1)
    dest = str(tmp_path / "all")
    assert main(["data", "combine", dest, a, b, c]) == 0
    out = capsys.readouterr()
    assert f"{dest}: 14 utterances of 6 speakers from 3 directories" in out.out
    d = DataDir.read(dest)
    assert len(d.utt2spk) == 14 and d.text()["tr002-u1"] == "b words"
    assert d.spk2utt()["lucas"] == ["lucas-u0", "lucas-u1"]
    # sources without segments get whole-recording segments
    assert d.table("segments")["jackson-u0"] == "jackson-u0 0 -1"
    assert d.table("segments")["tr001-u2"] == "tr001-u2 0.5 1.0"
    assert d.utt2dur()["zz-u0"] == 1.5
    assert [p for p in validate_data_dir(dest) if p.severity == "error"] == []


def test_files_not_everywhere_are_left_out_with_a_warning(tmp_path, capsys):
    a = _dir(tmp_path, "a", ["s1"], spk2gender=lambda utts: {"s1": "m"})
    b = _dir(tmp_path, "b", ["s2"])
    dest = str(tmp_path / "all")
    assert main(["data", "combine", dest, a, b]) == 0
    assert f"spk2gender: not in {b}: left out" in capsys.readouterr().err
    assert not os.path.exists(os.path.join(dest, "spk2gender"))


def test_duplicates_and_conflicts_name_both_places(tmp_path, capsys):
    a = _dir(tmp_path, "a", ["s1"])
    b = _dir(tmp_path, "b", ["s1"])  # the same utterance ids
    assert main(["data", "combine", str(tmp_path / "all"), a, b]) == 2
    err = capsys.readouterr().err
    assert f"{b}/utt2spk:1: key 's1-u0' is also in {a}/utt2spk:1" in err
    assert main(["data", "combine", a, a, b]) == 2
    assert "DEST must differ" in capsys.readouterr().err
    c = _dir(tmp_path, "c", ["s2"], cmvn_scp=lambda utts: {"s2": "/x/c.ark:10"})
    d = _dir(tmp_path, "d", ["s2x"], cmvn_scp=lambda utts: {"s2": "/x/d.ark:10"})
    assert main(["data", "combine", str(tmp_path / "cd"), c, d]) == 2
    assert "key 's2' is also in" in capsys.readouterr().err
