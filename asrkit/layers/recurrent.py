"""LSTM layers on the fused kernel: uni- or bidirectional, stacked, optionally projected.

Parameters are named and shaped as torch.nn.LSTM's (``weight_ih_l0``, ``weight_hh_l0_reverse``,
``weight_hr_l0`` ...), so a torch state dict loads unchanged with :meth:`LSTM.load_torch_state`.
"""

from __future__ import annotations

import numpy as np

import asrkit.ops as O
from asrkit.graph.init import uniform
from asrkit.layers.base import Layer, feature_size
from asrkit.layers.spec import MAX_NUM_LAYERS, ConfigError, Key

_KERNEL_NAMES = {"weight_ih": "w_ih", "weight_hh": "w_hh", "bias_ih": "b_ih", "bias_hh": "b_hh",
                 "weight_hr": "w_hr"}


class LSTM(Layer):
    """``[T, B, I] -> [T, B, D * P]`` with D = 2 when bidirectional, P = proj_dim or hidden_dim.

    num_layers stacked layers; ``dropout`` between layers (training only); each direction runs
    the fused kernel honouring the sequence lengths (packed semantics). Initialisation as torch:
    ``U(-1/sqrt(H), 1/sqrt(H))``. ``[[network.layers]] type = "lstm"`` or ``"blstm"``:
    ``hidden`` (cells per direction), ``num_layers``, ``proj`` (LSTMP projection, 0: none),
    ``dropout``; torch: ``nn.LSTM(bidirectional=..., proj_size=proj)``, names unchanged.
    """

    KEYS = {"hidden": Key(int, min=1), "num_layers": Key(int, 1, min=1, max=MAX_NUM_LAYERS),
            "proj": Key(int, 0), "dropout": Key(float, 0.0, interval="[0, 1)")}
    SIZE_KEYS = ("hidden", "proj")
    TRAINING_KEYS = ("dropout",)

    def __init__(self, hidden_dim: int, num_layers: int = 1, bidirectional: bool = False,
                 proj_dim: int | None = None, dropout: float = 0.0, name: str = ""):
        super().__init__(name or ("blstm" if bidirectional else "lstm"))
        self.hidden_dim, self.num_layers = int(hidden_dim), int(num_layers)
        self.bidirectional, self.proj_dim, self.dropout = bidirectional, proj_dim, dropout

    @property
    def output_dim(self) -> int:
        """Feature size of the output."""
        return (2 if self.bidirectional else 1) * (self.proj_dim or self.hidden_dim)

    @classmethod
    def check_spec(cls, spec, where):
        if not 0 <= spec["proj"] < spec["hidden"]:
            raise ConfigError(f"{where}.proj: must be in 0..hidden-1 ({spec['hidden'] - 1}), "
                              f"got {spec['proj']}")

    @classmethod
    def from_spec(cls, spec, name):
        return cls(spec["hidden"], spec["num_layers"], spec["type"] == "blstm",
                   spec["proj"] or None, spec["dropout"], name=name)

    def _suffixes(self):
        return ["", "_reverse"] if self.bidirectional else [""]

    def param_specs(self, dim):
        H, P = self.hidden_dim, self.proj_dim or self.hidden_dim
        init = uniform(1.0 / np.sqrt(H))
        specs = []
        for layer in range(self.num_layers):
            for sfx in self._suffixes():
                specs += [(f"weight_ih_l{layer}{sfx}", (4 * H, dim), init),
                          (f"weight_hh_l{layer}{sfx}", (4 * H, P), init),
                          (f"bias_ih_l{layer}{sfx}", (4 * H,), init),
                          (f"bias_hh_l{layer}{sfx}", (4 * H,), init)]
                if self.proj_dim:
                    specs.append((f"weight_hr_l{layer}{sfx}", (P, H), init))
            dim = self.output_dim
        return specs, dim

    def forward(self, x):
        h = x
        for layer in range(self.num_layers):
            if layer and self.dropout:
                h = O.dropout(h, self.dropout)
            p = [{k: self._params[f"{k}_l{layer}{sfx}"]
                  for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr")
                  if f"{k}_l{layer}{sfx}" in self._params} for sfx in self._suffixes()]
            if self.bidirectional:
                h = O.blstm(h, *[{_KERNEL_NAMES[k]: v for k, v in d.items()} for d in p],
                            name=f"{self.name}.l{layer}")
            else:
                h = O.lstm(h, p[0]["weight_ih"], p[0]["weight_hh"], p[0]["bias_ih"],
                           p[0]["bias_hh"], w_hr=p[0].get("weight_hr"),
                           name=f"{self.name}.l{layer}")
        return h

    def onnx(self, g, s):
        from asrkit.layers import onnx

        for layer in range(self.num_layers):
            dirs = [{_KERNEL_NAMES[k]: self.value(f"{k}_l{layer}{sfx}") for k in _KERNEL_NAMES
                     if f"{k}_l{layer}{sfx}" in self._params} for sfx in self._suffixes()]
            lower = onnx.lstmp_layer if self.proj_dim else onnx.lstm_layer
            s = lower(g, s, dirs, f"{self.name}.lstm_l{layer}")
        return s

    def load_torch_state(self, state: dict) -> None:
        """Copy a torch.nn.LSTM ``state_dict()`` (tensors or arrays) into the parameters."""
        for key, p in self._params.items():
            if key not in state:
                raise KeyError(f"layer '{self.name}': the state has no {key!r}")
            v = state[key]
            p.set_value(v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v))


