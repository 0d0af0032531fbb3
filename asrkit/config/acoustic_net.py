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

Each layer type is a class of ``asrkit.layers`` (``NETWORK_LAYERS``) that declares its keys and
builds itself; this module checks a section against them and builds the graph by looping over
the layers. An output Dense layer to the token inventory is always added (``output``).
Parameters are named ``layers.<i>.<key>`` by the layer classes: LSTM weights use
torch.nn.LSTM's names and shapes (so a stacked BLSTM layer ``i`` maps onto a
``torch.nn.LSTM(bidirectional=True)`` unchanged); Dense weights are ``layers.<i>.W [in, out]``
and ``layers.<i>.b [out]`` (torch's Linear stores ``W.T``); TDNN kernels are ``layers.<i>.W
[K, in, out]`` (torch's Conv1d stores ``[out, in, K]``).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import zlib

import numpy as np

from asrkit.graph import Parameter, input_variable, parameter
from asrkit.layers import ACTIVATIONS, NETWORK_LAYERS, Layer, network_layers, parameter_source
from asrkit.layers import output_lengths as _layers_output_lengths
from asrkit.layers.spec import (
    MAX_FRAMES_FACTOR,
    ConfigError,
    check_interval,
    fill,
)
from asrkit.utils.memory import format_bytes, memory_limit_bytes

__all__ = ["ACTIVATIONS", "LAYER_KEYS", "ConfigError", "Network", "build_network",
           "check_interval", "check_parameter_memory", "output_lengths", "parameter_shapes",
           "parse_network", "without_training_keys"]

# layer type -> its keys (``asrkit.layers.spec.Key``)
LAYER_KEYS = {kind: cls.KEYS for kind, cls in NETWORK_LAYERS.items()}
NETWORK_KEYS = {"stack_frames": (int, 1), "subsample_frames": (int, 1), "seed": (int, 0),
                "layers": (list, None)}
MAX_LAYERS = 1000            # [[network.layers]] tables
MAX_SEED = 2**63 - 1


def without_training_keys(network: dict) -> dict:
    """A ``parse_network`` description without what acts only in training: its seed and each
    layer's ``TRAINING_KEYS`` (dropout). Networks equal in it have the same parameters and
    evaluate the same way, so a run may start from a model of the other (``[train] init``)."""
    layers = [{k: v for k, v in layer.items()
               if k not in getattr(NETWORK_LAYERS.get(layer.get("type")), "TRAINING_KEYS", ())}
              for layer in network.get("layers", [])]
    return {**{k: v for k, v in network.items() if k != "seed"}, "layers": layers}


def parse_network(section: dict, path: str = "<config>") -> dict:
    """Validate a ``[network]`` section; returns a complete description (defaults filled).

    Raises ConfigError naming ``path`` and the key at fault.
    """
    where = f"{path}: [network]"
    net = fill(section, NETWORK_KEYS, where)
    for k in ("stack_frames", "subsample_frames"):
        if not 1 <= net[k] <= MAX_FRAMES_FACTOR:
            raise ConfigError(f"{where}.{k}: must be in 1..{MAX_FRAMES_FACTOR}, got {net[k]}")
    if not 0 <= net["seed"] <= MAX_SEED:
        raise ConfigError(f"{where}.seed: must be in 0..2^63-1, got {net['seed']}")
    if not net["layers"]:
        raise ConfigError(f"{where}.layers: needs at least one layer ([[network.layers]])")
    if len(net["layers"]) > MAX_LAYERS:
        raise ConfigError(f"{where}.layers: {len(net['layers'])} layers, at most {MAX_LAYERS}")
    layers = []
    for i, layer in enumerate(net["layers"]):
        lw = f"{path}: [network.layers] #{i}"
        if not isinstance(layer, dict) or "type" not in layer:
            raise ConfigError(f"{lw}: each layer is a table with a 'type' key")
        kind = layer["type"]
        if not isinstance(kind, str) or kind not in NETWORK_LAYERS:
            raise ConfigError(f"{lw}.type: unknown layer type {kind!r} (known: "
                              f"{', '.join(NETWORK_LAYERS)})")
        layers.append(NETWORK_LAYERS[kind].parse_spec(layer, lw))
    net["layers"] = layers
    # a lower bound (1 input dim, 1 class) already rules out absurd sizes such as hidden = 1e9
    check_parameter_memory(net, 1, 1, path)
    return net


def _shapes_by_layer(description, input_dim, num_classes):
    """``(layer index or -1 for the output, name, shape)`` of every parameter."""
    dim = input_dim
    layers = network_layers(description, num_classes)
    for i, layer in enumerate(layers):
        specs, dim = layer.param_specs(dim)
        index = i - 1 if i < len(layers) - 1 else -1
        yield from ((index, f"{layer.name}.{key}", tuple(shape)) for key, shape, *_ in specs)


def parameter_shapes(description: dict, input_dim: int, num_classes: int
                     ) -> dict[str, tuple[int, ...]]:
    """``{name: shape}`` of every parameter of a parsed description, in creation order (the
    names and shapes :func:`build_network` gives them), without allocating anything."""
    return {name: shape for _, name, shape in _shapes_by_layer(description, input_dim,
                                                                num_classes)}


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
        size_keys = [k for k in NETWORK_LAYERS[spec["type"]].SIZE_KEYS if k in spec]
        key = max(size_keys, key=lambda k: spec[k])
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
    params: ``{name: Parameter}`` in creation order; description: the parsed ``[network]``;
    layers: the built layers in order (``asrkit.layers.network_layers``).
    """

    feats: object
    logits: object
    params: dict[str, Parameter]
    description: dict
    input_dim: int
    num_classes: int
    layers: list[Layer] = dataclasses.field(default_factory=list)


class _Params:
    """Creates named parameters with seeds derived from the network seed and the name."""

    def __init__(self, seed: int, values: dict | None):
        self.seed = seed
        self.values = values
        self.params: dict[str, Parameter] = {}

    def __call__(self, name: str, shape, init, trainable: bool = True):
        if self.values is not None:
            if name not in self.values:
                raise ConfigError(f"parameter '{name}' missing from the given values")
            value = np.asarray(self.values[name], np.float32)
            if value.shape != tuple(shape):
                raise ConfigError(f"parameter '{name}': value has shape {value.shape}, the "
                                  f"network needs {tuple(shape)}")
            init = value
        p = parameter(shape, init=init, name=name, trainable=trainable,
                      seed=(self.seed * 1_000_003 + zlib.crc32(name.encode())) % 2**32)
        self.params[name] = p
        return p


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
    layers = network_layers(net, num_classes)
    x = feats
    with parameter_source(make):
        for layer in layers:
            x = layer(x)
    if values is not None:
        extra = set(values) - set(make.params)
        if extra:
            raise ConfigError(f"values for unknown parameters: {', '.join(sorted(extra))}")
    return Network(feats, x, make.params, net, input_dim, num_classes, layers)


def output_lengths(description: dict, lengths) -> np.ndarray:
    """Frames per sequence at the network output for input ``lengths`` (int ``[B]``)."""
    return _layers_output_lengths(network_layers(description, 1), lengths)
