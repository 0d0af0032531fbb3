"""ONNX lowerings the layers' ``onnx`` methods are written with (``asrkit.export`` drives them).

Each function takes a graph builder (``asrkit.export.onnx_graph.GraphBuilder``: ``op``,
``weight``, ``const``, ``fresh``), the running :class:`Stream` (the current value ``[T, B, D]``
with its per-sequence lengths) and weights, emits the nodes, and returns the new stream. The
lowerings keep asrkit's sequence semantics:

- frames past a sequence's length are zeros wherever a later op reads across time (frame
  stacking, TDNN convolution), exactly as asrkit's executor zeroes padding after every op;
- LSTMs stop at each sequence's own length (``sequence_lens``) and the backward direction starts
  at each sequence's own last frame;
- lengths follow asrkit's rules (``ceil(L / stride)`` for subsampling and strided TDNNs).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

# torch/asrkit gate blocks are i, f, g, o; ONNX's LSTM wants i, o, f, c
_ONNX_GATES = (0, 3, 1, 2)


class ExportError(ValueError):
    """A model that cannot be written as ONNX; the message names the layer or option at fault."""


@dataclasses.dataclass
class Stream:
    """The value flowing through the network: ``x`` [T, B, dim] float32, ``lengths`` int64 [B].

    ``zero_padding``: frames past each length are known to be zeros. ``masks`` caches the
    ``(bool [T, B, 1], float [T, B, 1])`` validity masks of this time axis.
    """

    x: str
    lengths: str
    dim: int
    zero_padding: bool = False
    masks: tuple[str, str] | None = None

    def with_x(self, x: str, dim: int, zero_padding: bool = False) -> Stream:
        """The same time axis with a new value (masks stay valid)."""
        return Stream(x, self.lengths, dim, zero_padding, self.masks)


def time_steps(g, x: str) -> str:
    """int64 [1]: the (dynamic) first dimension of ``x``."""
    return g.op("Shape", [x], "T", start=0, end=1)


def masks(g, s: Stream) -> tuple[str, str]:
    """``(bool [T, B, 1], float32 [T, B, 1])``: frame t of sequence b is within its length."""
    if s.masks is None:
        from onnx import TensorProto

        T = g.op("Squeeze", [time_steps(g, s.x), g.const([0])], "T_scalar")
        t = g.op("Range", [g.const(0), T, g.const(1)], "t")
        valid = g.op("Less", [g.op("Unsqueeze", [t, g.const([1])]),
                              g.op("Unsqueeze", [s.lengths, g.const([0])])], "valid")
        valid = g.op("Unsqueeze", [valid, g.const([2])], "valid")
        s.masks = (valid, g.op("Cast", [valid], "mask", to=TensorProto.FLOAT))
    return s.masks


def zero_padding(g, s: Stream) -> Stream:
    """The stream with frames past each length set to zero (a no-op when they already are)."""
    if s.zero_padding:
        return s
    return s.with_x(g.op("Mul", [s.x, masks(g, s)[1]], "masked"), s.dim, zero_padding=True)


def ceil_div_lengths(g, lengths: str, stride: int) -> str:
    """int64 [B]: ``ceil(lengths / stride)``."""
    if stride == 1:
        return lengths
    return g.op("Div", [g.op("Add", [lengths, g.const(stride - 1)]), g.const(stride)],
                "lengths")


# -- frame stacking / subsampling --------------------------------------------------------------
def stack_frames(g, s: Stream, size: int, stride: int) -> Stream:
    """Low frame rate: output frame t' concatenates input frames ``t'*stride .. +size-1``.

    ``[T, B, D] -> [ceil(T / stride), B, size * D]``; frames past a sequence's end read zeros.
    """
    if size == 1 and stride == 1:
        return s
    s = zero_padding(g, s)
    T = time_steps(g, s.x)
    T_out = g.op("Div", [g.op("Add", [T, g.const([stride - 1])]), g.const([stride])], "T_out")
    # enough zero frames after the end for every tap of the last output frame
    xp = g.op("Pad", [s.x, g.const([0, 0, 0, size + stride, 0, 0])], "padded")
    last = g.op("Mul", [g.op("Sub", [T_out, g.const([1])]), g.const([stride])], "last_start")
    taps = []
    for k in range(size):
        end = g.op("Add", [last, g.const([k + 1])], "end")
        taps.append(g.op("Slice", [xp, g.const([k]), end, g.const([0]), g.const([stride])],
                         f"tap{k}"))
    x = taps[0] if size == 1 else g.op("Concat", taps, "stacked", axis=2)
    # output frames past ceil(L / stride) read only frames past L, which are zeros
    return Stream(x, ceil_div_lengths(g, s.lengths, stride), s.dim * size, zero_padding=True,
                  masks=s.masks if stride == 1 else None)


# -- activations -------------------------------------------------------------------------------
def activation(g, x: str, name: str) -> str:
    """Apply asrkit's activation ``name`` (relu, tanh, sigmoid, gelu, elu, softplus, swish,
    none)."""
    simple = {"relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid", "softplus": "Softplus"}
    if name == "none":
        return x
    if name == "swish":
        return g.op("Mul", [x, g.op("Sigmoid", [x])], "swish")
    if name in simple:
        return g.op(simple[name], [x], name)
    if name == "elu":
        return g.op("Elu", [x], "elu", alpha=1.0)
    if name == "gelu":
        # exact (erf) GELU as asrkit and torch.nn.GELU(); the Gelu op only exists from opset 20
        cdf = g.op("Erf", [g.op("Div", [x, g.const(math.sqrt(2.0), np.float32)])])
        cdf = g.op("Mul", [g.op("Add", [cdf, g.const(1.0, np.float32)]),
                           g.const(0.5, np.float32)])
        return g.op("Mul", [x, cdf], "gelu")
    raise ExportError(f"activation {name!r} has no ONNX mapping")


# -- dense and TDNN ----------------------------------------------------------------------------
def dense(g, s: Stream, W: np.ndarray, b: np.ndarray, act: str, hint: str
          ) -> Stream:
    """``x @ W + b`` then the activation; ``W [D, O]``, ``b [O]``."""
    y = g.op("Add", [g.op("MatMul", [s.x, g.weight(W, f"{hint}.W")]), g.weight(b, f"{hint}.b")],
             hint)
    return s.with_x(activation(g, y, act), W.shape[1])


def tdnn(g, s: Stream, W: np.ndarray, b: np.ndarray, dilation: int, stride: int,
         act: str, hint: str) -> Stream:
    """Centred ('same') 1-D convolution over time, ``W [K, D, O]``, then bias and activation.

    Output frame t' reads input frames ``t'*stride - left + k*dilation`` with
    ``left = dilation*(K-1)//2``; ``T' = ceil(T / stride)`` as in ``asrkit.ops.conv1d``.
    """
    K, D, O = W.shape
    span = dilation * (K - 1)
    left = span // 2
    s = zero_padding(g, s)
    xc = g.op("Transpose", [s.x], "ncw", perm=[1, 2, 0])  # [B, D, T]
    y = g.op("Conv", [xc, g.weight(W.transpose(2, 1, 0), f"{hint}.W"), g.weight(b, f"{hint}.b")],
             hint, kernel_shape=[K], dilations=[dilation], strides=[stride],
             pads=[left, span - left])
    y = g.op("Transpose", [y], "tbd", perm=[2, 0, 1])
    y = activation(g, y, act)
    if stride == 1:
        return s.with_x(y, O)
    return Stream(y, ceil_div_lengths(g, s.lengths, stride), O)


# -- LSTM --------------------------------------------------------------------------------------
def _onnx_gates(w: np.ndarray, H: int) -> np.ndarray:
    """Reorder the 4 gate blocks (axis 0) from i, f, g, o to ONNX's i, o, f, c."""
    return np.concatenate([w[k * H:(k + 1) * H] for k in _ONNX_GATES], axis=0)


