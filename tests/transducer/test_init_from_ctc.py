"""``[train] init`` from a CTC model starts a transducer's encoder (as icefall does): the layers
whose names and shapes match are copied, the output layer, prediction network and joiner start
fresh, and a layer of another size is a one-line error naming the parameter."""

import subprocess
import sys

import numpy as np
import pytest

from asrkit.models import Model, TransducerModel, load, save
from asrkit.training import Trainer, TrainingError, parse_train_config
from tests.training.datadirs import synthetic_dir

NET = {"seed": 5, "layers": [{"type": "dense", "dim": 12}, {"type": "dense", "dim": 10}]}


def _conf(data, tokens, out, init="", criterion="transducer", layers=None):
    net = {"seed": 9, "layers": layers or NET["layers"]}
    crit = {"type": criterion}
    if criterion == "transducer":
        crit.update(predictor_dim=6, joiner_dim=7, context_size=1)
    return {"network": net, "criterion": crit,
            "reader": {"data_dir": data, "tokens": tokens, "minibatch_frames": 60},
            "learner": {"type": "adam", "lr": 0.01},
            "train": {"epochs": 1, "out_dir": out, "init": init}}


@pytest.fixture(scope="module")
def ctc(tmp_path_factory):
    root = tmp_path_factory.mktemp("init")
    data, tokens = synthetic_dir(str(root / "d"), num_utts=2, dim=8)
    symbols = [line.split()[0] for line in open(tokens, encoding="utf-8")]
    path = str(root / "ctc.mdl")
    save(path, Model(NET, 8, symbols, 0))
    return root, data, tokens, path


def test_a_ctc_model_starts_a_transducers_encoder(ctc):
    root, data, tokens, path = ctc
    logs = []
    t = Trainer(parse_train_config(_conf(data, tokens, str(root / "o"), init=path), "t.toml"),
                log=logs.append)
    fresh = Trainer(parse_train_config(_conf(data, tokens, str(root / "f")), "t.toml"),
                    log=lambda m: None)
    assert isinstance(t.model, TransducerModel)
    src = Model(NET, 8, t.model.tokens, 0).state_dict()  # the file's values (same seed)
    for name in ("layers.0.W", "layers.0.b", "layers.1.W", "layers.1.b"):
        np.testing.assert_array_equal(t.model.params[name].value, src[name])
    # the rest is what a run without init starts from
    for name in ("output.W", "predictor.embed", "predictor.proj.W", "joiner.weight"):
        np.testing.assert_array_equal(t.model.params[name].value,
                                      fresh.model.params[name].value)
    assert t.model.params["output.W"].shape == (10, 7)
    assert any("4 encoder parameters" in m for m in logs)
    # and the trainer's own arrays are the model's: it trains from there
    assert t.params[0] is t.model.params["layers.0.W"].value
    t.train()
    assert isinstance(load(str(root / "o" / "final.mdl")), TransducerModel)


def test_a_layer_of_another_size_is_an_error_naming_the_parameter(ctc):
    root, data, tokens, path = ctc
    layers = [{"type": "dense", "dim": 12}, {"type": "dense", "dim": 11}]
    conf = parse_train_config(_conf(data, tokens, str(root / "o2"), init=path, layers=layers),
                              "t.toml")
    with pytest.raises(TrainingError, match=r"parameter 'layers.1.W' is \[12, 10\] in the CTC "
                                            r"model, \[12, 11\] in this run's \[network\]"):
        Trainer(conf, log=lambda m: None)
    conf = parse_train_config(_conf(data, tokens, str(root / "o3"), init=path,
                                    layers=NET["layers"][:1]), "t.toml")
    with pytest.raises(TrainingError, match="parameter 'layers.1.W' of the CTC model has no "
                                            "counterpart"):
        Trainer(conf, log=lambda m: None)


def test_asrkit_train_says_so_in_one_line(ctc, tmp_path):
    root, data, tokens, path = ctc
    layers = [{"type": "dense", "dim": 13}, {"type": "dense", "dim": 10}]
    conf = _conf(data, tokens, str(tmp_path / "o"), init=path, layers=layers)
    toml = tmp_path / "t.toml"
    toml.write_text(
        f'[network]\nseed = 9\n[[network.layers]]\ntype = "dense"\ndim = 13\n'
        f'[[network.layers]]\ntype = "dense"\ndim = 10\n'
        f'[criterion]\ntype = "transducer"\npredictor_dim = 6\njoiner_dim = 7\n'
        f'[reader]\ndata_dir = "{data}"\ntokens = "{tokens}"\nminibatch_frames = 60\n'
        f'[learner]\ntype = "adam"\nlr = 0.01\n'
        f'[train]\nepochs = 1\nout_dir = "{conf["train"]["out_dir"]}"\ninit = "{path}"\n')
    r = subprocess.run([sys.executable, "-m", "asrkit", "train", str(toml)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "parameter 'layers.0.W' is [8, 12]" in err[0], r.stderr
