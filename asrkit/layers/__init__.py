"""Layers (``asrkit.layers``): callables that build graph nodes and own their parameters.

:data:`NETWORK_LAYERS` is the ``[network]`` vocabulary of training configs: each type is one of
these classes, which knows its keys, parameters, output lengths, torch names and ONNX lowering.
"""

from asrkit.layers.attention import ConformerEncoder, TransformerEncoder
from asrkit.layers.base import Layer, parameter_source, torch_layout
from asrkit.layers.conv import TDNN, Conv1d
from asrkit.layers.core import (
    ACTIVATIONS,
    BatchNorm,
    Dense,
    Dropout,
    Embedding,
    LayerNorm,
    Residual,
    Sequential,
    count_parameters,
)
from asrkit.layers.network import (
    NETWORK_LAYERS,
    StackFrames,
    network_layers,
    output_lengths,
    subsampling_factor,
)
from asrkit.layers.recurrent import BLSTM, GRU, LSTM
from asrkit.layers.spec import ConfigError, Key
from asrkit.layers.subsampling import Conv2dSubsampling

__all__ = ["ACTIVATIONS", "BLSTM", "BatchNorm", "ConfigError", "ConformerEncoder", "Conv1d",
           "Conv2dSubsampling", "Dense", "Dropout", "Embedding", "GRU", "Key", "LSTM", "Layer",
           "LayerNorm", "NETWORK_LAYERS", "Residual", "Sequential", "StackFrames", "TDNN",
           "TransformerEncoder", "count_parameters", "network_layers", "output_lengths",
           "parameter_source", "subsampling_factor", "torch_layout"]
