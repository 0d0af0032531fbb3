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
from asrkit.utils.memory import format_bytes, memory_limit_bytes


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
# upper bounds of sizes that only a typo reaches (memory is checked separately, with the figure)
MAX_FRAMES_FACTOR = 1024     # stack_frames, subsample_frames, a TDNN's context/dilation/stride
MAX_NUM_LAYERS = 128         # LSTM layers in one [[network.layers]] table
MAX_LAYERS = 1000            # [[network.layers]] tables
MAX_SEED = 2**63 - 1


def _check_value(value, typ, where: str):
    if typ is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if typ is int and isinstance(value, bool) or not isinstance(value, typ):
        raise ConfigError(f"{where}: expected {typ.__name__}, got {value!r}")
    if typ is float and not math.isfinite(value):
        raise ConfigError(f"{where}: must be a finite number, got {value!r}")
    return value


def check_interval(value, interval: str, where: str, error=ConfigError) -> None:
    """Raise ``error`` naming ``where`` unless ``value`` is finite and inside ``interval``,
    written as in mathematics: ``"(0, inf)"``, ``"[0, 1)"``, ``"[1, inf)"``."""
    lo_text, hi_text = interval[1:-1].split(",")
    lo, hi = float(lo_text), float(hi_text)
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
          and math.isfinite(value)
          and (value >= lo if interval[0] == "[" else value > lo)
          and (value <= hi if interval[-1] == "]" else value < hi))
    if not ok:
        if math.isinf(lo) and math.isinf(hi):
            want = "a finite number"
        elif math.isinf(hi):
            want = f">= {lo_text.strip()}" if interval[0] == "[" else f"> {lo_text.strip()}"
        else:
            want = f"in {interval}"
        raise error(f"{where}: must be {want}, got {value!r}")


def _fill(section: dict, keys: dict, where: str, ignore=()) -> dict:
    if not isinstance(section, dict):
        raise ConfigError(f"{where}: expected a table, got {section!r}")
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
        if not 1 <= net[k] <= MAX_FRAMES_FACTOR:
            raise ConfigError(f"{where}.{k}: must be in 1..{MAX_FRAMES_FACTOR}, got {net[k]}")
    if not 0 <= net["seed"] <= MAX_SEED:
        raise ConfigError(f"{where}.seed: must be in 0..2^63-1, got {net['seed']}")
    layers = []
    if not net["layers"]:
        raise ConfigError(f"{where}.layers: needs at least one layer ([[network.layers]])")
    if len(net["layers"]) > MAX_LAYERS:
        raise ConfigError(f"{where}.layers: {len(net['layers'])} layers, at most {MAX_LAYERS}")
    for i, layer in enumerate(net["layers"]):
        lw = f"{path}: [network.layers] #{i}"
        if not isinstance(layer, dict) or "type" not in layer:
            raise ConfigError(f"{lw}: each layer is a table with a 'type' key")
        kind = layer["type"]
        if not isinstance(kind, str) or kind not in LAYER_KEYS:
            raise ConfigError(f"{lw}.type: unknown layer type {kind!r} (known: "
                              f"{', '.join(LAYER_KEYS)})")
        spec = {"type": kind, **_fill(layer, LAYER_KEYS[kind], lw, ignore=("type",))}
        for k, v in spec.items():
            if k in ("hidden", "dim", "num_layers", "context", "dilation", "stride") and v < 1:
                raise ConfigError(f"{lw}.{k}: must be >= 1, got {v}")
            if k in ("context", "dilation", "stride") and v > MAX_FRAMES_FACTOR:
                raise ConfigError(f"{lw}.{k}: must be at most {MAX_FRAMES_FACTOR}, got {v}")
            if k == "num_layers" and v > MAX_NUM_LAYERS:
                raise ConfigError(f"{lw}.num_layers: must be at most {MAX_NUM_LAYERS}, got {v}")
            if k in ("dropout", "rate") and not 0.0 <= v < 1.0:
                raise ConfigError(f"{lw}.{k}: must be in [0, 1), got {v}")
            if k == "proj" and not 0 <= v < spec["hidden"]:
                raise ConfigError(f"{lw}.proj: must be in 0..hidden-1 ({spec['hidden'] - 1}), "
                                  f"got {v}")
            if k == "activation" and v not in ACTIVATIONS:
                raise ConfigError(f"{lw}.activation: unknown {v!r} (known: "
                                  f"{', '.join(ACTIVATIONS)})")
        layers.append(spec)
    net["layers"] = layers
    # a lower bound (1 input dim, 1 class) already rules out absurd sizes such as hidden = 1e9
    check_parameter_memory(net, 1, 1, path)
    return net


