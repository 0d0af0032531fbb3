"""Self-attention encoders: the Transformer (pre-norm) and the Conformer, stacks of blocks on
``[T, B, dim]`` sequences whose padding is never attended.

``transformer``: ``x * sqrt(dim) + PE`` (absolute sinusoids), then per block (torch's
``nn.TransformerEncoderLayer(norm_first=True)``, names unchanged)::

    x = x + dropout(self_attn(norm1(x)))
    x = x + dropout(linear2(dropout(act(linear1(norm2(x))))))

and a final ``norm`` (``nn.TransformerEncoder(..., norm=LayerNorm)``).

``conformer`` (Gulati et al. 2020, as ESPnet's ``ConformerEncoderLayer`` and icefall's
conformer, whose names it keeps): ``x * sqrt(dim)`` and relative positions (ESPnet's
``RelPositionalEncoding`` / ``RelPositionMultiHeadedAttention``), then per block::

    x = x + 0.5 * dropout(feed_forward_macaron(norm_ff_macaron(x)))     # w_2(swish(w_1 x))
    x = x + dropout(self_attn(norm_mha(x), pos))
    x = x + dropout(conv_module(norm_conv(x)))
    x = x + 0.5 * dropout(feed_forward(norm_ff(x)))
    x = norm_final(x)

with ``conv_module``: ``pointwise_conv1`` (dim -> 2 dim) -> GLU -> ``depthwise_conv`` (kernel
``kernel_size``, centred) -> ``norm`` (BatchNorm1d over valid frames, or LayerNorm) -> Swish ->
``pointwise_conv2``. Dropout is not applied to the attention probabilities nor to the
positional embedding (the fused kernel has no dropout).

A *streaming* Conformer (``chunk_size > 0``, as icefall's streaming Conformer and WeNet's U2):
each block's attention sees its own chunk of ``chunk_size`` frames and ``left_chunks`` chunks
before it (-1: all; the kernels' chunk mask, chunks counted from frame 0), and the depthwise
convolution is causal (``K - 1`` past frames, none ahead). No frame then depends on a frame
after the end of its chunk, so ``asrkit.recognizer.model_stream`` runs the network chunk by
chunk with caches and gives the very outputs of the whole-utterance network.

Parameters are ``layers.<k>.<torch name>`` for block k; Linear and pointwise/depthwise Conv1d
weights are stored for ``x @ W`` (``W [in, out]``, depthwise ``[K, dim]``) and mapped to torch's
layouts by :meth:`torch_names`.
"""

from __future__ import annotations

import math

import asrkit.ops as O
from asrkit.graph.init import glorot_uniform, uniform
from asrkit.layers.base import Layer, feature_size
from asrkit.layers.core import ACTIVATIONS, _activation, _activation_name
from asrkit.layers.spec import MAX_NUM_LAYERS, ConfigError, Key
from asrkit.ops.activations import glu, swish
from asrkit.ops.attention import mhsa, positional_encoding
from asrkit.ops.depthwise import depthwise_conv1d

LN_EPS = 1e-5
BN_EPS = 1e-5
MAX_CHUNK_FRAMES = 100_000   # chunk_size, left_chunks: beyond this only a typo reaches

# torch layouts of the 1x1 and depthwise Conv1d weights: [out, in, 1] and [C, 1, K]
_POINTWISE = (lambda W: W.T[:, :, None], lambda w: w[:, :, 0].T)
_DEPTHWISE = (lambda W: W.T[:, None, :], lambda w: w[:, 0, :].T)


def _linear(prefix, d_in, d_out):
    return [(f"{prefix}.W", (d_in, d_out), glorot_uniform()), (f"{prefix}.b", (d_out,), 0.0)]


def _norm(prefix, dim):
    return [(f"{prefix}.weight", (dim,), 1.0), (f"{prefix}.bias", (dim,), 0.0)]