def BLSTM(hidden_dim: int, num_layers: int = 1, proj_dim: int | None = None,
          dropout: float = 0.0, name: str = "") -> LSTM:
    """Bidirectional LSTM: the forward and backward outputs spliced, ``[T, B, 2P]``."""
    return LSTM(hidden_dim, num_layers, True, proj_dim, dropout, name=name or "blstm")


class GRU(Layer):
    """GRU layer(s) as torch.nn.GRU (gates r, z, n; same parameter names and shapes), run by the
    generic ``recurrence`` op: ``[T, B, I] -> [T, B, D * H]``. The input projections of all frames
    are one GEMM outside the loop; the step only multiplies the state."""

    def __init__(self, hidden_dim: int, num_layers: int = 1, bidirectional: bool = False,
                 name: str = ""):
        super().__init__(name or "gru")
        self.hidden_dim, self.num_layers = int(hidden_dim), int(num_layers)
        self.bidirectional = bidirectional

    def build(self, x):
        H = self.hidden_dim
        init = uniform(1.0 / np.sqrt(H))
        size = feature_size(self, x)
        for layer in range(self.num_layers):
            for sfx in (["", "_reverse"] if self.bidirectional else [""]):
                self.add_parameter(f"weight_ih_l{layer}{sfx}", (3 * H, size), init)
                self.add_parameter(f"weight_hh_l{layer}{sfx}", (3 * H, H), init)
                self.add_parameter(f"bias_ih_l{layer}{sfx}", (3 * H,), init)
                self.add_parameter(f"bias_hh_l{layer}{sfx}", (3 * H,), init)
            size = H * (2 if self.bidirectional else 1)

    def _direction(self, x, layer, sfx):
        H = self.hidden_dim
        p = {k: self._params[f"{k}_l{layer}{sfx}"]
             for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}
        gi = O.times(x, O.transpose(p["weight_ih"])) + p["bias_ih"]  # [T, B, 3H], one GEMM
        w_hh, b_hh = O.transpose(p["weight_hh"]), p["bias_hh"]

        def step(h, g):
            gh = O.times(h, w_hh) + b_hh
            r = O.sigmoid(g[..., :H] + gh[..., :H])
            z = O.sigmoid(g[..., H:2 * H] + gh[..., H:2 * H])
            n = O.tanh(g[..., 2 * H:] + r * gh[..., 2 * H:])
            return n + z * (h - n)  # (1 - z) * n + z * h

        return O.recurrence(step, gi, 0.0, state_shape=H, go_backwards=bool(sfx),
                            name=f"{self.name}.l{layer}{sfx}")

    def forward(self, x):
        h = x
        for layer in range(self.num_layers):
            outs = [self._direction(h, layer, sfx)
                    for sfx in (["", "_reverse"] if self.bidirectional else [""])]
            h = outs[0] if len(outs) == 1 else O.splice(*outs)
        return h

    def load_torch_state(self, state: dict) -> None:
        """Copy a torch.nn.GRU ``state_dict()`` into the parameters."""
        LSTM.load_torch_state(self, state)