def _layer_shapes(spec: dict, dim: int, prefix: str) -> tuple[list[tuple[str, tuple]], int]:
    """``([(name, shape), ...], output dim)`` of one parsed layer taking ``dim`` inputs."""
    kind = spec["type"]
    if kind in ("blstm", "lstm"):
        H, P = spec["hidden"], spec["proj"]
        out = P or H
        dirs = ["", "_reverse"] if kind == "blstm" else [""]
        shapes = []
        for k in range(spec["num_layers"]):
            for suffix in dirs:
                n = f"{prefix}.%s_l{k}{suffix}"
                shapes += [(n % "weight_ih", (4 * H, dim)), (n % "weight_hh", (4 * H, out)),
                           (n % "bias_ih", (4 * H,)), (n % "bias_hh", (4 * H,))]
                if P:
                    shapes.append((n % "weight_hr", (P, H)))
            dim = out * len(dirs)
        return shapes, dim
    if kind == "dense":
        return [(f"{prefix}.W", (dim, spec["dim"])), (f"{prefix}.b", (spec["dim"],))], spec["dim"]
    if kind == "tdnn":
        return ([(f"{prefix}.W", (spec["context"], dim, spec["dim"])),
                 (f"{prefix}.b", (spec["dim"],))], spec["dim"])
    return [], dim  # dropout


def parameter_shapes(description: dict, input_dim: int, num_classes: int
                     ) -> dict[str, tuple[int, ...]]:
    """``{name: shape}`` of every parameter of a parsed description, in creation order (the
    names and shapes :func:`build_network` gives them), without allocating anything."""
    return {name: shape for _, name, shape in _shapes_by_layer(description, input_dim,
                                                                num_classes)}


def _shapes_by_layer(description, input_dim, num_classes):
    """``(layer index or -1 for the output, name, shape)`` of every parameter."""
    dim = input_dim * description.get("stack_frames", 1)
    for i, spec in enumerate(description["layers"]):
        shapes, dim = _layer_shapes(spec, dim, f"layers.{i}")
        yield from ((i, n, s) for n, s in shapes)
    yield -1, "output.W", (dim, num_classes)
    yield -1, "output.b", (num_classes,)


def check_parameter_memory(description: dict, input_dim: int, num_classes: int,
                           path: str = "<network>", copies: int = 1,
                           what: str = "the parameters", share: float = 1.0) -> int:
    """Refuse a network whose float32 parameters (times ``copies``: gradients, learner slots)
    would need more than ``share`` of this machine's memory; returns the parameter count.

    Raises ConfigError naming ``path``, the layer and the size that makes it too big, with the
    figure, before anything is allocated.
    """
    per_layer: dict[int, int] = {}
    total = 0
    for i, _, shape in _shapes_by_layer(description, input_dim, num_classes):
        n = math.prod(shape)
        per_layer[i] = per_layer.get(i, 0) + n
        total += n
    need, memory = 4 * total * copies, memory_limit_bytes()
    if need <= share * memory:
        return total
    worst = max(per_layer, key=per_layer.get)
    if worst < 0:
        culprit = f"the output layer ({num_classes} classes)"
    else:
        spec = description["layers"][worst]
        key = max((k for k in ("hidden", "proj", "dim", "context") if k in spec),
                  key=lambda k: spec[k])
        culprit = f"[network.layers] #{worst}.{key} = {spec[key]}"
    if input_dim > 1 and worst == 0 and per_layer[0] >= 0.5 * total:
        culprit += f" with {input_dim}-dim input"
    of = "" if share >= 1 else f"{share:.0%} of "
    raise ConfigError(f"{path}: {culprit}: the network would have {total:,} parameters, "
                      f"{format_bytes(need)} for {what}, more than {of}this machine's "
                      f"{format_bytes(memory)} of memory")


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
    check_parameter_memory(net, input_dim, num_classes)
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