class _Encoder(Layer):
    """What the Transformer and the Conformer share: keys, sizes, the check that the input
    has ``dim`` features, the helpers that apply named parameters, torch names."""

    KEYS = {"dim": Key(int, min=1), "heads": Key(int, 4, min=1), "ff_dim": Key(int, 0, min=0),
            "num_layers": Key(int, 1, min=1, max=MAX_NUM_LAYERS),
            "dropout": Key(float, 0.0, interval="[0, 1)")}
    SIZE_KEYS = ("dim", "ff_dim")
    TRAINING_KEYS = ("dropout",)

    def __init__(self, dim: int, heads: int = 4, ff_dim: int = 0, num_layers: int = 1,
                 dropout: float = 0.0, name: str = ""):
        super().__init__(name or type(self).__name__.lower())
        if dim % heads:
            raise ValueError(f"{type(self).__name__}: heads={heads} does not divide dim={dim}")
        self.dim, self.heads, self.ff_dim = int(dim), int(heads), int(ff_dim or 4 * dim)
        self.num_layers, self.dropout = int(num_layers), float(dropout)

    @classmethod
    def check_spec(cls, spec, where):
        if spec["dim"] % spec["heads"]:
            raise ConfigError(f"{where}.heads: {spec['heads']} heads do not divide dim = "
                              f"{spec['dim']}")

    def build(self, x):
        D = feature_size(self, x)
        if D != self.dim:
            raise ConfigError(f"layer '{self.name}' ({type(self).__name__.lower()}, dim = "
                              f"{self.dim}) takes {self.dim}-dim input, got {D}: put a "
                              f"conv2d_subsampling or dense layer of dim {self.dim} before it")
        super().build(x)

    def _p(self, key):
        return self._params[key]

    def _lin(self, x, key):
        return O.times(x, self._p(f"{key}.W")) + self._p(f"{key}.b")

    def _ln(self, x, key):
        return O.layer_norm(x, self._p(f"{key}.weight"), self._p(f"{key}.bias"), LN_EPS)

    def _drop(self, x):
        return O.dropout(x, self.dropout) if self.dropout > 0 else x

    def torch_names(self):
        out = []
        for key in self._params:
            base, _, leaf = key.rpartition(".")
            if leaf == "W":
                layout = (_POINTWISE if base.endswith("pointwise_conv1") or
                          base.endswith("pointwise_conv2") else
                          _DEPTHWISE if base.endswith("depthwise_conv") else "T")
                out.append((key, f"{base}.weight", layout))
            elif leaf == "b":
                out.append((key, f"{base}.bias", "same"))
            else:
                out.append((key, key, "same"))
        return out

    # ONNX helpers on this layer's values
    def _onnx_lin(self, g, x, key):
        from asrkit.layers import onnx

        return onnx.linear(g, x, self.value(f"{key}.W"), self.value(f"{key}.b"),
                           f"{self.name}.{key}")

    def _onnx_ln(self, g, x, key):
        from asrkit.layers import onnx

        return onnx.layer_norm(g, x, self.value(f"{key}.weight"), self.value(f"{key}.bias"),
                               LN_EPS, f"{self.name}.{key}")


