"""Training configs: every key checked, errors naming file and key, overrides, shipped files."""

import glob
import os

import pytest

from asrkit.config.acoustic_net import ConfigError, build_network, parse_network
from asrkit.training import load_train_config, parse_train_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NET = {"layers": [{"type": "blstm", "hidden": 8}]}


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "data/conf/*_train.toml")))
                         + [os.path.join(ROOT, "data/conf/blstm_ctc.toml")])
def test_shipped_configs_parse_and_build(path):
    cfg = load_train_config(path)
    net = build_network(cfg.network, 40, 10)
    assert net.logits.shape == (None, None, 10)


def test_errors_name_the_file_and_the_key(tmp_path):
    conf = tmp_path / "c.toml"
    conf.write_text('[network]\n[[network.layers]]\ntype = "blstm"\nhidden = 8\n'
                    '[learner]\nlr = "fast"\n')
    with pytest.raises(ConfigError, match=r"c.toml: \[learner\].lr: expected float"):
        load_train_config(conf)
    with pytest.raises(ConfigError, match=r"\[network.layers\] #0: missing required key 'hidden'"):
        parse_network({"layers": [{"type": "lstm"}]}, "x.toml")
    with pytest.raises(ConfigError, match=r"x.toml: \[network.layers\] #0.type: unknown layer"):
        parse_network({"layers": [{"type": "gru", "hidden": 3}]}, "x.toml")
    with pytest.raises(ConfigError, match=r"\[reader\].minibatch_size: unknown key"):
        parse_train_config({"network": NET, "reader": {"minibatch_size": 3}}, "y.toml")
    with pytest.raises(ConfigError, match=r"\[distributed\].mode: expected one of"):
        parse_train_config({"network": NET, "distributed": {"mode": "2bit"}}, "y.toml")
    with pytest.raises(ConfigError, match=r"spec_augment.bogus: unknown option"):
        parse_train_config({"network": NET, "reader": {"spec_augment": {"bogus": 1}}}, "y")
    with pytest.raises(ConfigError, match="no such file"):
        load_train_config(tmp_path / "missing.toml")


def test_overrides_and_frame_stacking_move_to_the_network():
    cfg = parse_train_config({"network": NET, "reader": {"stack_frames": 3,
                                                         "subsample_frames": 2}},
                             overrides=["learner.lr=0.25", "learner.type=sgd",
                                        'train.out_dir="x y"', "reader.unit=word"])
    assert cfg.learner.lr == 0.25 and cfg.learner.type == "sgd"
    assert cfg.train.out_dir == "x y" and cfg.reader.unit == "word"
    assert cfg.network["stack_frames"] == 3 and cfg.network["subsample_frames"] == 2
    with pytest.raises(ConfigError, match="section.key=value"):
        parse_train_config({"network": NET}, overrides=["lr=3"])
