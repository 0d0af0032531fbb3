"""The ``asrkit nnlm`` command: train, ppl, rescore; errors name the file."""

import json

import pytest

from asrkit.cli.main import main
from asrkit.nnlm import LstmLM, read_nbest
from tests.nnlm.grammar import corpus


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("nnlm")
    (d / "train.txt").write_text("\n".join(corpus(600, 1)) + "\n")
    (d / "dev.txt").write_text("\n".join(corpus(50, 2)) + "\n")
    return d


@pytest.fixture(scope="module")
def model(files):
    out = files / "lm.npz"
    rc = main(["nnlm", "train", "--text", str(files / "train.txt"), "--valid",
               str(files / "dev.txt"), "--output", str(out), "--embed", "8", "--hidden", "16",
               "--epochs", "5", "--lr", "0.01", "--batch-size", "16"])
    assert rc == 0
    return out


def test_train_writes_a_loadable_model(model, capsys):
    lm = LstmLM.load(model)
    assert lm.config.embed_dim == 8 and lm.config.hidden_dim == 16
    assert 1 <= len(lm.history) <= 5


def test_ppl_json(model, files, capsys):
    assert main(["nnlm", "ppl", "--lm", str(model), "--text", str(files / "dev.txt"),
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["sentences"] == 50 and out["oovs"] == 0
    lm = LstmLM.load(model)
    assert out["ppl"] == pytest.approx(lm.perplexity(corpus(50, 2)), rel=1e-9)
    assert main(["nnlm", "ppl", "--lm", str(model), "--text", str(files / "dev.txt")]) == 0
    assert "ppl=" in capsys.readouterr().out


def test_rescore_reranks_and_writes_best_text(model, files, capsys):
    nb = files / "nbest.txt"
    nb.write_text("u1-1 10 0 the cats sleeps\nu1-2 10.1 0 the cats sleep\n"
                  "u2-1 5 1 a dog runs\n")
    out, best = files / "out.txt", files / "text"
    assert main(["nnlm", "rescore", "--nbest", str(nb), "--lm", str(model), "--nn-weight",
                 "1", "--output", str(out), "--best-text", str(best)]) == 0
    ranked = read_nbest(out)
    assert ranked["u1"][0].words == "the cats sleep".split()
    assert best.read_text() == "u1 the cats sleep\nu2 a dog runs\n"
    assert main(["nnlm", "rescore", "--nbest", str(nb), "--lm", str(model), "--json"]) == 0
    js = json.loads(capsys.readouterr().out)
    assert set(js["u1"][0]) >= {"words", "ac_cost", "nn_lm_cost", "new_lm_cost", "total"}


def test_user_errors_exit_2_naming_the_file(model, files, capsys):
    assert main(["nnlm", "ppl", "--lm", str(files / "nope.npz"), "--text",
                 str(files / "dev.txt")]) == 2
    assert "nope.npz: no such file" in capsys.readouterr().err
    bad = files / "bad.txt"
    bad.write_text("u1-1 10 0 a\nu1 3 4 b\n")
    assert main(["nnlm", "rescore", "--nbest", str(bad), "--lm", str(model)]) == 2
    assert "bad.txt:2" in capsys.readouterr().err
    text = files / "bos.txt"
    text.write_text("a b\n<s> c\n")
    assert main(["nnlm", "train", "--text", str(text), "--output", str(files / "x.npz")]) == 2
    assert "bos.txt:2" in capsys.readouterr().err
    assert not (files / "x.npz").exists()


def test_train_resumes_from_a_checkpoint(files, capsys):
    common = ["nnlm", "train", "--text", str(files / "dev.txt"), "--embed", "4", "--hidden",
              "4", "--checkpoint", str(files / "state.npz"), "--lr", "0.01"]
    assert main([*common, "--output", str(files / "a.npz"), "--epochs", "1"]) == 0
    capsys.readouterr()
    assert main([*common, "--output", str(files / "b.npz"), "--epochs", "2", "--resume"]) == 0
    assert "resuming from" in capsys.readouterr().err
    assert [e["epoch"] for e in LstmLM.load(files / "b.npz").history] == [1, 2]
    assert main(["nnlm", "train", "--text", str(files / "dev.txt"), "--output",
                 str(files / "c.npz"), "--resume"]) == 2
