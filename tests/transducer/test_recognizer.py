"""A transducer model folder transcribes audio to words through asrkit.Recognizer and the
``asrkit transcribe`` command: a hand-set transducer over tone "words" (tests/recognizer/tones),
whose answers and word times are known. (Training one is tests/transducer/test_train.py.)"""

import json

import numpy as np
import pytest

from asrkit.cli.main import main
from asrkit.recognizer import Recognizer, RecognizerError
from asrkit.recognizer.hotwords import load_hotwords
from tests.recognizer.tones import BINS, GAIN, LEVEL, TOKENS, recording, write_wav

FBANK = '[features]\ntype = "fbank"\nnum_mel_bins = 40\n[cmvn]\nmode = "none"\n'
SUPPRESS = 100.0  # what the prediction network takes off the word it just emitted


def tone_transducer_model():
    """A transducer whose answers are known by construction (as tests/recognizer/tones' CTC
    model): encoder unit k is ``GAIN * (fbank[BIN_k] - LEVEL)``, positive while tone k sounds;
    the stateless prediction network (context 1) subtracts SUPPRESS from the unit of the word
    just emitted; the joiner's logit of word k is ``5 tanh(enc_k + pred_k)``, the blank's 0.
    So a tone's word is emitted once, at its first loud frame (a word said twice in a row
    would be emitted once: the test recordings have none)."""
    from asrkit.models import TransducerModel

    V, K = len(TOKENS), len(TOKENS) - 1
    out_w = np.zeros((40, K), np.float32)
    for k, word in enumerate(TOKENS[1:]):
        out_w[BINS[word], k] = GAIN
    embed = np.zeros((V, K), np.float32)
    embed[1:] = np.eye(K)
    joiner = np.zeros((V, K), np.float32)
    joiner[1:] = 5.0 * np.eye(K)
    params = {"layers.0.W": np.eye(40, dtype=np.float32), "layers.0.b": np.zeros(40, np.float32),
              "output.W": out_w, "output.b": np.full(K, -GAIN * LEVEL, np.float32),
              "predictor.embed": embed, "predictor.conv": np.ones((1, K), np.float32),
              "predictor.proj.W": -SUPPRESS * np.eye(K, dtype=np.float32),
              "predictor.proj.b": np.zeros(K, np.float32),
              "joiner.weight": joiner, "joiner.bias": np.zeros(V, np.float32)}
    net = {"seed": 0, "layers": [{"type": "dense", "dim": 40, "activation": "none"}]}
    return TransducerModel(net, 40, TOKENS, 0, params=params,
                           reader={"cmvn": "none", "unit": "word"},
                           transducer={"predictor": "stateless", "predictor_dim": K,
                                       "context_size": 1, "joiner_dim": K})


# the fixture tone_transducer, (folder, its parent), is in conftest.py


@pytest.mark.parametrize("method", ["beam", "greedy"])
def test_a_transducer_folder_transcribes_a_wav_to_words_with_times(tone_transducer, method):
    folder, root = tone_transducer
    rec = Recognizer.from_dir(folder, method=method)
    words = ["three", "one", "two"]
    wave, starts = recording(words, seed=77, word_s=0.25, gap_s=0.25, lead_s=0.2)
    path = write_wav(root / f"test_{method}.wav", wave)
    res = rec.transcribe(path)
    assert res.text == "three one two"
    for w, t0 in zip(res.words, starts):
        # each word is emitted at its tone's first loud frame
        assert t0 - 0.03 <= w.start <= t0 + 0.05, (w.word, w.start, t0)
        assert 0 < w.confidence <= 1


