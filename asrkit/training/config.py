"""Training configs: one TOML file, CNTK-style sections, every key checked.

Sections: ``[network]`` (asrkit.config.acoustic_net), ``[criterion]``, ``[reader]``
(asrkit.training.reader.ReaderConfig), ``[learner]`` (asrkit.learners.LearnerConfig),
``[distributed]`` and ``[train]``, e.g. ``data/conf/blstm_ctc.toml``. Errors name the file and
the key at fault; ``--set section.key=value`` overrides take TOML values (``lr=0.1``,
``unit="word"``; a bare word is a string).
"""

from __future__ import annotations

import copy
import dataclasses
import os
import tomllib

from asrkit.config.acoustic_net import (
    ConfigError,
    check_interval,
    check_parameter_memory,
    parse_network,
)
from asrkit.learners import LEARNER_CLASSES, LEARNER_TYPES, LearnerConfig
from asrkit.training.criteria import CRITERION_TYPES, transducer_spec
from asrkit.training.reader import ReaderConfig, reader_config_from_dict


@dataclasses.dataclass
class CriterionConfig:
    """``[criterion]``: ``type = "ctc"`` (``blank``: id, default the tokens' ``<blk>``;
    ``zero_infinity``: impossible alignments cost 0, as torch) or ``"cross_entropy"`` against
    ``[reader] frame_targets`` (``label_smoothing``) or ``"transducer"`` (RNN-T: the prediction
    network and joiner keys of ``asrkit.layers.transducer``)."""

    type: str = "ctc"
    blank: int = -1
    zero_infinity: bool = True
    label_smoothing: float = 0.0
    predictor: str = "stateless"
    predictor_dim: int = 64
    context_size: int = 2
    predictor_layers: int = 1
    joiner_dim: int = 64


@dataclasses.dataclass
class DistributedConfig:
    """``[distributed]``: how N ranks cooperate (``mpiexec -n N asrkit train ...``).

    mode: allreduce (average gradients each step) | 1bit (1-bit SGD with error feedback) |
    bmuf (block momentum); minibatch: "global" (``[reader] minibatch_frames`` is split between
    ranks: N ranks take the same steps as one) or "per_rank" (each rank takes the full size);
    lr_scale: none | linear | sqrt (learning rate times N or sqrt N, for "per_rank");
    block_size: bmuf local steps between syncs; block_momentum: default 1 - 1/N; block_lr;
    onebit_min_size: gradients smaller than this are sent exact.
    """

    mode: str = "allreduce"
    minibatch: str = "global"
    lr_scale: str = "none"
    block_size: int = 8
    block_momentum: float = -1.0
    block_lr: float = 1.0
    onebit_min_size: int = 256


@dataclasses.dataclass
class TrainSection:
    """``[train]``: epochs; checkpoint_every (steps, 0: only at epoch ends); keep_checkpoints;
    out_dir; log_every (steps between train log records); max_steps (stop after this many
    global steps, 0: no limit); seed (dropout); device (cpu | cuda); init (a model file whose
    parameters start the run instead of random ones: the same network, input dimension and
    tokens, e.g. a model pre-trained on other data; ignored when resuming a checkpoint)."""

    epochs: int = 10
    checkpoint_every: int = 0
    keep_checkpoints: int = 3
    out_dir: str = "exp/train"
    log_every: int = 10
    max_steps: int = 0
    seed: int = 0
    device: str = "cpu"
    init: str = ""


@dataclasses.dataclass
class TrainConfig:
    """A whole training config; ``network`` is the parsed ``[network]`` description."""

    network: dict
    criterion: CriterionConfig
    reader: ReaderConfig
    learner: LearnerConfig
    distributed: DistributedConfig
    train: TrainSection
    path: str = "<config>"

    def as_dict(self) -> dict:
        """JSON-ready copy (stored in checkpoints and the output folder)."""
        return {"network": self.network, "criterion": dataclasses.asdict(self.criterion),
                "reader": dataclasses.asdict(self.reader),
                "learner": dataclasses.asdict(self.learner),
                "distributed": dataclasses.asdict(self.distributed),
                "train": dataclasses.asdict(self.train)}


# every number a user can give, as a mathematical interval (NaN and inf are never accepted)
RANGES = {
    CriterionConfig: {"blank": "[-1, inf)", "label_smoothing": "[0, 1)"},
    LearnerConfig: {"lr": "(0, inf)", "momentum": "[0, 1)", "momentum_time_constant": "[0, inf)",
                    "beta1": "[0, 1)", "beta2": "[0, 1)", "eps": "(0, inf)",
                    "variance_time_constant": "(0, inf)", "target_denominator": "(0, inf)",
                    "l2": "[0, inf)", "clip_norm": "[0, inf)", "clip_value": "[0, inf)",
                    "warmup_steps": "[0, inf)", "decay": "(0, inf)", "newbob_factor": "(0, 1]",
                    "newbob_threshold": "(-inf, inf)", "newbob_stop_threshold": "(-inf, inf)",
                    "newbob_min_epochs": "[0, inf)", "min_lr": "[0, inf)"},
    DistributedConfig: {"block_size": "[1, inf)", "block_lr": "(0, inf)",
                        "onebit_min_size": "[0, inf)"},
    TrainSection: {"epochs": "[1, inf)", "checkpoint_every": "[0, inf)",
                   "keep_checkpoints": "[0, inf)", "log_every": "[0, inf)",
                   "max_steps": "[0, inf)", "seed": "[0, 9.2e18]"},
}


