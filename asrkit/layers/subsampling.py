"""The Conv2d subsampling front end of ESPnet/icefall Transformers and Conformers.

``[T, B, F] -> [T', B, dim]``: two (x4, x6) or three (x8) valid 2-D convolutions over (time,
feature) with ReLU, then a Linear from the flattened ``channels x F'`` maps to ``dim``, as
ESPnet's ``Conv2dSubsampling``/``6``/``8`` (``conv.0``, ``conv.2``, ``conv.4``, ``out``):

=====  =============================  ===========================
x4     3x3 stride 2, 3x3 stride 2     ``T' = ((T-1)//2 - 1)//2``
x6     3x3 stride 2, 5x5 stride 3     ``T' = ((T-1)//2 - 2)//3``
x8     3x3 stride 2 (three times)     ``T' = (((T-1)//2 - 1)//2 - 1)//2``
=====  =============================  ===========================

The positional encoding ESPnet puts after ``out`` belongs to the encoder layer that follows
(``transformer``, ``conformer``).
"""

from __future__ import annotations

import numpy as np

import asrkit.ops as O
from asrkit.graph.init import glorot_uniform
from asrkit.layers.base import Layer, feature_size
from asrkit.layers.spec import ConfigError, Key
from asrkit.ops.conv2d import conv2d

# factor -> (kernel, stride) of each convolution
CONVS = {4: ((3, 2), (3, 2)), 6: ((3, 2), (5, 3)), 8: ((3, 2), (3, 2), (3, 2))}


def _bins(F: int, factor: int) -> int:
    for K, s in CONVS[factor]:
        F = (F - K) // s + 1 if F >= K else 0
    return F


class Conv2dSubsampling(Layer):
    """``[T, B, F] -> [T', B, dim]`` (see the module docstring). ``channels`` (default dim)
    feature maps per convolution.

    ``[[network.layers]] type = "conv2d_subsampling"``: ``dim``, ``factor`` (4, 6, 8),
    ``channels`` (0: dim). torch: ``conv`` = ``Sequential(Conv2d(1, C, 3, 2), ReLU(), Conv2d(C,
    C, K, s), ReLU()...)`` on ``[B, 1, T, F]``, ``out = Linear(C * F', dim)`` on the maps
    flattened channel-major (ESPnet's ``x.transpose(1, 2).view(b, t, c * f)``).
    """

    KEYS = {"dim": Key(int, min=1), "factor": Key(int, 4, choices=tuple(CONVS)),
            "channels": Key(int, 0, min=0)}
    SIZE_KEYS = ("dim", "channels")

    def __init__(self, dim: int, factor: int = 4, channels: int = 0, name: str = ""):
        super().__init__(name or "conv2d_subsampling")
        if factor not in CONVS:
            raise ValueError(f"conv2d subsampling factor must be one of {tuple(CONVS)}")
        self.dim, self.factor, self.channels = int(dim), int(factor), int(channels or dim)

    @classmethod
    def from_spec(cls, spec, name):
        return cls(spec["dim"], spec["factor"], spec["channels"], name=name)

    def _conv_keys(self):
        return [f"conv.{2 * i}" for i in range(len(CONVS[self.factor]))]

    def param_specs(self, dim):
        C, specs, c_in = self.channels, [], 1
        for key, (K, _) in zip(self._conv_keys(), CONVS[self.factor]):
            specs += [(f"{key}.W", (K, K, c_in, C), glorot_uniform()), (f"{key}.b", (C,), 0.0)]
            c_in = C
        F = max(_bins(dim, self.factor), 0)
        specs += [("out.W", (F * C, self.dim), glorot_uniform()), ("out.b", (self.dim,), 0.0)]
        return specs, self.dim

    def build(self, x):
        F = feature_size(self, x)
        if _bins(F, self.factor) < 1:
            need = next(f for f in range(1, 64) if _bins(f, self.factor) >= 1)
            raise ConfigError(f"layer '{self.name}' (conv2d_subsampling x{self.factor}): its "
                              f"{F}-dim input leaves no feature bins; it needs at least {need}")
        super().build(x)

    def forward(self, x):
        F = x.shape[-1]
        h = O.reshape(x, (F, 1))
        for key, (_, s) in zip(self._conv_keys(), CONVS[self.factor]):
            h = O.relu(conv2d(h, self._params[f"{key}.W"], (s, s)) + self._params[f"{key}.b"])
        h = O.reshape(h, (-1,))
        return O.times(h, self._params["out.W"]) + self._params["out.b"]

    def output_lengths(self, lengths):
        for K, s in CONVS[self.factor]:
            lengths = np.where(lengths >= K, (lengths - K) // s + 1, 0)
        return lengths

    @property
    def subsampling(self):
        return int(np.prod([s for _, s in CONVS[self.factor]]))

    def _out_layout(self):
        C = self.channels
        F = self._params["out.W"].shape[0] // C

        def to_torch(W):  # rows f*C + c -> columns c*F + f
            return W.reshape(F, C, -1).transpose(1, 0, 2).reshape(C * F, -1).T

        def from_torch(w):
            return w.T.reshape(C, F, -1).transpose(1, 0, 2).reshape(F * C, -1)

        return to_torch, from_torch

    def torch_names(self):
        conv = (lambda W: W.transpose(3, 2, 0, 1), lambda w: w.transpose(2, 3, 1, 0))
        out = []
        for key in self._conv_keys():
            out += [(f"{key}.W", f"{key}.weight", conv), (f"{key}.b", f"{key}.bias", "same")]
        return out + [("out.W", "out.weight", self._out_layout()), ("out.b", "out.bias", "same")]

    def onnx(self, g, s):
        from asrkit.layers import onnx

        s = onnx.zero_padding(g, s)
        # ONNX's Conv refuses inputs shorter than its kernel, where asrkit gives no frames:
        # zeros after the end keep every Conv fed, and the extra frames are sliced off
        need = next(t for t in range(1, 64) if self.output_lengths(np.array(t)) >= 1)
        x = g.op("Pad", [s.x, g.const([0, 0, 0, need - 1, 0, 0])], f"{self.name}.padded")
        h = g.op("Unsqueeze", [g.op("Transpose", [x], perm=[1, 0, 2]), g.const([1])],
                 f"{self.name}.bctf")  # [B, 1, T + need - 1, F]
        lengths, T_out = s.lengths, onnx.time_steps(g, s.x)
        for key, (K, st) in zip(self._conv_keys(), CONVS[self.factor]):
            h = onnx.conv2d_relu(g, h, self.value(f"{key}.W"), self.value(f"{key}.b"),
                                 (st, st), f"{self.name}.{key}")
            lengths = onnx.valid_lengths(g, lengths, K, st)
            T_out = onnx.valid_lengths(g, T_out, K, st)
        h = g.op("Slice", [h, g.const([0]), T_out, g.const([2])], f"{self.name}.frames")
        h = g.op("Transpose", [h], f"{self.name}.tbfc", perm=[2, 0, 3, 1])  # [T', B, F', C]
        flat = self._params["out.W"].shape[0]  # F' * C (-1 fails when T' is 0)
        h = g.op("Reshape", [h, g.const([0, 0, flat])], f"{self.name}.flat")
        y = onnx.linear(g, h, self.value("out.W"), self.value("out.b"), f"{self.name}.out")
        return onnx.Stream(y, lengths, self.dim)
