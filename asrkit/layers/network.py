"""The ``[network]`` vocabulary: each ``[[network.layers]]`` type is a Layer class.

:data:`NETWORK_LAYERS` maps a type name to its class; :func:`network_layers` turns a parsed
description into the layers of the network in order (frame stacking first, the output layer
last), which ``asrkit.config.acoustic_net.build_network``, ``asrkit.export`` and
``asrkit.models.torch_state`` loop over.
"""

from __future__ import annotations

import numpy as np

import asrkit.ops as O
from asrkit.layers.attention import ConformerEncoder, TransformerEncoder
from asrkit.layers.base import Layer
from asrkit.layers.conv import TDNN
from asrkit.layers.core import Dense, Dropout
from asrkit.layers.recurrent import LSTM
from asrkit.layers.subsampling import Conv2dSubsampling

NETWORK_LAYERS: dict[str, type[Layer]] = {
    "blstm": LSTM,
    "lstm": LSTM,
    "tdnn": TDNN,
    "dense": Dense,
    "dropout": Dropout,
    "conv2d_subsampling": Conv2dSubsampling,
    "transformer": TransformerEncoder,
    "conformer": ConformerEncoder,
}


class StackFrames(Layer):
    """Low frame rate front end: output frame t concatenates input frames ``t*subsample ..
    t*subsample + stack - 1`` (zeros past the end): ``[T, B, D] -> [ceil(T/subsample), B,
    stack*D]``. The network's ``stack_frames`` and ``subsample_frames`` keys."""

    def __init__(self, stack: int = 1, subsample: int = 1, name: str = "stack_frames"):
        super().__init__(name)
        self.stack, self.subsample = int(stack), int(subsample)

    def param_specs(self, dim):
        return [], dim * self.stack

    def forward(self, x):
        if self.stack == 1 and self.subsample == 1:
            return x
        return O.stack_frames(x, self.stack, self.subsample)

    def output_lengths(self, lengths):
        return -(-lengths // self.subsample)

    @property
    def subsampling(self):
        return self.subsample

    def onnx(self, g, s):
        from asrkit.layers import onnx

        return onnx.stack_frames(g, s, self.stack, self.subsample)


def network_layers(description: dict, num_classes: int) -> list[Layer]:
    """The layers of a parsed ``[network]`` description, in order: :class:`StackFrames`, one
    per ``[[network.layers]]`` table (named ``layers.<i>``), the output :class:`Dense` to
    ``num_classes`` tokens (``output``). Nothing is built (no parameters yet)."""
    layers: list[Layer] = [StackFrames(description.get("stack_frames", 1),
                                       description.get("subsample_frames", 1))]
    for i, spec in enumerate(description["layers"]):
        layers.append(NETWORK_LAYERS[spec["type"]].from_spec(spec, f"layers.{i}"))
    layers.append(Dense(num_classes, name="output"))
    return layers


def output_lengths(layers: list[Layer], lengths) -> np.ndarray:
    """Frames per sequence (int32 ``[B]``) at the end of ``layers`` for input ``lengths``."""
    L = np.asarray(lengths, np.int64)
    for layer in layers:
        L = layer.output_lengths(L)
    return np.maximum(L, 0).astype(np.int32)


def subsampling_factor(layers: list[Layer]) -> int:
    """Input frames per output frame of ``layers``."""
    return int(np.prod([layer.subsampling for layer in layers]))
