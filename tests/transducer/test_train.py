"""A transducer trains from a config, saves and loads, and transcribes what it learned."""

import json
import os

import numpy as np
import pytest

from asrkit.decoders.transducer import transducer_beam_search, transducer_greedy
from asrkit.features import normalize
from asrkit.io import DataDir, read_table_dict
from asrkit.layers.spec import ConfigError
from asrkit.models import TransducerModel, load, save
from asrkit.ops import edit_distance
from asrkit.ops.transducer import predictor_step
from asrkit.training import Trainer, parse_train_config
from tests.training.datadirs import LETTERS, synthetic_dir


def _config(data, tokens, out, epochs=60, **criterion):
    return parse_train_config({
        "network": {"layers": [{"type": "blstm", "hidden": 24}]},
        "criterion": {"type": "transducer", "predictor_dim": 16, "joiner_dim": 24,
                      "context_size": 1, **criterion},
        "reader": {"data_dir": data, "tokens": tokens, "minibatch_frames": 60,
                   "cv_data_dir": data},
        "learner": {"type": "adam", "lr": 0.03},
        "train": {"epochs": epochs, "out_dir": out, "log_every": 5}}, "test.toml")


def _cv(out):
    with open(os.path.join(out, "train_log.jsonl")) as f:
        return [r for r in map(json.loads, f) if r["kind"] == "cv"]


@pytest.mark.slow  # ~100 s on two busy cores
def test_a_tiny_transducer_learns_to_transcribe_its_utterances(tmp_path):
    data, tokens = synthetic_dir(str(tmp_path / "d"), num_utts=8, dim=8)
    out = str(tmp_path / "exp")
    Trainer(_config(data, tokens, out), log=lambda m: None).train()
    cv = _cv(out)
    assert cv[-1]["loss"] < 0.05 * cv[0]["loss"] and cv[-1]["cv_error"] < 0.15
    model = load(os.path.join(out, "final.mdl"))
    assert isinstance(model, TransducerModel)
    feats = read_table_dict("scp:" + os.path.join(data, "feats.scp"))
    stats = read_table_dict("scp:" + os.path.join(data, "cmvn.scp"))
    text, utt2spk = DataDir.read(data).text(), DataDir.read(data).utt2spk
    step = predictor_step("stateless", model.predictor_arrays(), model.blank)
    W, b = model.joiner.weight.value, model.joiner.bias.value
    exact, plain, errors, n = 0, 0, 0, 0
    for utt, ref in text.items():
        x = normalize(feats[utt], "speaker", False, stats[utt2spk[utt]])
        enc, _ = model.encode(x)
        greedy = transducer_greedy(enc, step, W, b, tokens=model.tokens, unit="char")
        beam = transducer_beam_search(enc, step, W, b, beam=4, tokens=model.tokens,
                                      unit="char")[0]
        if not any(a == b for a, b in zip(ref, ref[1:])):
            exact += "".join(model.tokens[t] for t in beam.tokens) == ref
            plain += 1
        errors += edit_distance(list(ref), [model.tokens[t] for t in greedy.tokens])
        n += len(ref)
        assert sorted(greedy.frames) == greedy.frames and greedy.frames[-1] < enc.shape[0]
    # what a model this small still misses are repeated letters ("bb"): every utterance
    # without one is transcribed exactly
    assert plain >= 4 and exact == plain, f"beam search: {exact} of {plain} exact"
    assert errors / n < 0.15, f"greedy: {errors} token errors in {n}"
    assert set("".join(text.values())) <= set(LETTERS)


@pytest.mark.slow  # ~100 s on two busy cores (most of it compiling the LSTM kernels)
def test_an_lstm_predictor_transducer_trains_from_a_config(tmp_path):
    data, tokens = synthetic_dir(str(tmp_path / "d"), num_utts=6, dim=8)
    out = str(tmp_path / "exp")
    Trainer(_config(data, tokens, out, epochs=6, predictor="lstm", predictor_layers=2),
            log=lambda m: None).train()
    cv = _cv(out)
    assert cv[-1]["loss"] < 0.7 * cv[0]["loss"]
    model = load(os.path.join(out, "final.mdl"))
    assert model.transducer["predictor"] == "lstm" and "predictor.lstm.weight_hh_l1" in \
        model.params


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
