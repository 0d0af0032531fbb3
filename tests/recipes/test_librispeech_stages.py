"""The LibriSpeech recipe's run.sh: prep, features, BPE/lang, LM and graph stages on a tiny
corpus in the LibriSpeech layout (synthesised by test_librispeech_local's helper)."""

import importlib.util
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RECIPE = os.path.join(REPO, "recipes", "librispeech")
BIN = os.path.dirname(sys.executable)

spm = pytest.importorskip("sentencepiece")

WORDS = ("THE OF AND TO A IN HE THAT WAS IT HIS HAD WITH AS FOR HER YOU BUT AT NOT SHE ON BE "
         "HAVE BY WHICH HIM THEY THIS FROM ALL SO WERE ONE SAID WOULD WHEN NO THERE WHAT THEM AN "
         "IF BEEN OUT ARE MY UP INTO MORE COULD MAN ANY SOME LITTLE TIME ABOUT TOLD UPON GREAT "
         "MISTER DAY VERY THOUGHT OTHER OLD NIGHT DOWN HAND AGAIN LONG SEE THINK AWAY EYES "
         "NOTHING YOUNG FACE MOTHER DON'T CAME HOUSE").split()
SUBSETS = {  # subset -> (speaker, chapter) pairs, utterances per chapter
    "train-clean-100": ((("19", "198"), ("26", "495"), ("32", "4137")), 5),
    "dev-clean": ((("84", "121123"), ("174", "50561")), 2),
    "test-clean": ((("1089", "134686"), ("121", "121726")), 2),
}


