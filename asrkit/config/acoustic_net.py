"""The ``[network]`` section of a training config -> an acoustic-model graph.

A network description is a plain dict (the TOML section, validated and completed with defaults
by :func:`parse_network`), so it can be stored in a model file and rebuilt there::

    [network]
    stack_frames = 1          # low frame rate: concatenate this many frames ...
    subsample_frames = 1      # ... every this many frames (first op of the graph)
    seed = 0                  # parameter initialisation
    [[network.layers]]
    type = "blstm"            # blstm | lstm | tdnn | dense | dropout
    hidden = 320              # cells per direction
    num_layers = 2
    proj = 0                  # LSTMP projection size (0: none)
    dropout = 0.0             # between stacked layers, in training only

An output Dense layer to the token inventory is always added (``output``). Parameter names and
layouts: LSTM weights use torch.nn.LSTM's names and shapes under ``layers.<i>.`` (so a stacked
BLSTM layer ``i`` maps onto a ``torch.nn.LSTM(bidirectional=True)`` unchanged); Dense weights are
``layers.<i>.W [in, out]`` and ``layers.<i>.b [out]`` (torch's Linear stores ``W.T``); TDNN
kernels are ``layers.<i>.W [K, in, out]`` (torch's Conv1d stores ``[out, in, K]``).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import zlib

import numpy as np

from asrkit import ops
from asrkit.graph import Parameter, input_variable, parameter


class ConfigError(ValueError):
    """A bad training/network config; the message names the file and the key at fault."""


ACTIVATIONS = {"relu": ops.relu, "tanh": ops.tanh, "sigmoid": ops.sigmoid, "gelu": ops.gelu,
               "elu": ops.elu, "softplus": ops.softplus, "none": None}

# key -> (type, default) per layer type; a default of None means required
LAYER_KEYS = {
    "blstm": {"hidden": (int, None), "num_layers": (int, 1), "proj": (int, 0),
              "dropout": (float, 0.0)},
    "lstm": {"hidden": (int, None), "num_layers": (int, 1), "proj": (int, 0),
             "dropout": (float, 0.0)},
    "tdnn": {"dim": (int, None), "context": (int, 3), "dilation": (int, 1), "stride": (int, 1),
             "activation": (str, "relu")},
    "dense": {"dim": (int, None), "activation": (str, "relu")},
    "dropout": {"rate": (float, None)},
}
NETWORK_KEYS = {"stack_frames": (int, 1), "subsample_frames": (int, 1), "seed": (int, 0),
                "layers": (list, None)}


def _check_value(value, typ, where: str):
    if typ is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if typ is int and isinstance(value, bool) or not isinstance(value, typ):
        raise ConfigError(f"{where}: expected {typ.__name__}, got {value!r}")
    return value


def _fill(section: dict, keys: dict, where: str, ignore=()) -> dict:
    out = {}
    for k in section:
        if k not in keys and k not in ignore:
            raise ConfigError(f"{where}: unknown key '{k}' (known: {', '.join(sorted(keys))})")
    for k, (typ, default) in keys.items():
        if k in section:
            out[k] = _check_value(section[k], typ, f"{where}.{k}")
        elif default is None:
            raise ConfigError(f"{where}: missing required key '{k}'")
        else:
            out[k] = default
    return out


def parse_network(section: dict, path: str = "<config>") -> dict:
    """Validate a ``[network]`` section; returns a complete description (defaults filled).

    Raises ConfigError naming ``path`` and the key at fault.
    """
    where = f"{path}: [network]"
    net = _fill(section, NETWORK_KEYS, where)
    for k in ("stack_frames", "subsample_frames"):
        if net[k] < 1:
            raise ConfigError(f"{where}.{k}: must be >= 1, got {net[k]}")
    layers = []
    if not net["layers"]:
        raise ConfigError(f"{where}.layers: needs at least one layer ([[network.layers]])")
    for i, layer in enumerate(net["layers"]):
        lw = f"{path}: [network.layers] #{i}"
        if not isinstance(layer, dict) or "type" not in layer:
            raise ConfigError(f"{lw}: each layer is a table with a 'type' key")
        kind = layer["type"]
        if kind not in LAYER_KEYS:
            raise ConfigError(f"{lw}.type: unknown layer type {kind!r} (known: "
                              f"{', '.join(LAYER_KEYS)})")
        spec = {"type": kind, **_fill(layer, LAYER_KEYS[kind], lw, ignore=("type",))}
        for k, v in spec.items():
            if k in ("hidden", "dim", "num_layers", "context", "dilation", "stride") and v < 1:
                raise ConfigError(f"{lw}.{k}: must be >= 1, got {v}")
            if k in ("dropout", "rate") and not 0.0 <= v < 1.0:
                raise ConfigError(f"{lw}.{k}: must be in [0, 1), got {v}")
            if k == "proj" and v < 0:
                raise ConfigError(f"{lw}.proj: must be >= 0, got {v}")
            if k == "activation" and v not in ACTIVATIONS:
                raise ConfigError(f"{lw}.activation: unknown {v!r} (known: "
                                  f"{', '.join(ACTIVATIONS)})")
        layers.append(spec)
    net["layers"] = layers
    return net


@dataclasses.dataclass
class Network:
    """A built acoustic model graph.

    feats: the Input ``[*, *, input_dim]``; logits: unnormalised ``[*, *, num_classes]``;
    params: ``{name: Parameter}`` in creation order; description: the parsed ``[network]``.
    """

    feats: object
    logits: object
    params: dict[str, Parameter]
    description: dict
    input_dim: int
    num_classes: int


class _Params:
    """Creates named parameters with seeds derived from the network seed and the name."""

    def __init__(self, seed: int, values: dict | None):
        self.seed = seed
        self.values = values
        self.params: dict[str, Parameter] = {}

    def __call__(self, name: str, shape, init):
        if self.values is not None:
            if name not in self.values:
                raise ConfigError(f"parameter '{name}' missing from the given values")
            value = np.asarray(self.values[name], np.float32)
            if value.shape != tuple(shape):
                raise ConfigError(f"parameter '{name}': value has shape {value.shape}, the "
                                  f"network needs {tuple(shape)}")
            init = value
        p = parameter(shape, init=init, name=name,
                      seed=(self.seed * 1_000_003 + zlib.crc32(name.encode())) % 2**32)
        self.params[name] = p
        return p


def _lstm_stack(x, in_dim, spec, prefix, make, bidirectional):
    H, P = spec["hidden"], spec["proj"]
    out = P or H
    bound = 1.0 / math.sqrt(H)  # torch.nn.LSTM's initialisation

    def uni(shape, rng):
        return rng.uniform(-bound, bound, shape)

    for k in range(spec["num_layers"]):
        outs = []
        for suffix, reverse in ([("", False), ("_reverse", True)] if bidirectional
                                else [("", False)]):
            n = f"{prefix}.%s_l{k}{suffix}"
            w_ih = make(n % "weight_ih", (4 * H, in_dim), uni)
            w_hh = make(n % "weight_hh", (4 * H, out), uni)
            b_ih = make(n % "bias_ih", (4 * H,), uni)
            b_hh = make(n % "bias_hh", (4 * H,), uni)
            w_hr = make(n % "weight_hr", (P, H), uni) if P else None
            outs.append(ops.lstm(x, w_ih, w_hh, b_ih, b_hh, w_hr=w_hr, reverse=reverse,
                                 name=n % "lstm"))
        x = ops.splice(*outs, axis=-1) if len(outs) > 1 else outs[0]
        in_dim = out * len(outs)
        if spec["dropout"] and k < spec["num_layers"] - 1:
            x = ops.dropout(x, spec["dropout"])
    return x, in_dim


def _activation(x, name):
    fn = ACTIVATIONS[name]
    return x if fn is None else fn(x)


def build_network(description: dict, input_dim: int, num_classes: int,
                  values: dict | None = None) -> Network:
    """Build the graph of a (parsed) network description.

    input_dim: features per frame (before stacking); num_classes: output tokens (blank
    included); values: optional ``{name: array}`` for every parameter (loading a model).
    Returns a :class:`Network`.
    """
    net = parse_network(copy.deepcopy(description), "<network>")
    make = _Params(net["seed"], values)
    feats = input_variable(input_dim, name="feats")
    x, dim = feats, input_dim
    if net["stack_frames"] > 1 or net["subsample_frames"] > 1:
        x = ops.stack_frames(x, net["stack_frames"], net["subsample_frames"])
        dim = dim * net["stack_frames"]
    for i, spec in enumerate(net["layers"]):
        prefix = f"layers.{i}"
        kind = spec["type"]
        if kind in ("blstm", "lstm"):
            x, dim = _lstm_stack(x, dim, spec, prefix, make, kind == "blstm")
        elif kind == "dense":
            W = make(f"{prefix}.W", (dim, spec["dim"]), "glorot_uniform")
            b = make(f"{prefix}.b", (spec["dim"],), "zeros")
            x = _activation(ops.times(x, W) + b, spec["activation"])
            dim = spec["dim"]
        elif kind == "tdnn":
            K = spec["context"]
            W = make(f"{prefix}.W", (K, dim, spec["dim"]), "glorot_uniform")
            b = make(f"{prefix}.b", (spec["dim"],), "zeros")
            x = ops.conv1d(x, W, stride=spec["stride"], dilation=spec["dilation"],
                           padding="same")
            x = _activation(x + b, spec["activation"])
            dim = spec["dim"]
        elif kind == "dropout":
            x = ops.dropout(x, spec["rate"])
    W = make("output.W", (dim, num_classes), "glorot_uniform")
    b = make("output.b", (num_classes,), "zeros")
    logits = ops.times(x, W, name="logits_times") + b
    if values is not None:
        extra = set(values) - set(make.params)
        if extra:
            raise ConfigError(f"values for unknown parameters: {', '.join(sorted(extra))}")
    return Network(feats, logits, make.params, net, input_dim, num_classes)


def output_lengths(description: dict, lengths) -> np.ndarray:
    """Frames per sequence at the network output for input ``lengths`` (int ``[B]``)."""
    L = np.asarray(lengths, np.int64)
    s = int(description.get("subsample_frames", 1))
    L = -(-L // s)
    for spec in description.get("layers", []):
        if spec["type"] == "tdnn" and spec.get("stride", 1) > 1:
            L = -(-L // spec["stride"])
    return L.astype(np.int32)
