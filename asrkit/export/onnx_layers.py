"""ONNX lowerings of the acoustic-network layers (``asrkit.config.acoustic_net``).

Each function takes a :class:`GraphBuilder`, the running :class:`Stream` (the current value
``[T, B, D]`` with its per-sequence lengths) and the layer's parameters, emits the nodes, and
returns the new stream. The lowerings keep asrkit's sequence semantics:

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

from asrkit.export.onnx_graph import GraphBuilder

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


def time_steps(g: GraphBuilder, x: str) -> str:
    """int64 [1]: the (dynamic) first dimension of ``x``."""
    return g.op("Shape", [x], "T", start=0, end=1)


def masks(g: GraphBuilder, s: Stream) -> tuple[str, str]:
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


def zero_padding(g: GraphBuilder, s: Stream) -> Stream:
    """The stream with frames past each length set to zero (a no-op when they already are)."""
    if s.zero_padding:
        return s
    return s.with_x(g.op("Mul", [s.x, masks(g, s)[1]], "masked"), s.dim, zero_padding=True)


def ceil_div_lengths(g: GraphBuilder, lengths: str, stride: int) -> str:
    """int64 [B]: ``ceil(lengths / stride)``."""
    if stride == 1:
        return lengths
    return g.op("Div", [g.op("Add", [lengths, g.const(stride - 1)]), g.const(stride)],
                "lengths")


# -- frame stacking / subsampling --------------------------------------------------------------
def stack_frames(g: GraphBuilder, s: Stream, size: int, stride: int) -> Stream:
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
def activation(g: GraphBuilder, x: str, name: str) -> str:
    """Apply asrkit's activation ``name`` (relu, tanh, sigmoid, gelu, elu, softplus, none)."""
    simple = {"relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid", "softplus": "Softplus"}
    if name == "none":
        return x
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
def dense(g: GraphBuilder, s: Stream, W: np.ndarray, b: np.ndarray, act: str, hint: str
          ) -> Stream:
    """``x @ W + b`` then the activation; ``W [D, O]``, ``b [O]``."""
    y = g.op("Add", [g.op("MatMul", [s.x, g.weight(W, f"{hint}.W")]), g.weight(b, f"{hint}.b")],
             hint)
    return s.with_x(activation(g, y, act), W.shape[1])


def tdnn(g: GraphBuilder, s: Stream, W: np.ndarray, b: np.ndarray, dilation: int, stride: int,
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


def lstm_layer(g: GraphBuilder, s: Stream, directions: list[dict], hint: str) -> Stream:
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


def _lstmp_body(g: GraphBuilder, w_hh: np.ndarray, w_hr: np.ndarray, hint: str):
    """The Scan body of one projected LSTM step (torch's LSTM with ``proj_size``)."""
    from onnx import TensorProto, helper

    H, P = w_hr.shape[1], w_hr.shape[0]
    body = GraphBuilder(parent=g)
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


def lstmp_direction(g: GraphBuilder, s: Stream, d: dict, reverse: bool, hint: str) -> str:
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


def lstmp_layer(g: GraphBuilder, s: Stream, directions: list[dict], hint: str) -> Stream:
    """One (bi)directional projected LSTM layer; output ``[T, B, nd*P]`` (forward first)."""
    ys = [lstmp_direction(g, s, d, reverse=k == 1, hint=f"{hint}{'_reverse' if k else ''}")
          for k, d in enumerate(directions)]
    P = directions[0]["w_hr"].shape[0]
    y = ys[0] if len(ys) == 1 else g.op("Concat", ys, hint, axis=2)
    return s.with_x(y, P * len(ys), zero_padding=True)