def _section(cls, data: dict, where: str):
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a table, got {data!r}")
    defaults = cls()
    kwargs = {}
    names = {f.name for f in dataclasses.fields(cls)}
    for k, v in data.items():
        if k not in names:
            raise ConfigError(f"{where}.{k}: unknown key (known: {', '.join(sorted(names))})")
        want = type(getattr(defaults, k))
        if want is float and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if not isinstance(v, want) or (want is int and isinstance(v, bool)):
            raise ConfigError(f"{where}.{k}: expected {want.__name__}, got {v!r}")
        if k in RANGES.get(cls, {}):
            check_interval(v, RANGES[cls][k], f"{where}.{k}")
        kwargs[k] = v
    return cls(**kwargs)


def _choice(value, choices, where):
    if value not in choices:
        raise ConfigError(f"{where}: expected one of {', '.join(choices)}, got {value!r}")


def parse_override(text: str) -> tuple[str, str, object]:
    """``"section.key=value"`` -> ``(section, key, value)``; the value is parsed as TOML
    (a bare word that is not TOML is a string)."""
    if "=" not in text or "." not in text.split("=", 1)[0]:
        raise ConfigError(f"--set {text!r}: expected section.key=value")
    lhs, rhs = text.split("=", 1)
    section, key = lhs.strip().split(".", 1)
    if not section or not all(key.split(".")):
        raise ConfigError(f"--set {text!r}: expected section.key=value")
    try:
        value = tomllib.loads(f"v = {rhs.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = rhs.strip()
    return section, key, value


def parse_train_config(data: dict, path: str = "<config>", overrides=()) -> TrainConfig:
    """Validate a config dict (as read from TOML) with ``overrides`` applied."""
    data = copy.deepcopy(data)
    for text in overrides:
        section, key, value = parse_override(text)
        node = data.setdefault(section, {})
        parts = key.split(".")
        for p in parts[:-1]:
            if not isinstance(node, dict):
                break
            node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError(f"--set {text!r}: {section}.{'.'.join(parts[:-1])} is not a "
                              "table")
        node[parts[-1]] = value
    known = ("network", "criterion", "reader", "learner", "distributed", "train")
    for k, v in data.items():
        if k not in known:
            raise ConfigError(f"{path}: unknown section [{k}] (known: {', '.join(known)})")
        if not isinstance(v, dict):
            raise ConfigError(f"{path}: [{k}] must be a table ([{k}] header), got {v!r}")
    if "network" not in data:
        raise ConfigError(f"{path}: missing section [network]")
    reader_data = dict(data.get("reader", {}))
    network_data = dict(data["network"])
    # frame stacking is set in [reader] but done by the network, so model files carry it
    for k in ("stack_frames", "subsample_frames"):
        if k in reader_data:
            if k in network_data and network_data[k] != reader_data[k]:
                raise ConfigError(f"{path}: [reader].{k} and [network].{k} differ")
            network_data[k] = reader_data[k]
    network = parse_network(network_data, path)
    reader = reader_config_from_dict(reader_data, f"{path}: [reader]", ConfigError)
    reader.stack_frames = network["stack_frames"]
    reader.subsample_frames = network["subsample_frames"]
    criterion = _section(CriterionConfig, data.get("criterion", {}), f"{path}: [criterion]")
    _choice(criterion.type, CRITERION_TYPES, f"{path}: [criterion].type")
    if criterion.type == "cross_entropy" and not reader.frame_targets:
        raise ConfigError(f"{path}: [criterion].type = \"cross_entropy\" needs [reader]"
                          ".frame_targets (an rspecifier of per-frame class ids)")
    if criterion.type == "transducer":
        transducer_spec(criterion, f"{path}: [criterion]")
    learner = _section(LearnerConfig, data.get("learner", {}), f"{path}: [learner]")
    _choice(learner.type, LEARNER_TYPES, f"{path}: [learner].type")
    dist = _section(DistributedConfig, data.get("distributed", {}), f"{path}: [distributed]")
    _choice(dist.mode, ("allreduce", "1bit", "bmuf"), f"{path}: [distributed].mode")
    _choice(dist.minibatch, ("global", "per_rank"), f"{path}: [distributed].minibatch")
    _choice(dist.lr_scale, ("none", "linear", "sqrt"), f"{path}: [distributed].lr_scale")
    if dist.block_momentum != -1.0:  # -1: the default, 1 - 1/N
        check_interval(dist.block_momentum, "[0, 1)", f"{path}: [distributed].block_momentum")
    train = _section(TrainSection, data.get("train", {}), f"{path}: [train]")
    _choice(train.device, ("cpu", "cuda"), f"{path}: [train].device")
    # parameters, gradients and the learner's slots (before the data gives the input size);
    # activations need the other half
    check_parameter_memory(network, 1, 1, path, copies=2 + len(LEARNER_CLASSES[learner.type].SLOTS),
                           what="parameters, gradients and learner state", share=0.5)
    return TrainConfig(network, criterion, reader, learner, dist, train, path)


def load_train_config(path: str | os.PathLike, overrides=(), data_dir: str | None = None,
                      out_dir: str | None = None) -> TrainConfig:
    """Read and validate a training TOML file; ``data_dir``/``out_dir`` override
    ``[reader].data_dir`` / ``[train].out_dir``. Relative paths in the file are taken relative
    to the current directory (as Kaldi's and CNTK's configs)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ConfigError(f"{path}: no such file")
    from asrkit.utils.textfile import TextFileError, read_text

    try:
        data = tomllib.loads(read_text(path))
    except TextFileError as e:
        raise ConfigError(str(e)) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from None
    except RecursionError:
        raise ConfigError(f"{path}: invalid TOML: nested too deeply") from None
    overrides = list(overrides)
    if data_dir:
        overrides.append(f"reader.data_dir={_toml_str(data_dir)}")
    if out_dir:
        overrides.append(f"train.out_dir={_toml_str(out_dir)}")
    return parse_train_config(data, path, overrides)


def _toml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