def lstm_layer(g, s: Stream, directions: list[dict], hint: str) -> Stream:
    """One (bi)directional LSTM layer through ONNX's ``LSTM`` op.

    ``directions``: one or two dicts (forward, then backward) of torch-layout weights
    ``w_ih [4H, I]``, ``w_hh [4H, H]``, ``b_ih``, ``b_hh [4H]``. Output ``[T, B, nd*H]`` with the
    forward direction first, as asrkit splices them.
    """
    from onnx import TensorProto

    H = directions[0]["w_hh"].shape[1]
    W = np.stack([_onnx_gates(d["w_ih"], H) for d in directions])
    R = np.stack([_onnx_gates(d["w_hh"], H) for d in directions])
    B = np.stack([np.concatenate([_onnx_gates(d["b_ih"], H), _onnx_gates(d["b_hh"], H)])
                  for d in directions])
    lens32 = g.op("Cast", [s.lengths], "lengths_i32", to=TensorProto.INT32)
    nd = len(directions)
    y = g.op("LSTM", [s.x, g.weight(W, f"{hint}.W"), g.weight(R, f"{hint}.R"),
                      g.weight(B, f"{hint}.B"), lens32], hint, hidden_size=H,
             direction="bidirectional" if nd == 2 else "forward")
    # Y [T, nd, B, H] -> [T, B, nd, H] -> [T, B, nd*H]
    y = g.op("Transpose", [y], hint, perm=[0, 2, 1, 3])
    y = g.op("Reshape", [y, g.const([0, 0, -1])], hint)
    # onnxruntime zeroes Y past sequence_lens, but the ONNX spec does not promise it: treat the
    # padding as unknown, so a later conv or stack masks it
    return s.with_x(y, nd * H)


