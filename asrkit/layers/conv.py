"""Convolution over time: Conv1d and Kaldi-style TDNN layers."""

from __future__ import annotations

import numpy as np

import asrkit.ops as O
from asrkit.graph.init import glorot_uniform
from asrkit.layers.base import Layer
from asrkit.layers.core import ACTIVATIONS, _activation, _activation_name
from asrkit.layers.spec import MAX_FRAMES_FACTOR, Key
from asrkit.ops.convolution import out_lengths


class Conv1d(Layer):
    """``[T, B, C] -> [T', B, out_channels]``: convolution over time (+ bias, activation).

    padding 'same' keeps ``ceil(T / stride)`` frames; 'valid' and strides change the lengths,
    which the output sequence carries.
    """

    def __init__(self, out_channels: int, kernel_size: int, stride: int = 1, dilation: int = 1,
                 padding="same", activation=None, bias: bool = True, init=None, name=""):
        super().__init__(name or "conv1d")
        self.out_channels, self.kernel_size = int(out_channels), int(kernel_size)
        self.stride, self.dilation, self.padding = int(stride), int(dilation), padding
        self.activation = _activation(activation)
        self.bias = bias
        self.init = init or glorot_uniform()

    def param_specs(self, dim):
        specs = [("W", (self.kernel_size, dim, self.out_channels), self.init)]
        if self.bias:
            specs.append(("b", (self.out_channels,), 0.0))
        return specs, self.out_channels

    def forward(self, x):
        y = O.conv1d(x, self.W, self.stride, self.dilation, self.padding)
        if self.bias:
            y = y + self.b
        return self.activation(y) if self.activation else y

    def output_lengths(self, lengths):
        return out_lengths(lengths, self.kernel_size, self.stride, self.dilation,
                           self.padding).astype(np.int64)

    @property
    def subsampling(self):
        return self.stride

    def torch_names(self):
        return [("W", "weight", "conv")] + ([("b", "bias", "same")] if self.bias else [])


_SIZE = {"min": 1, "max": MAX_FRAMES_FACTOR}


class TDNN(Conv1d):
    """Kaldi's TDNN layer: context offsets ``{-d, 0, d}`` (``context=3, dilation=d``) and ReLU.

    ``TDNN(512, context=3, dilation=3)`` splices frames t-3, t, t+3 like Kaldi's
    ``Append(Offset(x,-3), x, Offset(x,3))`` followed by an affine layer; ``subsample`` strides.
    ``[[network.layers]] type = "tdnn"``: ``dim``, ``context``, ``dilation``, ``stride``,
    ``activation``. torch: ``Conv1d(padding=dilation*(context-1)//2)`` (centred), ``weight
    [out, in, K]`` is ``W [K, in, out]`` transposed.
    """

    KEYS = {"dim": Key(int, min=1), "context": Key(int, 3, **_SIZE),
            "dilation": Key(int, 1, **_SIZE), "stride": Key(int, 1, **_SIZE),
            "activation": Key(str, "relu", choices=tuple(ACTIVATIONS))}
    SIZE_KEYS = ("dim", "context")

    def __init__(self, out_dim: int, context: int = 3, dilation: int = 1, subsample: int = 1,
                 activation="relu", name=""):
        super().__init__(out_dim, context, subsample, dilation, "same", activation,
                         name=name or "tdnn")

    @classmethod
    def from_spec(cls, spec, name):
        return cls(spec["dim"], spec["context"], spec["dilation"], spec["stride"],
                   spec["activation"], name=name)

    def onnx(self, g, s):
        from asrkit.layers import onnx

        return onnx.tdnn(g, s, self.value("W"), self.value("b"), self.dilation, self.stride,
                         _activation_name(self.activation), self.name)
