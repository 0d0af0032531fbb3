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
    common = ["--corpus-dir", str(corpus), "--bpe-size", "40", "--nj", "1"]
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


def test_rescore_stage_reranks_the_decoders_nbest_with_a_4gram(tmp_path):
    """Stage 8 feeds asrkit decode's nbest.txt ('utt-N ac_cost graph_cost words') straight to
    asrkit nnlm rescore: the 4-gram replaces the graph cost, the acoustic cost is kept."""
    from asrkit.lm import train

    sentences = ["THE OLD MAN SAID NOTHING", "HIS MOTHER CAME HOME", "THE MAN CAME",
                 "THE OLD MOTHER SAID NOTHING", "HIS OLD MAN CAME HOME"]
    g4 = train(sentences * 2, order=4, discount="witten-bell")  # KN needs more data
    g4.write_arpa(str(tmp_path / "g4.arpa"))
    rec = tmp_path / "librispeech"
    shutil.copytree(RECIPE, rec, ignore=shutil.ignore_patterns("data", "exp", "download"))
    shutil.copytree(os.path.join(RECIPE, "..", "utils"), tmp_path / "utils")
    assert not (rec / "local" / "nbest_costs.py").exists()  # no approximate split any more
    # u1: the decoder's best (graph cost from the 3-gram) loses to the 4-gram's favourite
    h1, h2 = "THE OLD MAN CAME HOME", "HIS OLD MAN CAME HOME"
    c1, c2 = (-np.log(10) * g4.score(s) for s in (h1, h2))
    assert c1 > c2 + 1.0
    ac2 = 20.0 + (c1 - c2) - 0.5  # h2 wins by 0.5 once the 4-gram replaces the graph costs
    dec = rec / "exp/blstm_bpe/decode_dev_clean_tg"
    dec.mkdir(parents=True)
    (dec / "nbest.txt").write_text(f"u1-1 20.0 3.0 {h1}\nu1-2 {ac2:.4f} 9.0 {h2}\n"
                                   "u2-1 9.0 4.0 HIS MOTHER CAME\nu2-2 9.5 4.5 HIS MOTHER\n")
    (rec / "data/dev_clean").mkdir(parents=True)
    (rec / "data/dev_clean/text").write_text(f"u1 {h2}\nu2 HIS MOTHER CAME\n")
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ["PATH"])
    r = subprocess.run(["bash", str(rec / "run.sh"), "--stage", "8", "--stop-stage", "8",
                        "--test-sets", "", "--rescore-lm", str(tmp_path / "g4.arpa")],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    out = rec / "exp/blstm_bpe/decode_dev_clean_fg"
    assert _table(out / "hyp.txt") == {"u1": h2, "u2": "HIS MOTHER CAME"}
    ranked = (out / "nbest.txt").read_text().splitlines()
    assert ranked[0].split()[:2] == ["u1-1", f"{ac2:.4f}"]  # acoustic cost kept as decoded
    assert float(ranked[0].split()[2]) == pytest.approx(c2, abs=1e-3)
    assert "WER 0.00" in (out / "wer_details.txt").read_text()
