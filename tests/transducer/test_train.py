"""A transducer trains from a config, saves and loads, and transcribes what it learned."""

import os

import numpy as np
import pytest

from asrkit.decoders.transducer import transducer_beam_search, transducer_greedy
from asrkit.io import DataDir, read_table_dict
from asrkit.layers.spec import ConfigError
from asrkit.models import TransducerModel, load, save
from asrkit.ops.transducer import predictor_step
from asrkit.training import Trainer, parse_train_config
from tests.training.datadirs import LETTERS, synthetic_dir


def _config(data, tokens, out, **criterion):
    return parse_train_config({
        "network": {"layers": [{"type": "blstm", "hidden": 24}]},
        "criterion": {"type": "transducer", "predictor_dim": 16, "joiner_dim": 24,
                      "context_size": 1, **criterion},
        "reader": {"data_dir": data, "tokens": tokens, "minibatch_frames": 400,
                   "cv_data_dir": data, "cmvn": "none"},
        "learner": {"type": "adam", "lr": 0.02},
        "train": {"epochs": 30, "out_dir": out, "log_every": 5}}, "test.toml")


@pytest.mark.parametrize("predictor", ["stateless", "lstm"])
def test_a_tiny_transducer_learns_to_transcribe_its_utterances(tmp_path, predictor):
    data, tokens = synthetic_dir(str(tmp_path / "d"), num_utts=8, dim=8)
    out = str(tmp_path / "exp")
    Trainer(_config(data, tokens, out, predictor=predictor), log=lambda m: None).train()
    model = load(os.path.join(out, "final.mdl"))
    assert isinstance(model, TransducerModel) and model.transducer["predictor"] == predictor
    feats = read_table_dict(os.path.join(data, "feats.scp"))
    text = DataDir.read(data).text()
    step = predictor_step(predictor, model.predictor_arrays(), model.blank)
    W, b = model.joiner.weight.value, model.joiner.bias.value
    symbols = model.tokens
    correct = 0
    for utt, ref in text.items():
        enc, _ = model.encode(feats[utt])
        greedy = transducer_greedy(enc, step, W, b, tokens=symbols, unit="char")
        beam = transducer_beam_search(enc, step, W, b, beam=4, tokens=symbols, unit="char")[0]
        hyp = "".join(symbols[t] for t in greedy.tokens)
        correct += hyp == ref and "".join(symbols[t] for t in beam.tokens) == ref
        assert all(0 <= f < enc.shape[0] for f in greedy.frames)
    assert correct == len(text), f"{correct} of {len(text)} transcribed exactly"
    assert set("".join(text.values())) <= set(LETTERS)


def test_the_model_file_rebuilds_the_transducer(tmp_path):
    tokens = ["<blk>", "a", "b", "c"]
    m = TransducerModel({"seed": 1, "layers": [{"type": "lstm", "hidden": 8}]}, 5, tokens, 0,
                        transducer={"predictor": "lstm", "predictor_dim": 6, "joiner_dim": 7,
                                    "predictor_layers": 2})
    path = str(tmp_path / "t.mdl")
    save(path, m)
    back = load(path)
    assert isinstance(back, TransducerModel) and back.transducer == m.transducer
    assert list(back.params) == list(m.params)
    assert {k for k in m.params if k.startswith(("predictor.", "joiner."))} >= {
        "predictor.embed", "predictor.lstm.weight_ih_l1", "predictor.proj.W", "joiner.weight"}
    for k, p in m.params.items():
        np.testing.assert_array_equal(back.params[k].value, p.value)
    x = np.random.default_rng(0).standard_normal((9, 5)).astype(np.float32)
    np.testing.assert_array_equal(back.encode(x)[0], m.encode(x)[0])
    assert back.encode(x)[0].shape == (9, 7)


def test_config_errors_name_the_key(tmp_path):
    data, tokens = synthetic_dir(str(tmp_path / "d"), num_utts=2)
    with pytest.raises(ConfigError, match=r"test.toml: \[criterion\].predictor: unknown 'gru'"):
        _config(data, tokens, str(tmp_path / "o"), predictor="gru")
    with pytest.raises(ConfigError, match=r"\[criterion\].context_size: must be >= 1"):
        _config(data, tokens, str(tmp_path / "o"), context_size=0)