def lstm_step(g, x: str, h0: str, c0: str, w_ih: np.ndarray, w_hh: np.ndarray,
              b_ih: np.ndarray, b_hh: np.ndarray, hint: str) -> tuple[str, str, str]:
    """One forward LSTM layer over ``x`` ``[T, B, I]`` from the state ``h0``, ``c0`` ``[1, B,
    H]`` (torch-layout weights as :func:`lstm_layer`); returns ``(y [T, B, H], h_n [1, B, H],
    c_n [1, B, H])`` (a transducer's prediction network runs it with T = 1)."""
    H = w_hh.shape[1]
    W = _onnx_gates(w_ih, H)[None]
    R = _onnx_gates(w_hh, H)[None]
    B = np.concatenate([_onnx_gates(b_ih, H), _onnx_gates(b_hh, H)])[None]
    y, h_n, c_n = g.op("LSTM", [x, g.weight(W, f"{hint}.W"), g.weight(R, f"{hint}.R"),
                                g.weight(B, f"{hint}.B"), "", h0, c0], hint, outputs=3,
                       hidden_size=H, direction="forward")
    return g.op("Squeeze", [y, g.const([1])], hint), h_n, c_n


def _lstmp_body(g, w_hh: np.ndarray, w_hr: np.ndarray, hint: str):
    """The Scan body of one projected LSTM step (torch's LSTM with ``proj_size``)."""
    from onnx import TensorProto, helper

    H, P = w_hr.shape[1], w_hr.shape[0]
    body = type(g)(parent=g)
    h_in, c_in, xw_t, m_t = (body.fresh(f"{hint}.{n}") for n in ("h", "c", "xw", "valid"))
    gates = body.op("Add", [xw_t, body.op("MatMul", [h_in, g.weight(w_hh.T, f"{hint}.R")])],
                    "gates")
    i, f, c_hat, o = body.op("Split", [gates, g.const([H] * 4)], "gate", outputs=4, axis=1)
    i, f, o = (body.op("Sigmoid", [v]) for v in (i, f, o))
    c_new = body.op("Add", [body.op("Mul", [f, c_in]),
                            body.op("Mul", [i, body.op("Tanh", [c_hat])])], "c_new")
    h_new = body.op("MatMul", [body.op("Mul", [o, body.op("Tanh", [c_new])]),
                               g.weight(w_hr.T, f"{hint}.proj")], "h_new")
    # past a sequence's end the state is held and the output is zero
    h_out = body.op("Where", [m_t, h_new, h_in], "h_out")
    c_out = body.op("Where", [m_t, c_new, c_in], "c_out")
    y_t = body.op("Where", [m_t, h_new, g.const(0.0, np.float32)], "y_t")
    f32 = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info(h_in, f32, ["B", P]),
              helper.make_tensor_value_info(c_in, f32, ["B", H]),
              helper.make_tensor_value_info(xw_t, f32, ["B", 4 * H]),
              helper.make_tensor_value_info(m_t, TensorProto.BOOL, ["B", 1])]
    outputs = [helper.make_tensor_value_info(n, f32, None) for n in (h_out, c_out, y_t)]
    return body.make_graph(body.fresh(f"{hint}_step"), inputs, outputs)