class TransformerEncoder(_Encoder):
    """Pre-norm Transformer encoder (see the module docstring): ``[T, B, dim] -> [T, B, dim]``.

    ``[[network.layers]] type = "transformer"``: ``dim``, ``heads``, ``ff_dim`` (0: 4 dim),
    ``num_layers``, ``dropout``, ``activation`` of the feed-forward (relu).
    """

    KEYS = {**_Encoder.KEYS, "activation": Key(str, "relu", choices=tuple(ACTIVATIONS))}

    def __init__(self, dim, heads=4, ff_dim=0, num_layers=1, dropout=0.0, activation="relu",
                 name=""):
        super().__init__(dim, heads, ff_dim, num_layers, dropout, name or "transformer")
        self.activation = _activation(activation)

    @classmethod
    def from_spec(cls, spec, name):
        return cls(spec["dim"], spec["heads"], spec["ff_dim"], spec["num_layers"],
                   spec["dropout"], spec["activation"], name=name)

    def param_specs(self, dim):
        D, F, specs = self.dim, self.ff_dim, []
        for k in range(self.num_layers):
            p = f"layers.{k}"
            specs += [(f"{p}.self_attn.in_proj_weight", (3 * D, D), glorot_uniform()),
                      (f"{p}.self_attn.in_proj_bias", (3 * D,), 0.0),
                      (f"{p}.self_attn.out_proj.weight", (D, D), glorot_uniform()),
                      (f"{p}.self_attn.out_proj.bias", (D,), 0.0),
                      *_linear(f"{p}.linear1", D, F), *_linear(f"{p}.linear2", F, D),
                      *_norm(f"{p}.norm1", D), *_norm(f"{p}.norm2", D)]
        return specs + _norm("norm", D), D

    def _attention(self, x, p):
        a = f"{p}.self_attn"
        return mhsa(x, self._p(f"{a}.in_proj_weight"), self._p(f"{a}.in_proj_bias"),
                    self._p(f"{a}.out_proj.weight"), self._p(f"{a}.out_proj.bias"), self.heads)

    def forward(self, x):
        x = self._drop(positional_encoding(x, math.sqrt(self.dim)))
        act = self.activation or (lambda h: h)
        for k in range(self.num_layers):
            p = f"layers.{k}"
            x = x + self._drop(self._attention(self._ln(x, f"{p}.norm1"), p))
            h = self._drop(act(self._lin(self._ln(x, f"{p}.norm2"), f"{p}.linear1")))
            x = x + self._drop(self._lin(h, f"{p}.linear2"))
        return self._ln(x, "norm")

    def onnx(self, g, s):
        from asrkit.layers import onnx

        s = onnx.abs_pos_encoding(g, s, math.sqrt(self.dim))
        for k in range(self.num_layers):
            p = f"layers.{k}"
            a = f"{p}.self_attn"
            h = s.with_x(self._onnx_ln(g, s.x, f"{p}.norm1"), self.dim)
            h = onnx.mhsa(g, h, self.heads, self.value(f"{a}.in_proj_weight"),
                          self.value(f"{a}.in_proj_bias"), self.value(f"{a}.out_proj.weight"),
                          self.value(f"{a}.out_proj.bias"), f"{self.name}.{a}")
            x = g.op("Add", [s.x, h.x])
            h = self._onnx_lin(g, self._onnx_ln(g, x, f"{p}.norm2"), f"{p}.linear1")
            h = onnx.activation(g, h, _activation_name(self.activation))
            s = s.with_x(g.op("Add", [x, self._onnx_lin(g, h, f"{p}.linear2")]), self.dim)
        return s.with_x(self._onnx_ln(g, s.x, "norm"), self.dim)


