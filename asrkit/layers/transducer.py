"""The transducer's prediction network and joiner as layers (icefall's ``Decoder`` and
``Joiner``), built over a label sequence.

The description (``[criterion]`` keys of a training config, the ``transducer`` entry of a model
file) is a dict checked by :func:`parse_transducer`::

    predictor = "stateless"   # "stateless" (icefall: embedding + causal depthwise conv over the
                              # last context_size labels, ReLU) or "lstm"
    predictor_dim = 64        # embedding size (and LSTM cells)
    context_size = 2          # stateless: labels the prediction sees
    predictor_layers = 1      # lstm: stacked layers
    joiner_dim = 64           # H: the encoder and the predictor are projected to it

Parameters: ``predictor.embed [V, D]``, ``predictor.conv [K, D]`` (stateless) or
``predictor.lstm.*`` (torch.nn.LSTM's names), ``predictor.proj.W [D, H]``, ``predictor.proj.b
[H]``, and the joiner's output layer ``joiner.weight [V, H]``, ``joiner.bias [V]`` (torch
Linear's layout, as ``asrkit.kernels.rnnt_joiner_loss`` takes it). The encoder's projection to H
is the acoustic network's output layer.
"""

from __future__ import annotations

import math

import asrkit.ops as O
from asrkit.graph.init import normal, uniform
from asrkit.layers.base import Layer
from asrkit.layers.core import Dense
from asrkit.layers.recurrent import LSTM
from asrkit.layers.spec import MAX_NUM_LAYERS, ConfigError, Key, fill
from asrkit.ops.depthwise import depthwise_conv1d

PREDICTORS = ("stateless", "lstm")
TRANSDUCER_KEYS = {
    "predictor": Key(str, "stateless", choices=PREDICTORS),
    "predictor_dim": Key(int, 64, min=1, max=1 << 16),
    "context_size": Key(int, 2, min=1, max=64),
    "predictor_layers": Key(int, 1, min=1, max=MAX_NUM_LAYERS),
    "joiner_dim": Key(int, 64, min=1, max=1 << 16),
}


def parse_transducer(section: dict, where: str) -> dict:
    """The checked transducer description of ``section`` (defaults filled); ConfigError naming
    ``where`` and the key."""
    if not isinstance(section, dict):
        raise ConfigError(f"{where}: expected a table, got {section!r}")
    return fill(section, TRANSDUCER_KEYS, where)


