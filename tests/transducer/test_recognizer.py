"""A transducer model folder transcribes audio to words through asrkit.Recognizer and the
``asrkit transcribe`` command: a tiny transducer trained on tone "words"
(tests/recognizer/tones)."""

import json
import os

import numpy as np
import pytest

from asrkit.cli.main import main
from asrkit.features import compute
from asrkit.io import DataDir, write_table
from asrkit.recognizer import Recognizer, RecognizerError, package_model_folder
from asrkit.training import Trainer, parse_train_config
from tests.recognizer.tones import TOKENS, recording, write_wav

pytestmark = pytest.mark.slow  # the fixture trains a transducer: ~2 min on two busy cores

FBANK = '[features]\ntype = "fbank"\nnum_mel_bins = 40\n[cmvn]\nmode = "none"\n'


def _tone_corpus(root, n=12, seed=0):
    rng = np.random.default_rng(seed)
    words = TOKENS[1:]
    feats, text, utt2spk = {}, {}, {}
    for i in range(n):
        utt = f"s0-{i:03d}"
        ws = list(rng.choice(words, size=int(rng.integers(1, 4))))
        wave, _ = recording(ws, seed=seed * 100 + i, word_s=0.25, gap_s=0.25, lead_s=0.2)
        feats[utt] = compute("fbank", wave * 32768.0, num_mel_bins=40, dither=0.0)
        text[utt] = " ".join(ws)
        utt2spk[utt] = "s0"
    os.makedirs(root, exist_ok=True)
    write_table(f"ark,scp:{root}/feats.ark,{root}/feats.scp", sorted(feats.items()))
    DataDir(None, utt2spk=utt2spk, text=text,
            utt2num_frames={u: str(len(f)) for u, f in feats.items()}).write(root)
    tokens = os.path.join(os.path.dirname(root), "tokens.txt")
    with open(tokens, "w") as f:
        f.write("".join(f"{t} {i}\n" for i, t in enumerate(TOKENS)))
    return root, tokens


@pytest.fixture(scope="module")
def tone_transducer(tmp_path_factory):
    root = tmp_path_factory.mktemp("rnnt_tones")
    data, tokens = _tone_corpus(str(root / "train"))
    cfg = parse_train_config({
        "network": {"stack_frames": 3, "subsample_frames": 3,
                    "layers": [{"type": "dense", "dim": 32, "activation": "tanh"}]},
        "criterion": {"type": "transducer", "predictor_dim": 8, "joiner_dim": 16,
                      "context_size": 1},
        "reader": {"data_dir": data, "tokens": tokens, "unit": "word", "cmvn": "none",
                   "minibatch_frames": 300},
        "learner": {"type": "adam", "lr": 0.02},
        "train": {"epochs": 30, "out_dir": str(root / "exp"), "log_every": 0}}, "tones.toml")
    Trainer(cfg, log=lambda m: None).train()
    conf = root / "fbank.toml"
    conf.write_text(FBANK)
    folder = str(root / "final")
    package_model_folder(folder, str(root / "exp" / "final.mdl"), str(conf))
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
        # a transducer emits a word while (or just after) it is heard
        assert t0 - 0.05 <= w.start <= t0 + 0.45, (w.word, w.start, t0)
        assert 0 < w.confidence <= 1


def test_asrkit_transcribe_reads_a_transducer_folder(tone_transducer, capsys):
    folder, root = tone_transducer
    wave, _ = recording(["two", "two"], seed=5, word_s=0.25, gap_s=0.25, lead_s=0.2)
    path = write_wav(root / "cli.wav", wave)
    assert main(["transcribe", "--model-dir", folder, "--json", "--beam", "3", path]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["text"] == "two two" and len(out["words"]) == 2


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
