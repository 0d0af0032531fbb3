"""Dense, Embedding, LayerNorm, BatchNorm, Dropout, Sequential, Residual."""

from __future__ import annotations

import numpy as np

import asrkit.ops as O
from asrkit.graph import Variable
from asrkit.graph.init import glorot_uniform, normal
from asrkit.layers.base import Layer
from asrkit.layers.spec import Key

# the activations a [[network.layers]] table names ("none": identity)
ACTIVATIONS = {"relu": O.relu, "tanh": O.tanh, "sigmoid": O.sigmoid, "gelu": O.gelu,
               "elu": O.elu, "softplus": O.softplus, "none": None}


def _activation(fn):
    if fn is None or callable(fn):
        return fn
    if isinstance(fn, str) and fn in ACTIVATIONS:
        return ACTIVATIONS[fn]
    if isinstance(fn, str) and hasattr(O, fn):
        return getattr(O, fn)
    raise ValueError(f"unknown activation {fn!r}")


def _activation_name(fn) -> str:
    """The ACTIVATIONS name of an activation function (for the ONNX lowering)."""
    for name, f in ACTIVATIONS.items():
        if f is fn:
            return name
    return getattr(fn, "__name__", repr(fn))


class Dense(Layer):
    """Affine layer ``activation(x @ W + b)``: ``[..., in] -> [..., out_dim]``.

    ``[[network.layers]] type = "dense"``: ``dim``, ``activation`` (default relu). torch:
    ``Linear`` (``weight`` is ``W.T``).
    """

    KEYS = {"dim": Key(int, min=1), "activation": Key(str, "relu", choices=tuple(ACTIVATIONS))}
    SIZE_KEYS = ("dim",)

    def __init__(self, out_dim: int, activation=None, bias: bool = True,
                 init=None, name: str = ""):
        super().__init__(name or "dense")
        self.out_dim = int(out_dim)
        self.activation = _activation(activation)
        self.bias = bias
        self.init = init or glorot_uniform()

    @classmethod
    def from_spec(cls, spec, name):
        return cls(spec["dim"], spec["activation"], name=name)

    def param_specs(self, dim):
        specs = [("W", (dim, self.out_dim), self.init)]
        if self.bias:
            specs.append(("b", (self.out_dim,), 0.0))
        return specs, self.out_dim

    def forward(self, x):
        y = O.times(x, self.W)
        if self.bias:
            y = y + self.b
        return self.activation(y) if self.activation else y

    def torch_names(self):
        return [("W", "weight", "T")] + ([("b", "bias", "same")] if self.bias else [])

    def onnx(self, g, s):
        from asrkit.layers import onnx

        b = self.value("b") if self.bias else np.zeros(self.out_dim, np.float32)
        return onnx.dense(g, s, self.value("W"), b, _activation_name(self.activation),
                          self.name)


class Embedding(Layer):
    """Lookup table ``[vocab, dim]`` applied to integer ids: ``[...] -> [..., dim]``."""

    def __init__(self, vocab: int, dim: int, init=None, name: str = ""):
        super().__init__(name or "embedding")
        self.vocab, self.dim = int(vocab), int(dim)
        self.init = init or normal(1.0)

    def build(self, x):  # integer ids: no feature axis to size it from
        self.add_parameter("E", (self.vocab, self.dim), self.init)

    def forward(self, x):
        return O.embedding(x, self.E)


class LayerNorm(Layer):
    """Layer normalisation over the last axis with learnable scale and bias."""

    def __init__(self, eps: float = 1e-5, name: str = ""):
        super().__init__(name or "layer_norm")
        self.eps = eps

    def param_specs(self, dim):
        return [("scale", (dim,), 1.0), ("bias", (dim,), 0.0)], dim

    def forward(self, x):
        return O.layer_norm(x, self.scale, self.bias, self.eps)


class BatchNorm(Layer):
    """Batch normalisation over valid frames, with running statistics for evaluation."""

    def __init__(self, eps: float = 1e-5, momentum: float = 0.1, name: str = ""):
        super().__init__(name or "batch_norm")
        self.eps, self.momentum = eps, momentum

    def param_specs(self, dim):
        return [("scale", (dim,), 1.0), ("bias", (dim,), 0.0),
                ("running_mean", (dim,), 0.0, False), ("running_var", (dim,), 1.0, False)], dim

    def forward(self, x):
        return O.batch_norm(x, self.scale, self.bias, self.running_mean, self.running_var,
                            self.eps, self.momentum)


class Dropout(Layer):
    """Dropout with ``rate`` in training, identity in evaluation (and in ONNX exports).

    ``[[network.layers]] type = "dropout"``: ``rate``.
    """

    KEYS = {"rate": Key(float, interval="[0, 1)")}
    TRAINING_KEYS = ("rate",)

    def __init__(self, rate: float = 0.5, name: str = ""):
        super().__init__(name or "dropout")
        self.rate = float(rate)

    @classmethod
    def from_spec(cls, spec, name):
        return cls(spec["rate"], name=name)

    def forward(self, x):
        return O.dropout(x, self.rate) if self.rate > 0 else x

    def onnx(self, g, s):
        return s


class Sequential(Layer):
    """Apply layers (or plain functions such as ``asrkit.ops.relu``) in order."""

    def __init__(self, layers, name: str = ""):
        super().__init__(name or "sequential")
        self.layers = list(layers)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

    def sublayers(self):
        return [layer for layer in self.layers if isinstance(layer, Layer)]


class Residual(Layer):
    """``x + layer(x)`` (the layer must keep the shape)."""

    def __init__(self, layer, name: str = ""):
        super().__init__(name or "residual")
        self.layer = layer

    def forward(self, x: Variable):
        return x + self.layer(x)

    def sublayers(self):
        return [self.layer] if isinstance(self.layer, Layer) else []


def count_parameters(layer: Layer) -> int:
    """Number of trainable scalars in a layer."""
    return int(sum(np.prod(p.shape) for p in layer.parameters if p.trainable))
