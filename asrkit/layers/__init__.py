"""Layers (``asrkit.layers``): callables that build graph nodes and own their parameters."""

from asrkit.layers.base import Layer
from asrkit.layers.conv import TDNN, Conv1d
from asrkit.layers.core import (
    BatchNorm,
    Dense,
    Dropout,
    Embedding,
    LayerNorm,
    Residual,
    Sequential,
    count_parameters,
)
from asrkit.layers.recurrent import BLSTM, GRU, LSTM

__all__ = ["BLSTM", "BatchNorm", "Conv1d", "Dense", "Dropout", "Embedding", "GRU", "LSTM", "Layer",
           "LayerNorm", "Residual", "Sequential", "TDNN", "count_parameters"]