class Predictor(Layer):
    """The prediction network: int labels ``[U, B]`` -> ``[U+1, B, H]`` (row 0 follows the start
    symbol, row u the first u labels). ``spec``: a parsed description; vocab: V (blank
    included; the start symbol embeds to zeros, so the blank's row is never read)."""

    def __init__(self, spec: dict, vocab: int, name: str = "predictor"):
        super().__init__(name)
        self.spec, self.vocab = dict(spec), int(vocab)
        D = spec["predictor_dim"]
        self.lstm = LSTM(D, spec["predictor_layers"], name=f"{name}.lstm") \
            if spec["predictor"] == "lstm" else None
        self.proj = Dense(spec["joiner_dim"], activation=None, name=f"{name}.proj")

    def build(self, x):
        D, K = self.spec["predictor_dim"], self.spec["context_size"]
        self.add_parameter("embed", (self.vocab, D), normal(1.0))
        if self.lstm is None:
            self.add_parameter("conv", (K, D), uniform(1.0 / math.sqrt(K)))

    def sublayers(self):
        return [m for m in (self.lstm, self.proj) if m is not None]

    def forward(self, labels):
        e = O.prepend_zero_frame(O.embedding(labels, self.embed))
        if self.lstm is None:
            h = O.relu(depthwise_conv1d(e, self.conv, padding="causal"))
        else:
            h = self.lstm(e)
        return self.proj(h)

    def step_params(self) -> list:
        """The parameters in the order ``asrkit.ops.transducer.predictor_step`` reads them:
        embed, conv (stateless) or each layer's w_ih, w_hh, b_ih, b_hh (lstm), proj W, proj b."""
        out = [self.embed]
        if self.lstm is None:
            out.append(self.conv)
        else:
            for i in range(self.spec["predictor_layers"]):
                out += [self.lstm._params[f"{k}_l{i}"]
                        for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
        return out + [self.proj.W, self.proj.b]

    def onnx(self, g, y: str, blank: int, states: tuple[str, str] | None = None):
        """Emit one step of the (built) prediction network on ONNX builder ``g``.

        y: int64 ``[N, K]``, the last ``context_size`` labels, oldest first (stateless), or
        ``[N, 1]``, the newest label (lstm); ``blank`` stands for "no label yet" and embeds to
        zeros, as ``asrkit.kernels.transducer``'s steps. states (lstm): the names of ``h``,
        ``c`` float32 ``[layers, N, D]``. Returns ``(out float32 [N, H], (next h, next c) or
        None)``.
        """
        from onnx import TensorProto

        from asrkit.layers import onnx as lo

        keep = g.op("Cast", [g.op("Not", [g.op("Equal", [y, g.const(blank)])])], "keep",
                    to=TensorProto.FLOAT)
        e = g.op("Gather", [g.weight(self.value("embed"), f"{self.name}.embed"), y], "embed")
        e = g.op("Mul", [e, g.op("Unsqueeze", [keep, g.const([2])])], "embed")  # [N, K, D]
        nxt = None
        if self.lstm is None:
            h = g.op("Mul", [e, g.weight(self.value("conv"), f"{self.name}.conv")], "conv")
            h = g.op("Relu", [g.op("ReduceSum", [h, g.const([1])], "conv", keepdims=0)])
        else:
            x = g.op("Transpose", [e], "embed_tbd", perm=[1, 0, 2])  # [1, N, D]
            hs, cs = [], []
            for i in range(self.spec["predictor_layers"]):
                h0, c0 = (g.op("Gather", [st, g.const([i])], "state", axis=0) for st in states)
                w = [self.lstm.value(f"{k}_l{i}")
                     for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
                x, h_n, c_n = lo.lstm_step(g, x, h0, c0, *w, f"{self.name}.lstm.l{i}")
                hs.append(h_n)
                cs.append(c_n)
            h = g.op("Squeeze", [x, g.const([0])], "lstm_out")
            nxt = tuple(g.op("Concat", parts, "state", axis=0) for parts in (hs, cs))
        return lo.linear(g, h, self.proj.value("W"), self.proj.value("b"),
                         f"{self.name}.proj"), nxt


def transducer_shapes(spec: dict, vocab: int) -> dict[str, tuple[int, ...]]:
    """``{name: shape}`` of the prediction network's and the joiner's parameters, in creation
    order, without building anything."""
    D, H = spec["predictor_dim"], spec["joiner_dim"]
    shapes = {"predictor.embed": (vocab, D)}
    if spec["predictor"] == "stateless":
        shapes["predictor.conv"] = (spec["context_size"], D)
    else:
        lstm = LSTM(D, spec["predictor_layers"], name="predictor.lstm")
        shapes.update({f"predictor.lstm.{k}": tuple(s) for k, s, *_ in lstm.param_specs(D)[0]})
    shapes.update({"predictor.proj.W": (D, H), "predictor.proj.b": (H,),
                   "joiner.weight": (vocab, H), "joiner.bias": (vocab,)})
    return shapes


class Joiner(Layer):
    """The joiner's output layer ``weight [V, H]``, ``bias [V]`` (the additive joiner
    ``weight @ tanh(enc + pred) + bias`` itself runs inside ``transducer_loss``)."""

    def __init__(self, vocab: int, dim: int, name: str = "joiner"):
        super().__init__(name)
        self.vocab, self.dim = int(vocab), int(dim)

    def build(self, x=None):
        bound = 1.0 / math.sqrt(self.dim)  # torch.nn.Linear's initialisation
        self.add_parameter("weight", (self.vocab, self.dim), uniform(bound))
        self.add_parameter("bias", (self.vocab,), uniform(bound))
        self.built = True

    def onnx(self, g, enc: str, pred: str) -> str:
        """Emit the additive joiner on ONNX builder ``g``: ``enc``, ``pred`` float32 ``[N, H]``
        -> the name of ``tanh(enc + pred) @ weight.T + bias`` float32 ``[N, V]``."""
        from asrkit.layers.onnx import linear

        h = g.op("Tanh", [g.op("Add", [enc, pred], "joint")], "joint")
        return linear(g, h, self.value("weight").T, self.value("bias"), self.name)