class ConformerEncoder(_Encoder):
    """Conformer encoder (see the module docstring): ``[T, B, dim] -> [T, B, dim]``.

    ``[[network.layers]] type = "conformer"``: ``dim``, ``heads``, ``ff_dim`` (0: 4 dim),
    ``num_layers``, ``dropout``, ``kernel_size`` (odd; 31 as ESPnet/icefall), ``conv_norm``
    (``"batch"``, as they do, or ``"layer"``); streaming (module docstring): ``chunk_size``
    (frames of this layer's input per attention chunk; 0: whole-utterance attention and a
    centred convolution) and ``left_chunks`` (chunks of left context; -1: all).
    """

    KEYS = {**_Encoder.KEYS, "kernel_size": Key(int, 31, min=1, max=1023),
            "conv_norm": Key(str, "batch", choices=("batch", "layer")),
            "chunk_size": Key(int, 0, min=0, max=MAX_CHUNK_FRAMES),
            "left_chunks": Key(int, -1, min=-1, max=MAX_CHUNK_FRAMES)}

    def __init__(self, dim, heads=4, ff_dim=0, num_layers=1, dropout=0.0, kernel_size=31,
                 conv_norm="batch", name="", chunk_size=0, left_chunks=-1):
        super().__init__(dim, heads, ff_dim, num_layers, dropout, name or "conformer")
        if kernel_size % 2 == 0:
            raise ValueError(f"conformer: kernel_size={kernel_size} must be odd")
        if chunk_size < 0 or left_chunks < -1 or (left_chunks != -1 and not chunk_size):
            raise ValueError(f"conformer: chunk_size={chunk_size} must be >= 0 and "
                             f"left_chunks={left_chunks} >= -1 (and -1 without a chunk_size)")
        self.kernel_size, self.conv_norm = int(kernel_size), conv_norm
        self.chunk_size, self.left_chunks = int(chunk_size), int(left_chunks)

    @property
    def streaming(self) -> bool:
        """Chunked attention and a causal convolution (``chunk_size > 0``)."""
        return self.chunk_size > 0

    @classmethod
    def check_spec(cls, spec, where):
        super().check_spec(spec, where)
        if spec["kernel_size"] % 2 == 0:
            raise ConfigError(f"{where}.kernel_size: must be odd (a centred window), got "
                              f"{spec['kernel_size']}")
        if spec["left_chunks"] != -1 and not spec["chunk_size"]:
            raise ConfigError(f"{where}.left_chunks: {spec['left_chunks']} needs a "
                              f"chunk_size (> 0)")

    @classmethod
    def from_spec(cls, spec, name):
        return cls(spec["dim"], spec["heads"], spec["ff_dim"], spec["num_layers"],
                   spec["dropout"], spec["kernel_size"], spec["conv_norm"], name=name,
                   chunk_size=spec.get("chunk_size", 0), left_chunks=spec.get("left_chunks", -1))

    def _mask(self):
        """The ``mhsa`` mask options of this encoder."""
        if not self.streaming:
            return {}
        return {"chunk_size": self.chunk_size,
                "left_chunks": None if self.left_chunks < 0 else self.left_chunks}

    def param_specs(self, dim):
        D, F, K, H = self.dim, self.ff_dim, self.kernel_size, self.heads
        specs = []
        for k in range(self.num_layers):
            p = f"layers.{k}"
            a, c = f"{p}.self_attn", f"{p}.conv_module"
            specs += [*_norm(f"{p}.norm_ff_macaron", D),
                      *_linear(f"{p}.feed_forward_macaron.w_1", D, F),
                      *_linear(f"{p}.feed_forward_macaron.w_2", F, D),
                      *_norm(f"{p}.norm_mha", D),
                      (f"{a}.in_proj.weight", (3 * D, D), glorot_uniform()),
                      (f"{a}.in_proj.bias", (3 * D,), 0.0),
                      (f"{a}.out_proj.weight", (D, D), glorot_uniform()),
                      (f"{a}.out_proj.bias", (D,), 0.0),
                      (f"{a}.linear_pos.weight", (D, D), glorot_uniform()),
                      (f"{a}.pos_bias_u", (H, D // H), glorot_uniform()),
                      (f"{a}.pos_bias_v", (H, D // H), glorot_uniform()),
                      *_norm(f"{p}.norm_conv", D),
                      *_linear(f"{c}.pointwise_conv1", D, 2 * D),
                      (f"{c}.depthwise_conv.W", (K, D), uniform(1.0 / math.sqrt(K))),
                      (f"{c}.depthwise_conv.b", (D,), 0.0),
                      *_norm(f"{c}.norm", D)]
            if self.conv_norm == "batch":
                specs += [(f"{c}.norm.running_mean", (D,), 0.0, False),
                          (f"{c}.norm.running_var", (D,), 1.0, False)]
            specs += [*_linear(f"{c}.pointwise_conv2", D, D),
                      *_norm(f"{p}.norm_ff", D),
                      *_linear(f"{p}.feed_forward.w_1", D, F),
                      *_linear(f"{p}.feed_forward.w_2", F, D),
                      *_norm(f"{p}.norm_final", D)]
        return specs, D

    def _ff(self, x, key):
        return self._lin(self._drop(swish(self._lin(x, f"{key}.w_1"))), f"{key}.w_2")

    def _conv(self, x, c):
        h = glu(self._lin(x, f"{c}.pointwise_conv1"))
        h = depthwise_conv1d(h, self._p(f"{c}.depthwise_conv.W"),
                             padding="causal" if self.streaming else "same") + self._p(
            f"{c}.depthwise_conv.b")
        n = f"{c}.norm"
        if self.conv_norm == "batch":
            h = O.batch_norm(h, self._p(f"{n}.weight"), self._p(f"{n}.bias"),
                             self._p(f"{n}.running_mean"), self._p(f"{n}.running_var"), BN_EPS)
        else:
            h = self._ln(h, n)
        return self._lin(swish(h), f"{c}.pointwise_conv2")

    def forward(self, x):
        x = self._drop(x * math.sqrt(self.dim))
        for k in range(self.num_layers):
            p = f"layers.{k}"
            a = f"{p}.self_attn"
            x = x + 0.5 * self._drop(self._ff(self._ln(x, f"{p}.norm_ff_macaron"),
                                              f"{p}.feed_forward_macaron"))
            att = mhsa(self._ln(x, f"{p}.norm_mha"), self._p(f"{a}.in_proj.weight"),
                       self._p(f"{a}.in_proj.bias"), self._p(f"{a}.out_proj.weight"),
                       self._p(f"{a}.out_proj.bias"), self.heads,
                       w_pos=self._p(f"{a}.linear_pos.weight"),
                       pos_bias_u=self._p(f"{a}.pos_bias_u"), pos_bias_v=self._p(f"{a}.pos_bias_v"),
                       **self._mask())
            x = x + self._drop(att)
            x = x + self._drop(self._conv(self._ln(x, f"{p}.norm_conv"), f"{p}.conv_module"))
            x = x + 0.5 * self._drop(self._ff(self._ln(x, f"{p}.norm_ff"), f"{p}.feed_forward"))
            x = self._ln(x, f"{p}.norm_final")
        return x

    def _onnx_ff(self, g, x, key):
        from asrkit.layers import onnx

        h = onnx.activation(g, self._onnx_lin(g, x, f"{key}.w_1"), "swish")
        return self._onnx_lin(g, h, f"{key}.w_2")

    def _onnx_conv(self, g, s, c):
        from asrkit.layers import onnx

        h = onnx.glu(g, self._onnx_lin(g, s.x, f"{c}.pointwise_conv1"), f"{self.name}.{c}.glu")
        h = onnx.depthwise_conv(g, s.with_x(h, self.dim), self.value(f"{c}.depthwise_conv.W"),
                                self.value(f"{c}.depthwise_conv.b"),
                                self.kernel_size - 1 if self.streaming else
                                (self.kernel_size - 1) // 2, f"{self.name}.{c}.depthwise").x
        n = f"{c}.norm"
        if self.conv_norm == "batch":
            h = onnx.batch_norm_eval(g, h, self.value(f"{n}.weight"), self.value(f"{n}.bias"),
                                     self.value(f"{n}.running_mean"),
                                     self.value(f"{n}.running_var"), BN_EPS, f"{self.name}.{n}")
        else:
            h = self._onnx_ln(g, h, n)
        return self._onnx_lin(g, onnx.activation(g, h, "swish"), f"{c}.pointwise_conv2")

    def onnx(self, g, s):
        from asrkit.layers import onnx

        half = g.const(0.5, "float32")
        x = g.op("Mul", [s.x, g.const(math.sqrt(self.dim), "float32")], f"{self.name}.scaled")
        for k in range(self.num_layers):
            p = f"layers.{k}"
            a = f"{p}.self_attn"
            h = self._onnx_ff(g, self._onnx_ln(g, x, f"{p}.norm_ff_macaron"),
                              f"{p}.feed_forward_macaron")
            x = g.op("Add", [x, g.op("Mul", [h, half])])
            h = onnx.mhsa(g, s.with_x(self._onnx_ln(g, x, f"{p}.norm_mha"), self.dim),
                          self.heads, self.value(f"{a}.in_proj.weight"),
                          self.value(f"{a}.in_proj.bias"), self.value(f"{a}.out_proj.weight"),
                          self.value(f"{a}.out_proj.bias"), f"{self.name}.{a}",
                          w_pos=self.value(f"{a}.linear_pos.weight"),
                          pos_bias_u=self.value(f"{a}.pos_bias_u"),
                          pos_bias_v=self.value(f"{a}.pos_bias_v"), **self._mask())
            x = g.op("Add", [x, h.x])
            h = self._onnx_conv(g, s.with_x(self._onnx_ln(g, x, f"{p}.norm_conv"), self.dim),
                                f"{p}.conv_module")
            x = g.op("Add", [x, h])
            h = self._onnx_ff(g, self._onnx_ln(g, x, f"{p}.norm_ff"), f"{p}.feed_forward")
            x = g.op("Add", [x, g.op("Mul", [h, half])])
            x = self._onnx_ln(g, x, f"{p}.norm_final")
        return s.with_x(x, self.dim)