def lstmp_direction(g, s: Stream, d: dict, reverse: bool, hint: str) -> str:
    """One projected LSTM direction as an ONNX ``Scan``; returns ``y [T, B, P]``.

    ONNX's LSTM op has no projection, so the recurrence is a Scan over time whose body does one
    step (gates, cell, ``h = (o * tanh(c)) @ w_hr.T``). The input product ``x @ w_ih.T + b`` is
    one MatMul outside the loop. The backward direction reverses each sequence within its own
    length (``ReverseSequence``), runs forwards and reverses the outputs back.
    """
    P, H = d["w_hr"].shape
    xw = g.op("Add", [g.op("MatMul", [s.x, g.weight(d["w_ih"].T, f"{hint}.W")]),
                      g.weight(d["b_ih"] + d["b_hh"], f"{hint}.B")], f"{hint}.xw")
    if reverse:
        xw = g.op("ReverseSequence", [xw, s.lengths], f"{hint}.xw_rev", batch_axis=1,
                  time_axis=0)
    valid, _ = masks(g, s)  # symmetric under per-sequence reversal
    batch = g.op("Shape", [s.x], "B", start=1, end=2)
    zeros = {}
    for n, size in (("h0", P), ("c0", H)):
        shape = g.op("Concat", [batch, g.const([size])], f"{hint}.{n}_shape", axis=0)
        zeros[n] = g.op("ConstantOfShape", [shape], f"{hint}.{n}",
                        value=_float_tensor(0.0))
    body = _lstmp_body(g, d["w_hh"], d["w_hr"], hint)
    _, _, y = g.op("Scan", [zeros["h0"], zeros["c0"], xw, valid], f"{hint}.scan", outputs=3,
                   body=body, num_scan_inputs=2)
    if reverse:
        y = g.op("ReverseSequence", [y, s.lengths], f"{hint}.y", batch_axis=1, time_axis=0)
    return y


def _float_tensor(value: float):
    from onnx import TensorProto, helper

    return helper.make_tensor("value", TensorProto.FLOAT, [1], [value])


def lstmp_layer(g, s: Stream, directions: list[dict], hint: str) -> Stream:
    """One (bi)directional projected LSTM layer; output ``[T, B, nd*P]`` (forward first)."""
    ys = [lstmp_direction(g, s, d, reverse=k == 1, hint=f"{hint}{'_reverse' if k else ''}")
          for k, d in enumerate(directions)]
    P = directions[0]["w_hr"].shape[0]
    y = ys[0] if len(ys) == 1 else g.op("Concat", ys, hint, axis=2)
    return s.with_x(y, P * len(ys), zero_padding=True)


