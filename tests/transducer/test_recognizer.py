"""A transducer model folder transcribes audio to words through asrkit.Recognizer and the
``asrkit transcribe`` command: a hand-set transducer over tone "words" (tests/recognizer/tones),
whose answers and word times are known. (Training one is tests/transducer/test_train.py.)"""

import json

import numpy as np
import pytest

from asrkit.cli.main import main
from asrkit.models import save
from asrkit.recognizer import Recognizer, RecognizerError, package_model_folder
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


@pytest.fixture(scope="module")
def tone_transducer(tmp_path_factory):
    root = tmp_path_factory.mktemp("rnnt_tones")
    save(str(root / "final.mdl"), tone_transducer_model())
    conf = root / "fbank.toml"
    conf.write_text(FBANK)
    folder = str(root / "final")
    package_model_folder(folder, str(root / "final.mdl"), str(conf))
    return folder, root


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
    with pytest.raises(RecognizerError, match="streaming is not supported"):
        Recognizer.from_dir(folder).stream()