def test_asrkit_transcribe_reads_a_transducer_folder(tone_transducer, capsys):
    folder, root = tone_transducer
    wave, _ = recording(["two", "one", "two"], seed=5, word_s=0.25, gap_s=0.25, lead_s=0.2)
    path = write_wav(root / "cli.wav", wave)
    assert main(["transcribe", "--model-dir", folder, "--json", "--beam", "3", path]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["text"] == "two one two" and len(out["words"]) == 3


def test_transducer_options_are_checked(tone_transducer):
    folder, _ = tone_transducer
    with pytest.raises(RecognizerError, match="unknown search option for a transducer"):
        Recognizer.from_dir(folder, acoustic_scale=0.5)
    with pytest.raises(RecognizerError, match="method must be one of"):
        Recognizer.from_dir(folder, method="viterbi")
    with pytest.raises(RecognizerError, match="cannot load the LM"):
        Recognizer.from_dir(folder, lm=str(folder) + "/missing.arpa")
    with pytest.raises(RecognizerError, match="window: unknown stream option"):
        Recognizer.from_dir(folder).stream(window=3)


def test_hotwords_bias_a_transducer_folders_beam_search(tone_transducer, tmp_path, capsys):
    folder, root = tone_transducer
    # this hand-set model is not peaky (an inserted word costs only about e^-5 a frame, summed
    # over a pause's alignments), so the boost that finds the weak word is kept small
    rec = Recognizer.from_dir(folder, hotwords=["two :1"])
    # a weak "two" (encoder frames set by hand) is found only with the hotword
    enc = np.full((4, 3), -5.0, np.float32)
    enc[0, 0], enc[2:, 1] = 3.0, -0.3
    assert [w.word for w in Recognizer.from_dir(folder).transducer.decode(enc)] == ["one"]
    assert [w.word for w in rec.transducer.decode(enc)] == ["one", "two"]
    # clear words stay as they are
    wave, _ = recording(["three", "one", "two"], seed=77, word_s=0.25, gap_s=0.25, lead_s=0.2)
    assert rec.transcribe(write_wav(root / "hw.wav", wave)).text == "three one two"
    hw = tmp_path / "hotwords.txt"
    hw.write_text("one two :0.8\n")
    assert main(["transcribe", "--model-dir", folder, "--hotwords", str(hw),
                 str(root / "hw.wav")]) == 0
    assert capsys.readouterr().out.strip().endswith("three one two")
    with pytest.raises(RecognizerError, match="hotwords need method = 'beam'"):
        Recognizer.from_dir(folder, method="greedy", hotwords=["two"])
    with pytest.raises(RecognizerError, match="'four' cannot be spelled with the model's tokens"):
        Recognizer.from_dir(folder, hotwords=["one four"])


def test_a_word_bonus_keeps_a_weak_word_a_transducer_would_delete(tone_transducer, capsys):
    folder, root = tone_transducer
    enc = np.full((4, 3), -5.0, np.float32)
    enc[0, 0], enc[2:, 1] = 3.0, -0.3

    def words(**options):
        return [w.word for w in Recognizer.from_dir(folder, **options).transducer.decode(enc)]

    assert words() == ["one"]
    assert words(word_bonus=1.0) == ["one", "two"]
    # asrkit package --word-bonus makes it the folder's default
    bonused = str(root / "bonus")
    assert main(["package", "--model", str(root / "final.mdl"), "--features",
                 str(root / "fbank.toml"), "--word-bonus", "1", "--out", bonused]) == 0
    capsys.readouterr()
    assert [w.word for w in Recognizer.from_dir(bonused).transducer.decode(enc)] == ["one", "two"]
    assert main(["package", "--model", str(root / "final.mdl"), "--features",
                 str(root / "fbank.toml"), "--word-insertion-penalty", "1", "--out",
                 str(root / "wip")]) != 0
    assert "unknown search option for a transducer" in capsys.readouterr().err
    assert main(["transcribe", "--model-dir", folder, "--word-bonus", "nan", "x.wav"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "word_bonus" in err[0], err


def test_a_sentencepiece_transducer_spells_words_from_pieces():
    """A model trained with ``[reader] unit = "piece"`` decodes with the decoders' "bpe"
    spelling (a piece starting with ▁ opens a word), with and without hotwords."""
    import types

    from asrkit.models import TransducerModel
    from asrkit.recognizer.transducer import TransducerSearch, transducer_options

    m = tone_transducer_model()
    pieces = ["<blk>", "\u2581one", "\u2581tw", "o"]
    m = TransducerModel(m.network, m.input_dim, pieces, 0, params=m.state_dict(),
                        reader={"cmvn": "none", "unit": "piece"}, transducer=m.transducer)
    enc = np.full((5, 3), -5.0, np.float32)
    enc[0, 0], enc[2, 1], enc[3, 2] = 3.0, 3.0, 3.0
    folder = types.SimpleNamespace(model=m, frame_shift=0.04)
    for method in ("beam", "greedy"):
        search = TransducerSearch(folder, transducer_options({"method": method}))
        assert [w.word for w in search.decode(enc)] == ["one", "two"]
    search = TransducerSearch(folder, transducer_options({}), hotwords=load_hotwords(["two"]))
    assert [w.word for w in search.decode(enc)] == ["one", "two"]


def test_a_transducer_folder_aligns_a_transcript(tone_transducer, capsys):
    folder, root = tone_transducer
    rec = Recognizer.from_dir(folder)
    words = ["two", "three", "one"]
    wave, starts = recording(words, seed=3, word_s=0.25, gap_s=0.25, lead_s=0.2)
    path = write_wav(root / "align.wav", wave)
    al = rec.align(path, "two three one")
    assert [w.word for w in al.words] == words
    for w, t0 in zip(al.words, starts):
        assert t0 - 0.03 <= w.start <= t0 + 0.05, (w.word, w.start, t0)
        assert w.duration > 0
    # a wrong transcript still aligns (a transducer can emit anywhere) but scores worse
    assert rec.align(path, "one one one").log_prob_per_frame < al.log_prob_per_frame
    with pytest.raises(RecognizerError, match="'four' cannot be spelled"):
        rec.align(path, "two four")
    assert main(["align", "--model-dir", folder, path, "--text", "two three one"]) == 0
    assert "two" in capsys.readouterr().out