# -- Transformer and Conformer pieces ----------------------------------------------------------
def linear(g, x: str, W: np.ndarray, b: np.ndarray | None, hint: str) -> str:
    """``x @ W (+ b)`` for asrkit's ``W [in, out]``."""
    y = g.op("MatMul", [x, g.weight(W, f"{hint}.W")], hint)
    return y if b is None else g.op("Add", [y, g.weight(b, f"{hint}.b")], hint)


def layer_norm(g, x: str, weight: np.ndarray, bias: np.ndarray, eps: float, hint: str) -> str:
    """LayerNormalization over the last axis (opset 17)."""
    return g.op("LayerNormalization", [x, g.weight(weight, f"{hint}.weight"),
                                       g.weight(bias, f"{hint}.bias")], hint, axis=-1,
                epsilon=float(eps))


def batch_norm_eval(g, x: str, weight, bias, mean, var, eps: float, hint: str) -> str:
    """Batch normalisation with running statistics, folded into one scale and shift."""
    scale = (np.asarray(weight, np.float64) / np.sqrt(np.asarray(var, np.float64) + eps))
    shift = np.asarray(bias, np.float64) - np.asarray(mean, np.float64) * scale
    return g.op("Add", [g.op("Mul", [x, g.weight(scale.astype(np.float32), f"{hint}.scale")]),
                        g.weight(shift.astype(np.float32), f"{hint}.shift")], hint)


def glu(g, x: str, hint: str) -> str:
    """``a * sigmoid(b)`` of the two halves of the last axis."""
    a, b = g.op("Split", [x], f"{hint}.half", outputs=2, axis=-1)
    return g.op("Mul", [a, g.op("Sigmoid", [b])], hint)


def depthwise_conv(g, s: Stream, W: np.ndarray, b: np.ndarray | None, left: int, hint: str
                   ) -> Stream:
    """Depthwise convolution over time, ``W [K, C]`` (``asrkit.ops.depthwise_conv1d``): a
    grouped ``Conv`` on ``[B, C, T]`` with ``left`` frames of zeros before, ``K-1-left`` after;
    frames past each length read zeros."""
    K, C = W.shape
    s = zero_padding(g, s)
    xc = g.op("Transpose", [s.x], "ncw", perm=[1, 2, 0])
    inputs = [xc, g.weight(W.T[:, None, :], f"{hint}.W")]
    if b is not None:
        inputs.append(g.weight(b, f"{hint}.b"))
    # one zero frame beyond the window keeps Conv's input longer than K even when T is 0
    # (it refuses shorter inputs); the extra output frame is sliced off
    inputs[0] = g.op("Pad", [xc, g.const([0, 0, left, 0, 0, K - left])], f"{hint}.padded")
    y = g.op("Conv", inputs, hint, kernel_shape=[K], group=C)
    y = g.op("Slice", [y, g.const([0]), time_steps(g, s.x), g.const([2])], hint)
    return s.with_x(g.op("Transpose", [y], "tbd", perm=[2, 0, 1]), C)


def _sinusoids(g, positions: str, D: int) -> str:
    """``[N, D]`` sin/cos table (``asrkit.ops.attention``'s) for float positions ``[N]``."""
    div = np.exp(np.arange(0, D, 2, dtype=np.float32) * np.float32(-(math.log(10000.0) / D)))
    arg = g.op("Mul", [g.op("Unsqueeze", [positions, g.const([1])]),
                       g.weight(div, "pe_div")], "pe_arg")  # [N, ceil(D/2)]
    pair = [g.op("Unsqueeze", [g.op(op, [arg]), g.const([2])]) for op in ("Sin", "Cos")]
    pe = g.op("Reshape", [g.op("Concat", pair, "pe", axis=2), g.const([0, 2 * len(div)])],
              "pe")  # (not -1: N may be 0)
    return g.op("Slice", [pe, g.const([0]), g.const([D]), g.const([1])], "pe") if D % 2 else pe


