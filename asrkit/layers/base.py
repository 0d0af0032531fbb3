"""The Layer protocol: a callable that builds graph nodes and owns its parameters.

Parameters are created on the first call, when the input's feature size is known (as CNTK's
layers infer their input dimension), and reused on later calls: applying one layer to two inputs
shares its weights. A layer lists them in :meth:`Layer.param_specs` (names, shapes,
initialisers, for a given input size), so their shapes are known without allocating anything.

A layer that is also a ``[[network.layers]]`` type (``asrkit.layers.NETWORK_LAYERS``) knows the
rest of what the toolkit needs of it, in one place: its TOML keys (``KEYS``, ``from_spec``), its
output lengths, its torch names (``torch_names``: how its parameters map onto the torch module a
PyTorch user would write) and its ONNX lowering (``onnx``).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable

import numpy as np

from asrkit.graph import Parameter, Variable, parameter
from asrkit.layers.spec import ConfigError, Key, fill

# (name, shape, init, trainable) -> Parameter: where add_parameter takes its parameters from
_SOURCE: contextvars.ContextVar[Callable | None] = contextvars.ContextVar("parameter_source",
                                                                          default=None)


@contextlib.contextmanager
def parameter_source(make: Callable):
    """Within the block, layers create parameters with ``make(name, shape, init, trainable)``
    (seeded initialisation, values read from a model file) instead of ``parameter``."""
    token = _SOURCE.set(make)
    try:
        yield
    finally:
        _SOURCE.reset(token)


def torch_layout(value: np.ndarray, layout, to_torch: bool) -> np.ndarray:
    """Convert a parameter between asrkit's layout and torch's: ``layout`` is ``"same"``,
    ``"T"`` (a Linear's ``weight [out, in]`` is asrkit's ``W [in, out]``), ``"conv"`` (Conv1d
    ``[out, in, K]`` <-> ``[K, in, out]``) or a pair of functions ``(to_torch, from_torch)``."""
    if layout == "same":
        return np.array(value)
    if layout == "T":
        return np.ascontiguousarray(value.T)
    if layout == "conv":  # the same permutation both ways
        return np.ascontiguousarray(value.transpose(2, 1, 0))
    return np.ascontiguousarray(layout[0 if to_torch else 1](value))


class Layer:
    """Base class: subclasses list their parameters in ``param_specs(dim)`` (or override
    ``build(x)``) and implement ``forward(x)``."""

    #: ``[[network.layers]]`` keys of this layer type (``{name: Key}``); empty: not a type
    KEYS: dict[str, Key] = {}
    #: the keys that set its size (a network too big for memory names the largest)
    SIZE_KEYS: tuple[str, ...] = ()
    #: the keys that act only in training (dropout): a run may start from a model that differs
    #: in them (``asrkit.config.acoustic_net.without_training_keys``)
    TRAINING_KEYS: tuple[str, ...] = ()

    def __init__(self, name: str = ""):
        self.name = name or type(self).__name__.lower()
        self.built = False
        self._params: dict[str, Parameter] = {}

    # -- parameters and the graph --------------------------------------------------------------
    def add_parameter(self, key: str, shape, init, trainable: bool = True) -> Parameter:
        """Create parameter ``{name}.{key}`` of ``shape`` with initialiser ``init``."""
        name = f"{self.name}.{key}"
        make = _SOURCE.get()
        if make is not None:
            p = make(name, tuple(shape), init, trainable)
        else:
            p = parameter(shape, init=init, name=name, trainable=trainable)
        self._params[key] = p
        return p

    def param_specs(self, dim: int) -> tuple[list[tuple], int]:
        """``([(key, shape, init[, trainable]), ...], output size)`` for input size ``dim``."""
        return [], dim

    def build(self, x: Variable) -> None:
        """Create the parameters for input ``x`` (those of :meth:`param_specs`)."""
        for key, shape, init, *trainable in self.param_specs(feature_size(self, x))[0]:
            self.add_parameter(key, shape, init, *trainable)

    def forward(self, x: Variable) -> Variable:
        """Return the output node for input node ``x``."""
        raise NotImplementedError

    def __call__(self, x: Variable) -> Variable:
        if not self.built:
            self.build(x)
            self.built = True
        return self.forward(x)

    @property
    def parameters(self) -> list[Parameter]:
        """This layer's parameters (sub-layers included), in creation order."""
        out = list(self._params.values())
        for sub in self.sublayers():
            out += [p for p in sub.parameters if p not in out]
        return out

    def sublayers(self) -> list[Layer]:
        """Layers held by this one."""
        return []

    def value(self, key: str) -> np.ndarray:
        """The float32 value of parameter ``key`` (built layers)."""
        return np.asarray(self._params[key].value, np.float32)

    # -- what a [network] type knows -----------------------------------------------------------
    @classmethod
    def parse_spec(cls, table: dict, where: str) -> dict:
        """Validate a ``[[network.layers]]`` table of this type; returns it complete (defaults
        filled, ``type`` first). Raises ConfigError naming ``where`` and the key."""
        spec = {"type": table["type"], **fill(table, cls.KEYS, where, ignore=("type",))}
        cls.check_spec(spec, where)
        return spec

    @classmethod
    def check_spec(cls, spec: dict, where: str) -> None:
        """Rules between keys (beyond each key's own range); raise ConfigError."""

    @classmethod
    def from_spec(cls, spec: dict, name: str) -> Layer:
        """The layer of a parsed ``[[network.layers]]`` table, named ``name``."""
        raise ConfigError(f"{cls.__name__} is not a [network] layer type")

    def output_lengths(self, lengths: np.ndarray) -> np.ndarray:
        """Output frames per sequence (int64 ``[B]``) for input ``lengths``."""
        return lengths

    @property
    def subsampling(self) -> int:
        """Input frames per output frame."""
        return 1

    def torch_names(self) -> list[tuple[str, str, object]]:
        """``(key, torch key, layout)`` of every parameter (see :func:`torch_layout`); the torch
        keys are relative to the layer's torch module, as the keys to this layer's name."""
        return [(k, k, "same") for k in self._params]

    def onnx(self, g, s):
        """Emit this (built) layer's ONNX nodes on builder ``g`` for the stream ``s``
        (:class:`asrkit.layers.onnx.Stream`); returns the output stream."""
        from asrkit.layers.onnx import ExportError

        raise ExportError(f"layer '{self.name}' ({type(self).__name__}) has no ONNX export")

    def __getattr__(self, key):
        params = self.__dict__.get("_params", {})
        if key in params:
            return params[key]
        raise AttributeError(f"{type(self).__name__} has no attribute {key!r}")

    def __repr__(self):
        return f"{type(self).__name__}({self.name!r})"


def feature_size(layer: Layer, x: Variable) -> int:
    """The static size of ``x``'s last axis, or a clear error naming the layer."""
    static = x.shape[len(x.dynamic_axes):]
    if not static or static[-1] is None:
        raise ValueError(f"layer '{layer.name}': input {x!r} has no static feature axis")
    return int(static[-1])
