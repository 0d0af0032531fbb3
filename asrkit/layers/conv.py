"""Convolution over time: Conv1d and Kaldi-style TDNN layers."""

from __future__ import annotations

import asrkit.ops as O
from asrkit.graph.init import glorot_uniform
from asrkit.layers.base import Layer, feature_size
from asrkit.layers.core import _activation


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

    def build(self, x):
        C = feature_size(self, x)
        self.add_parameter("W", (self.kernel_size, C, self.out_channels), self.init)
        if self.bias:
            self.add_parameter("b", (self.out_channels,), 0.0)

    def forward(self, x):
        y = O.conv1d(x, self.W, self.stride, self.dilation, self.padding)
        if self.bias:
            y = y + self.b
        return self.activation(y) if self.activation else y


class TDNN(Conv1d):
    """Kaldi's TDNN layer: context offsets ``{-d, 0, d}`` (``context=3, dilation=d``) and ReLU.

    ``TDNN(512, context=3, dilation=3)`` splices frames t-3, t, t+3 like Kaldi's
    ``Append(Offset(x,-3), x, Offset(x,3))`` followed by an affine layer; ``subsample`` strides.
    """

    def __init__(self, out_dim: int, context: int = 3, dilation: int = 1, subsample: int = 1,
                 activation="relu", name=""):
        super().__init__(out_dim, context, subsample, dilation, "same", activation,
                         name=name or "tdnn")
