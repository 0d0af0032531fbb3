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


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("section,key,value,match", [
    ("learner", "lr", NAN, "must be > 0, got nan"),
    ("learner", "lr", INF, "must be > 0, got inf"),
    ("learner", "lr", -1.0, "must be > 0"),
    ("learner", "clip_norm", -1.0, "must be >= 0"),
    ("learner", "clip_value", -INF, "must be >= 0"),
    ("learner", "warmup_steps", -5, "must be >= 0"),
    ("learner", "momentum", 1.5, r"must be in \[0, 1\)"),
    ("learner", "beta2", NAN, r"must be in \[0, 1\)"),
    ("learner", "eps", 0.0, "must be > 0"),
    ("learner", "decay", NAN, "must be > 0"),
    ("learner", "newbob_factor", 2.0, r"must be in \(0, 1\]"),
    ("learner", "newbob_threshold", NAN, "must be a finite number"),
    ("learner", "l2", INF, "must be >= 0"),
    ("criterion", "blank", -2, "must be >= -1"),
    ("criterion", "label_smoothing", 1.0, r"must be in \[0, 1\)"),
    ("distributed", "block_lr", NAN, "must be > 0"),
    ("distributed", "block_momentum", 1.0, r"must be in \[0, 1\)"),
    ("distributed", "onebit_min_size", -1, "must be >= 0"),
    ("train", "keep_checkpoints", -2, "must be >= 0"),
    ("train", "max_steps", -1, "must be >= 0"),
    ("train", "seed", -1, "must be in"),
    ("reader", "seed", -1, "must be in"),
    ("reader", "max_utts", -4, "must be >= 0"),
    ("reader", "bucket_pool", 0, "must be >= 1"),
])
def test_every_number_is_checked_naming_section_and_key(section, key, value, match):
    with pytest.raises(ConfigError, match=rf"y.toml: \[{section}\].{key}: {match}"):
        parse_train_config({"network": NET, section: {key: value}}, "y.toml")


@pytest.mark.parametrize("layer,match", [
    ({"type": "lstm", "hidden": 10**9}, r"#0.hidden = 1000000000: the network would have "
                                        r"4,000,000,0\d\d,\d{3},\d{3},\d{3} parameters"),
    ({"type": "lstm", "hidden": 8, "num_layers": 10**9}, "num_layers: must be at most 128"),
    ({"type": "lstm", "hidden": 8, "proj": 8}, r"proj: must be in 0..hidden-1 \(7\)"),
    ({"type": "tdnn", "dim": 8, "context": 10**9}, "context: must be at most 1024"),
    ({"type": "dense", "dim": 99999999999}, "#0.dim = 99999999999: the network would have"),
    ({"type": "dropout", "rate": NAN}, "rate: must be a finite number, got nan"),
    ({"type": ["lstm"], "hidden": 3}, "type: unknown layer type"),
])
def test_absurd_network_sizes_are_refused_with_the_figure(layer, match):
    with pytest.raises(ConfigError, match=match):
        parse_train_config({"network": {"layers": [layer]}}, "n.toml")


def test_training_memory_counts_gradients_and_learner_slots():
    """A network whose parameters fit but whose training state (parameters, gradients, Adam's
    two moments) would take more than half of the memory is refused before any data is read."""
    from asrkit.config.acoustic_net import check_parameter_memory
    from asrkit.utils.memory import memory_limit_bytes

    hidden = int((memory_limit_bytes() / 4 / 4 / 5) ** 0.5)  # LSTM: ~4H^2 parameters
    net = parse_network({"layers": [{"type": "lstm", "hidden": hidden}]}, "m.toml")
    assert check_parameter_memory(net, 1, 1) > 0  # the parameters alone fit
    with pytest.raises(ConfigError, match=r"m.toml: \[network.layers\] #0.hidden = \d+: the "
                                          r"network would have [\d,]+ parameters, [\d.]+ GiB for "
                                          r"parameters, gradients and learner state, more than "
                                          r"50% of this machine's"):
        parse_train_config({"network": {"layers": [{"type": "lstm", "hidden": hidden}]},
                            "learner": {"type": "adam"}}, "m.toml")


@pytest.mark.parametrize("net", [
    {"layers": [{"type": "blstm", "hidden": 5, "num_layers": 2, "proj": 3}]},
    {"stack_frames": 3, "layers": [{"type": "tdnn", "dim": 6, "context": 5},
                                   {"type": "lstm", "hidden": 4},
                                   {"type": "dropout", "rate": 0.1},
                                   {"type": "dense", "dim": 7}]},
])
def test_parameter_shapes_are_what_the_graph_builds(net):
    from asrkit.config.acoustic_net import parameter_shapes

    built = build_network(net, 11, 9)
    assert parameter_shapes(parse_network(net), 11, 9) == {
        k: p.shape for k, p in built.params.items()}


def test_bad_sections_overrides_and_files(tmp_path):
    with pytest.raises(ConfigError, match=r"y.toml: \[reader\] must be a table"):
        parse_train_config({"network": NET, "reader": 5}, "y.toml")
    with pytest.raises(ConfigError, match=r"y.toml: \[network\] must be a table"):
        parse_train_config({"network": [1]}, "y.toml")
    with pytest.raises(ConfigError, match=r"--set 'train.epochs.x=1': train.epochs is not a "
                                          "table"):
        parse_train_config({"network": NET, "train": {"epochs": 3}},
                           overrides=["train.epochs.x=1"])
    with pytest.raises(ConfigError, match=r"spec_augment.num_time_masks: must be in \[0, 100\]"):
        parse_train_config({"network": NET, "reader": {"spec_augment": {
            "num_time_masks": 99999999999}}}, "y")
    with pytest.raises(ConfigError, match=r"spec_augment.warp_mode: expected a string"):
        parse_train_config({"network": NET, "reader": {"spec_augment": {"warp_mode": 3}}}, "y")
    with pytest.raises(ConfigError, match=r"spec_augment.warp_mode: unknown interpolation mode"):
        parse_train_config({"network": NET, "reader": {"spec_augment": {
            "warp_mode": "wobbly"}}}, "y")
    conf = tmp_path / "latin1.toml"
    conf.write_bytes(b'# caf\xe9\n[network]\n')
    with pytest.raises(ConfigError, match=r"latin1.toml:1: not UTF-8 text"):
        load_train_config(conf)
