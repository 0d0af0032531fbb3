"""``asrkit lm train | ppl | prune`` end to end, and their error messages."""

import json

import pytest

from asrkit.cli.main import main
from asrkit.lm import NgramLM


def test_train_writes_the_shipped_model(test_text, test_arpa, tmp_path):
    out = tmp_path / "lm.arpa"
    assert main(["lm", "train", "--order", "3", "--text", str(test_text),
                 "--output", str(out)]) == 0
    assert out.read_text() == test_arpa.read_text()


def test_train_options_ppl_json_and_prune(test_text, tmp_path, capsys):
    vocab = tmp_path / "words.txt"
    vocab.write_text("the\ncat\ndog\nsees\n")
    binary = tmp_path / "lm.bin"
    assert main(["lm", "train", "--order", "2", "--text", str(test_text), "--output",
                 str(binary), "--binary", "--vocab", str(vocab), "--discount", "witten-bell",
                 "--cutoffs", "0", "1"]) == 0
    lm = NgramLM.load(binary)
    assert lm.vocab[:3] == ["<unk>", "<s>", "</s>"]
    assert sorted(lm.vocab[3:]) == ["cat", "dog", "sees", "the"]
    capsys.readouterr()
    assert main(["lm", "ppl", "--lm", str(binary), "--text", str(test_text), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["sentences"] == 50 and stats["words"] == 287 and stats["oovs"] > 0
    assert stats["ppl"] > 1 and stats["ppl1"] > stats["ppl"]
    pruned = tmp_path / "small.arpa"
    arpa = tmp_path / "lm.arpa"
    assert main(["lm", "train", "--text", str(test_text), "--output", str(arpa)]) == 0
    assert main(["lm", "prune", "--lm", str(arpa), "--threshold", "1e-3", "--output",
                 str(pruned)]) == 0
    assert sum(NgramLM.load(pruned).counts) < sum(NgramLM.load(arpa).counts)
    assert main(["lm", "ppl", "--lm", str(pruned), "--text", str(test_text)]) == 0
    assert "ppl=" in capsys.readouterr().out


@pytest.mark.parametrize("args,message", [
    (["ppl", "--lm", "missing.arpa", "--text", "x"], "missing.arpa: no such file"),
    (["train", "--text", "missing.txt", "--output", "o.arpa"], "missing.txt: no such file"),
])
def test_missing_files_are_clean_errors(args, message, capsys):
    assert main(["lm", *args]) == 2
    assert message in capsys.readouterr().err


def test_bad_inputs_name_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.arpa"
    bad.write_text("\\data\\\nngram 1=two\n")
    text = tmp_path / "t.txt"
    text.write_text("a b\n<s> c\n")
    assert main(["lm", "ppl", "--lm", str(bad), "--text", str(text)]) == 2
    assert f"{bad}:2: bad count header" in capsys.readouterr().err
    assert main(["lm", "train", "--text", str(text), "--output", str(tmp_path / "o")]) == 2
    assert f"{text}:2: the text contains <s>" in capsys.readouterr().err


def test_train_clears_temporaries_of_killed_runs_and_publishes_atomically(test_text, tmp_path,
                                                                           capsys):
    out = tmp_path / "lm.arpa"
    stale = tmp_path / ".lm.arpa.k1ll3d.tmp"  # what atomic_open leaves when SIGKILLed
    stale.write_text("\\data\\\nngram 1=")
    other = tmp_path / ".other.arpa.x.tmp"  # another output's: not ours to remove
    other.write_text("x")
    assert main(["lm", "train", "--text", str(test_text), "--output", str(out)]) == 0
    assert not stale.exists() and other.exists()
    assert f"removed {stale}" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.arpa.x.tmp", "lm.arpa"]


@pytest.mark.parametrize("args,message", [
    (["train", "--order", "0"], "--order must be in 1..64"),
    (["train", "--vocab-size", "0"], "--vocab-size must be at least 1"),
    (["train", "--prune", "nan"], "--prune: pruning threshold must be a finite number"),
    (["prune", "--threshold", "nan"], "--threshold: pruning threshold must be a finite"),
])
def test_numbers_are_checked_before_any_work(args, message, test_text, test_arpa, tmp_path,
                                             capsys):
    source = ["--text", str(test_text)] if args[0] == "train" else ["--lm", str(test_arpa)]
    assert main(["lm", *args, *source, "--output", str(tmp_path / "o.arpa")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o.arpa").exists()


def test_output_folder_is_refused(test_text, tmp_path, capsys):
    assert main(["lm", "train", "--text", str(test_text), "--output", str(tmp_path)]) == 2
    assert f"{tmp_path}: is a directory" in capsys.readouterr().err


def test_text_that_is_not_utf8_names_the_file_and_line(test_text, test_arpa, tmp_path,
                                                        monkeypatch, capsys):
    import io

    bad = tmp_path / "t.txt"
    bad.write_bytes(b"the cat\nthe \xff dog\n")
    assert main(["lm", "ppl", "--lm", str(test_arpa), "--text", str(bad)]) == 2
    assert f"{bad}:2: not UTF-8 text" in capsys.readouterr().err
    assert main(["lm", "train", "--text", str(test_text), "--vocab", str(bad),
                 "--output", str(tmp_path / "o.arpa")]) == 2
    assert f"{bad}:2: not UTF-8 text" in capsys.readouterr().err
    for command in (["ppl", "--lm", str(test_arpa)], ["train", "--output", str(tmp_path / "o")]):
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(bad.read_bytes())))
        assert main(["lm", *command, "--text", "-"]) == 2
        assert "<stdin>:2: not UTF-8 text" in capsys.readouterr().err
    assert not (tmp_path / "o.arpa").exists() and not (tmp_path / "o").exists()


def test_ppl_of_stdin_equals_ppl_of_the_file(test_text, test_arpa, monkeypatch, capsys):
    import io

    assert main(["lm", "ppl", "--lm", str(test_arpa), "--text", str(test_text), "--json"]) == 0
    from_file = json.loads(capsys.readouterr().out)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(test_text.read_bytes())))
    assert main(["lm", "ppl", "--lm", str(test_arpa), "--text", "-", "--json"]) == 0
    from_stdin = json.loads(capsys.readouterr().out)
    assert from_stdin == {**from_file, "text": "-"}