def _time_float(g, x: str) -> str:
    """float32 scalar: T of ``x``."""
    from onnx import TensorProto

    T = g.op("Squeeze", [time_steps(g, x), g.const([0])], "T_scalar")
    return g.op("Cast", [T], "T_float", to=TensorProto.FLOAT)


def abs_pos_encoding(g, s: Stream, scale: float) -> Stream:
    """``x * scale + PE[t]`` (``asrkit.ops.positional_encoding``)."""
    T = _time_float(g, s.x)
    t = g.op("Range", [g.const(0.0, np.float32), T, g.const(1.0, np.float32)], "pe_t")
    pe = g.op("Unsqueeze", [_sinusoids(g, t, s.dim), g.const([1])], "pe")  # [T, 1, D]
    y = g.op("Add", [g.op("Mul", [s.x, g.const(scale, np.float32)]), pe], "pos_enc")
    return s.with_x(y, s.dim)


def rel_pos_embedding(g, x: str, D: int) -> str:
    """``[2T-1, D]``: ``asrkit.ops.attention.rel_pos_embedding`` of ``x``'s T."""
    T = _time_float(g, x)
    one = g.const(1.0, np.float32)
    pos = g.op("Range", [g.op("Sub", [T, one]), g.op("Neg", [T]), g.op("Neg", [one])], "rel_t")
    return _sinusoids(g, pos, D)