def _load(name):
    spec = importlib.util.spec_from_file_location(
        f"librispeech_{name}", os.path.join(RECIPE, "local", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _load_test_helper():
    spec = importlib.util.spec_from_file_location(
        "librispeech_local_tests", os.path.join(os.path.dirname(__file__),
                                                "test_librispeech_local.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.make_librispeech


make_librispeech = _load_test_helper()


def make_corpus(root):
    """Three LibriSpeech subsets with varied upper-case transcripts; returns utt -> words."""
    rng = np.random.default_rng(1)
    texts = {}
    for subset, (speakers, utts) in SUBSETS.items():
        made = make_librispeech(root, subset, speakers, utts)
        for utt in made:
            spk, chapter, _ = utt.split("-")
            texts[utt] = " ".join(rng.choice(WORDS, size=int(rng.integers(4, 12))))
        for spk, chapter in speakers:
            trans = os.path.join(root, subset, spk, chapter, f"{spk}-{chapter}.trans.txt")
            utt_ids = [line.split()[0] for line in open(trans)]
            with open(trans, "w") as f:
                f.writelines(f"{u} {texts[u]}\n" for u in utt_ids)
    return texts


def _table(path):
    with open(path, encoding="utf-8") as f:
        return dict((line.rstrip("\n").split(" ", 1) + [""])[:2] for line in f if line.strip())


def test_bpe_lexicon_matches_sentence_encoding(tmp_path):
    bpe = _load("prepare_bpe")
    text = tmp_path / "text"
    rng = np.random.default_rng(0)
    text.write_text("".join(f"u{i} {' '.join(rng.choice(WORDS, size=8))}\n" for i in range(200)))
    (tmp_path / "vocab.txt").write_text("NEVERSEEN\nÆTHELRED\n")
    assert bpe.main([str(text), str(tmp_path / "lang"), "--vocab-size", "60",
                     "--extra-words", str(tmp_path / "vocab.txt")]) == 0
    tokens = _table(tmp_path / "lang/tokens.txt")
    assert tokens["<blk>"] == "0" and tokens["<unk>"] == "1" and len(tokens) == 60
    assert sorted(int(i) for i in tokens.values()) == list(range(60))
    lexicon = {}
    for line in (tmp_path / "lang/lexicon.txt").read_text().splitlines():
        w, *pieces = line.split()
        lexicon[w] = pieces
    # the extra word with unseen characters is left out; the other one is spelled in pieces
    assert "ÆTHELRED" not in lexicon and "NEVERSEEN" in lexicon
    assert set(WORDS) <= set(lexicon)
    assert all(set(p) <= set(tokens) for p in lexicon.values())
    # a sentence's pieces are its words' lexicon pieces (what TLG assumes)
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "lang/bpe.model"))
    sentence = "THE OLD MAN SAID NOTHING ABOUT HIS MOTHER"
    assert sp.encode(sentence, out_type=str) == [p for w in sentence.split() for p in lexicon[w]]
    # too many pieces for the text: a clear error naming the file
    assert bpe.main([str(text), str(tmp_path / "lang2"), "--vocab-size", "5000"]) == 1


def test_piece_transcripts_keep_everything_else(tmp_path):
    bpe = _load("prepare_bpe")
    pt = _load("piece_transcripts")
    src = tmp_path / "src"
    src.mkdir()
    (src / "text").write_text("a THE OLD MAN\nb HIS MOTHER CAME\n")
    (src / "feats.scp").write_text("a /x.ark:1\nb /x.ark:9\n")
    (src / "utt2spk").write_text("a s\nb s\n")
    sp = bpe.train_sentencepiece(["THE OLD MAN", "HIS MOTHER CAME", "THE MAN CAME"] * 20,
                                 str(tmp_path / "m"), 18)
    assert pt.main([str(tmp_path / "m.model"), str(src), str(tmp_path / "dst")]) == 0
    dst = tmp_path / "dst"
    assert (dst / "feats.scp").read_text() == (src / "feats.scp").read_text()
    assert (dst / "text.words").read_text() == (src / "text").read_text()
    pieces = _table(dst / "text")
    assert pieces["a"].split() == sp.encode("THE OLD MAN", out_type=str)
    assert "".join(pieces["b"].split()).replace("▁", " ").strip() == "HIS MOTHER CAME"


@pytest.mark.recipe
def test_prep_features_bpe_lm_and_graph_stages(tmp_path):
    corpus = tmp_path / "download"
    texts = make_corpus(str(corpus / "LibriSpeech"))
    rec = tmp_path / "librispeech"
    shutil.copytree(RECIPE, rec, ignore=shutil.ignore_patterns("data", "exp", "download"))
    shutil.copytree(os.path.join(RECIPE, "..", "utils"), tmp_path / "utils")
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ["PATH"])
    common = ["--corpus-dir", str(corpus), "--bpe-size", "40", "--jobs", "1"]
    r = subprocess.run(["bash", str(rec / "run.sh"), "--stage", "1", "--stop-stage", "4",
                        *common], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run(["bash", str(rec / "run.sh"), "--stage", "6", "--stop-stage", "6",
                        *common], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr

    from asrkit.io import validate_data_dir

    def assert_valid(folder):
        errors = [p for p in validate_data_dir(str(folder)) if p.severity == "error"]
        assert not errors, f"{folder}: {errors}"

    for subset, (speakers, utts) in SUBSETS.items():
        d = subset.replace("-", "_")
        text = _table(rec / "data" / d / "text")
        assert text == {u: t for u, t in texts.items() if u in text}
        assert len(text) == len(speakers) * utts
        assert_valid(rec / "data" / d)
        assert_valid(rec / "data/fbank" / d)
        feats = _table(rec / "data/fbank" / d / "feats.scp")
        assert set(feats) == set(text)
        assert (rec / "data/fbank" / d / "cmvn.scp").exists()

    lang = rec / "data/lang_bpe"
    tokens = _table(lang / "tokens.txt")
    assert tokens["<blk>"] == "0" and len(tokens) == 40
    lexicon = {line.split()[0]: line.split()[1:]
               for line in (lang / "lexicon.txt").read_text().splitlines()}
    train_text = _table(rec / "data/train_clean_100/text")
    assert {w for t in train_text.values() for w in t.split()} <= set(lexicon)
    # the training transcripts in pieces are the lexicon spellings of the words
    for d in ("train_clean_100", "dev_clean"):
        words = _table(rec / "data/fbank" / f"{d}_bpe" / "text.words")
        pieces = _table(rec / "data/fbank" / f"{d}_bpe" / "text")
        assert set(pieces) == set(words)
        for utt, t in pieces.items():
            assert set(t.split()) <= set(tokens) - {"<blk>"}
            if d.startswith("train"):
                assert t.split() == [p for w in words[utt].split() for p in lexicon[w]]
        assert_valid(rec / "data/fbank" / f"{d}_bpe")
    # no SLR11 LM downloaded: a 3-gram on the training transcripts, read back by KenLM
    arpa = lang / "G_3gram.arpa"
    assert "ngram 3=" in arpa.read_text()
    kenlm = pytest.importorskip("kenlm")
    assert kenlm.Model(str(arpa)).order == 3
    log = (rec / "exp/log/stage4.log").read_text()
    assert "ppl" in log
    graph = rec / "exp/graph_bpe_tg"
    assert (graph / "TLG.npz").exists()
    words = {line.split()[0] for line in (graph / "words.txt").read_text().splitlines()}
    assert set(lexicon) <= words


def test_nbest_costs_split_for_4gram_rescoring(tmp_path):
    from asrkit.lm import train

    nbc = _load("nbest_costs")
    sentences = ["THE OLD MAN SAID NOTHING", "HIS MOTHER CAME HOME", "THE MAN CAME",
                 "THE OLD MOTHER SAID NOTHING", "HIS OLD MAN CAME HOME"]
    lm3 = train(sentences, order=3, discount="witten-bell")  # KN needs more data
    lm3.write_arpa(str(tmp_path / "g3.arpa"))
    train(sentences * 2, order=4, discount="witten-bell").write_arpa(str(tmp_path / "g4.arpa"))
    nbest = tmp_path / "nbest.txt"
    nbest.write_text("u1-1 12.5 THE OLD MAN SAID NOTHING\nu1-2 13.0 THE OLD MOTHER SAID NOTHING\n"
                     "u2-1 9.0 HIS MOTHER CAME\n")
    assert nbc.main([str(tmp_path / "g3.arpa"), str(nbest), str(tmp_path / "split.txt")]) == 0
    for line, total in zip((tmp_path / "split.txt").read_text().splitlines(), (12.5, 13.0, 9.0)):
        utt, ac, lm, *words = line.split()
        assert float(lm) == pytest.approx(-np.log(10) * lm3.score(" ".join(words)), abs=1e-3)
        assert float(ac) + float(lm) == pytest.approx(total, abs=1e-3)
    # the split lists are what asrkit nnlm rescore reads
    r = subprocess.run([os.path.join(BIN, "asrkit"), "nnlm", "rescore", "--nbest",
                        str(tmp_path / "split.txt"), "--lm", str(tmp_path / "g4.arpa"),
                        "--nn-weight", "1", "--best-text", str(tmp_path / "best.txt")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert _table(tmp_path / "best.txt") == {"u1": "THE OLD MAN SAID NOTHING",
                                            "u2": "HIS MOTHER CAME"}
    nbest.write_text("u1-1 twelve THE\n")
    with pytest.raises(ValueError, match=r"nbest.txt:1: cost 'twelve'"):
        nbc.split_costs(open(nbest), lm3, where=str(nbest))