def mhsa(g, s: Stream, num_heads: int, w_in, b_in, w_out, b_out, hint: str, w_pos=None,
         pos_bias_u=None, pos_bias_v=None, chunk_size=None, left_chunks=None) -> Stream:
    """Multi-head self-attention (``asrkit.ops.mhsa``) with key padding from the lengths and,
    given ``w_pos``, ESPnet's relative positions (``rel_shift`` as a ``GatherElements``);
    ``chunk_size``/``left_chunks``: the kernels' chunk mask."""
    D = s.dim
    H, dk = num_heads, s.dim // num_heads
    s = zero_padding(g, s)
    qkv = g.op("Add", [g.op("MatMul", [s.x, g.weight(w_in.T, f"{hint}.w_in")]),
                       g.weight(b_in, f"{hint}.b_in")], f"{hint}.qkv")
    heads = []
    for part in g.op("Split", [qkv], f"{hint}.qkv", outputs=3, axis=2):
        h = g.op("Reshape", [part, g.const([0, 0, H, dk])], f"{hint}.heads")
        heads.append(g.op("Transpose", [h], f"{hint}.bhtd", perm=[1, 2, 0, 3]))  # [B,H,T,dk]
    q, k, v = heads
    kt = g.op("Transpose", [k], f"{hint}.kt", perm=[0, 1, 3, 2])
    scale = g.const(1.0 / math.sqrt(dk), np.float32)
    if w_pos is None:
        scores = g.op("MatMul", [q, kt], f"{hint}.scores")
    else:
        u = g.weight(np.asarray(pos_bias_u).reshape(1, H, 1, dk), f"{hint}.pos_bias_u")
        vb = g.weight(np.asarray(pos_bias_v).reshape(1, H, 1, dk), f"{hint}.pos_bias_v")
        ac = g.op("MatMul", [g.op("Add", [q, u]), kt], f"{hint}.ac")
        pos = g.op("MatMul", [rel_pos_embedding(g, s.x, D), g.weight(w_pos.T, f"{hint}.w_pos")])
        pos = g.op("Transpose", [g.op("Reshape", [pos, g.const([0, H, dk])])], f"{hint}.pos",
                   perm=[1, 2, 0])  # [H, dk, 2T-1]
        bd = g.op("MatMul", [g.op("Add", [q, vb]), pos], f"{hint}.bd")  # [B, H, T, 2T-1]
        # out[i, j] = bd[i, T-1-i+j]
        T = g.op("Squeeze", [time_steps(g, s.x), g.const([0])], "T_scalar")
        r = g.op("Range", [g.const(0), T, g.const(1)], "t")
        idx = g.op("Add", [g.op("Sub", [g.op("Sub", [T, g.const(1)]),
                                        g.op("Unsqueeze", [r, g.const([1])])]),
                           g.op("Unsqueeze", [r, g.const([0])])], f"{hint}.rel_idx")
        shape = g.op("Concat", [g.op("Shape", [bd], start=0, end=3), time_steps(g, s.x)],
                     f"{hint}.shape", axis=0)
        idx = g.op("Expand", [idx, shape], f"{hint}.rel_idx")
        scores = g.op("Add", [ac, g.op("GatherElements", [bd, idx], f"{hint}.bd", axis=3)],
                      f"{hint}.scores")
    scores = g.op("Mul", [scores, scale], f"{hint}.scores")
    # keys past each length: a large finite negative (an all-padding row stays finite)
    T = g.op("Squeeze", [time_steps(g, s.x), g.const([0])], "T_scalar")
    keys = g.op("Less", [g.op("Unsqueeze", [g.op("Range", [g.const(0), T, g.const(1)]),
                                            g.const([0])]),
                         g.op("Unsqueeze", [s.lengths, g.const([1])])], f"{hint}.keys")
    keys = g.op("Unsqueeze", [keys, g.const([1, 2])], f"{hint}.keys")  # [B, 1, 1, T]
    if chunk_size is not None:  # key j's chunk within [i's chunk - left_chunks, i's chunk]
        chunk = g.op("Div", [g.op("Range", [g.const(0), T, g.const(1)]), g.const(chunk_size)],
                     f"{hint}.chunk")
        ci = g.op("Unsqueeze", [chunk, g.const([1])], f"{hint}.chunk_i")   # [T, 1]
        cj = g.op("Unsqueeze", [chunk, g.const([0])], f"{hint}.chunk_j")   # [1, T]
        seen = g.op("Not", [g.op("Greater", [cj, ci])], f"{hint}.chunk_mask")
        if left_chunks is not None:
            seen = g.op("And", [seen, g.op("Not", [g.op("Less", [
                cj, g.op("Sub", [ci, g.const(left_chunks)])])])], f"{hint}.chunk_mask")
        keys = g.op("And", [keys, seen], f"{hint}.keys")  # [B, 1, T, T]
    scores = g.op("Where", [keys, scores, g.const(-1e30, np.float32)], f"{hint}.masked")
    probs = g.op("Softmax", [scores], f"{hint}.probs", axis=-1)
    o = g.op("Transpose", [g.op("MatMul", [probs, v])], f"{hint}.tbhd", perm=[2, 0, 1, 3])
    o = g.op("Reshape", [o, g.const([0, 0, D])], f"{hint}.o")
    y = g.op("Add", [g.op("MatMul", [o, g.weight(w_out.T, f"{hint}.w_out")]),
                     g.weight(b_out, f"{hint}.b_out")], hint)
    return s.with_x(y, D)


def conv2d_relu(g, x: str, W: np.ndarray, b: np.ndarray, stride: tuple, hint: str) -> str:
    """Valid ``Conv`` + ``Relu`` on ``[B, C, T, F]`` for asrkit's ``W [Kt, Kf, C, O]``."""
    y = g.op("Conv", [x, g.weight(W.transpose(3, 2, 0, 1), f"{hint}.W"),
                      g.weight(b, f"{hint}.b")], hint, kernel_shape=list(W.shape[:2]),
             strides=list(stride))
    return g.op("Relu", [y], hint)


def valid_lengths(g, lengths: str, K: int, stride: int) -> str:
    """int64 [B]: ``max((L - K) // stride + 1, 0)``."""
    n = g.op("Div", [g.op("Add", [lengths, g.const(stride - K)]), g.const(stride)], "lengths")
    # Div truncates toward zero: L < K can give 0 where floor gives -1; clamp both to >= 0
    n = g.op("Where", [g.op("Less", [lengths, g.const(K)]), g.const(0), n], "lengths")
    return g.op("Max", [n, g.const(0)], "lengths")
