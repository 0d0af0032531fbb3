"""Small graphs exercising every primitive, shared by the gradient and planner tests.

Each case builds ``(node, feeds, options)`` from a seeded generator: tiny shapes, sequences with
padding (lengths 4, 2, 3 in a T = 4 batch), values kept away from each op's kinks and poles.
"""

from __future__ import annotations

import numpy as np

import asrkit.ops as O
from asrkit.graph import input_variable, parameter

T, B = 4, 3
LENGTHS = np.array([4, 2, 3], np.int32)


def seq(rng, D=3, name="x", positive=False, dims=None):
    """A float sequence input ``[T, B, D]`` and its feed (padded, with LENGTHS)."""
    shape = (D,) if dims is None else tuple(dims)
    x = input_variable(shape, name=name)
    data = rng.standard_normal((T, B) + shape)
    if positive:
        data = np.abs(data) + 0.5
    return x, (data, LENGTHS.copy())


def labels_seq(rng, C, name="y"):
    """An int label sequence aligned with ``seq`` (same lengths)."""
    y = input_variable((), dtype=np.int32, name=name)
    return y, (rng.integers(0, C, (T, B)).astype(np.int32), LENGTHS.copy())


def param(rng, shape, name="W", positive=False):
    """A float64-initialised parameter with seeded values."""
    v = rng.standard_normal(shape)
    if positive:
        v = np.abs(v) + 0.5
    return parameter(shape, init=v, name=name)


def _unary(op, positive=False, **kw):
    def build(rng):
        x, fx = seq(rng, positive=positive)
        return op(x, **kw), {x: fx}, {}
    return build


def _binary(op, positive_b=False):
    def build(rng):
        a, fa = seq(rng, name="a")
        b = param(rng, (3,), "b", positive=positive_b)
        c, fc = seq(rng, name="c", positive=positive_b)
        return op(op(a, b), c), {a: fa, c: fc}, {}
    return build


def _times(rng):
    x, fx = seq(rng, D=3)
    return x @ param(rng, (3, 2)) + param(rng, (2,), "b"), {x: fx}, {}


def _matmul(rng):
    a, fa = seq(rng, dims=(2, 3), name="a")
    return O.matmul(a, param(rng, (3, 4))), {a: fa}, {}


def _pow(rng):
    x, fx = seq(rng, positive=True)
    return O.pow(x, param(rng, (3,), "p")), {x: fx}, {}


def _reduce(op, axis=-1, keepdims=False):
    def build(rng):
        x, fx = seq(rng, dims=(2, 3))
        return op(x, axis=axis, keepdims=keepdims), {x: fx}, {}
    return build


def _all(op):
    def build(rng):
        x, fx = seq(rng)
        return op(O.tanh(x) + 0.5), {x: fx}, {}
    return build


def _reshape(rng):
    x, fx = seq(rng, dims=(2, 3))
    return O.tanh(O.reshape(x, (3, 2))), {x: fx}, {}


def _transpose(rng):
    x, fx = seq(rng, dims=(2, 3))
    return O.transpose(x) * param(rng, (3, 2)), {x: fx}, {}


def _getitem(rng):
    x, fx = seq(rng, D=5)
    return x[..., 1:4] * 2.0 + x[..., 0:1], {x: fx}, {}


def _splice(rng):
    a, fa = seq(rng, name="a")
    c, fc = seq(rng, D=2, name="c")
    return O.splice(a, O.tanh(c)), {a: fa, c: fc}, {}


def _stack(rng):
    a, fa = seq(rng, name="a")
    c, fc = seq(rng, name="c")
    return O.stack(a, c * 2.0, axis=0), {a: fa, c: fc}, {}


def _softmax(op, axis=-1):
    def build(rng):
        x, fx = seq(rng)
        return op(x, axis=axis), {x: fx}, {}
    return build


def _dropout(rng):
    x, fx = seq(rng)
    return O.dropout(x, 0.3) * 1.5, {x: fx}, {"train": True}


def _layer_norm(rng):
    x, fx = seq(rng, D=4)
    return O.layer_norm(x, param(rng, (4,), "g"), param(rng, (4,), "b")), {x: fx}, {}


def _batch_norm(train):
    def build(rng):
        x, fx = seq(rng, D=4)
        rm = parameter(4, init=0.1, name="rm", trainable=False)
        rv = parameter(4, init=1.5, name="rv", trainable=False)
        y = O.batch_norm(x, param(rng, (4,), "g"), param(rng, (4,), "b"), rm, rv)
        return y, {x: fx}, {"train": train}
    return build


def _conv(stride=1, dilation=1, padding="same"):
    def build(rng):
        x, fx = seq(rng, D=2)
        return O.conv1d(x, param(rng, (3, 2, 4)), stride, dilation, padding), {x: fx}, {}
    return build


def _pool(kind, size=2, stride=None, padding="valid"):
    def build(rng):
        x, fx = seq(rng, D=2)
        fn = O.max_pool1d if kind == "max" else O.avg_pool1d
        return fn(x, size, stride, padding), {x: fx}, {}
    return build


def _stack_frames(rng):
    x, fx = seq(rng, D=2)
    return O.stack_frames(x, 3, 2), {x: fx}, {}


def _subsample(rng):
    x, fx = seq(rng, D=2)
    return O.subsample_frames(x, 2, 1) * 3.0, {x: fx}, {}


def _splice_frames(rng):
    x, fx = seq(rng, D=2)
    return O.splice_frames(x, 1, 2), {x: fx}, {}


def _reverse(rng):
    x, fx = seq(rng)
    return O.sequence_reverse(x) * param(rng, (3,)), {x: fx}, {}


def _delay(op, k=1):
    def build(rng):
        x, fx = seq(rng)
        return op(x, param(rng, (3,), "h0"), time_step=k), {x: fx}, {}
    return build


def _seq_reduce(op):
    def build(rng):
        x, fx = seq(rng)
        return op(x), {x: fx}, {}
    return build


def _embedding(rng):
    ids = input_variable((), dtype=np.int32, name="ids")
    feed = (rng.integers(0, 5, (T, B)).astype(np.int32), LENGTHS.copy())
    return O.embedding(ids, param(rng, (5, 3), "E")), {ids: feed}, {}


def _lstm(proj=False, reverse=False, after_dense=False):
    def build(rng):
        x, fx = seq(rng, D=3)
        if after_dense:  # the LSTM's input then lives in a reusable slot: the regression
            x = x @ param(rng, (3, 3), "Wd") + 0.5
        H, P = 2, (2 if not proj else 1)
        s = 0.5
        w_ih = param(rng, (4 * H, 3)) * s
        w_hh = param(rng, (4 * H, P), "Whh") * s
        y = O.lstm(x, w_ih, w_hh, param(rng, (4 * H,), "bih"), param(rng, (4 * H,), "bhh"),
                   w_hr=param(rng, (P, H), "Whr") if proj else None,
                   h0=param(rng, (P,), "h0"), c0=param(rng, (H,), "c0"), reverse=reverse)
        return (y * 2.0 + 1.0 if after_dense else y), {n: fx for n in x.arguments}, {}
    return build


def _blstm(proj):
    def build(rng):
        x, fx = seq(rng, D=3)
        H, P = 2, (1 if proj else 2)
        dirs = [{"w_ih": param(rng, (4 * H, 3), "Wih") * 0.5,
                 "w_hh": param(rng, (4 * H, P), "Whh") * 0.5,
                 "b_ih": param(rng, (4 * H,), "bih"), "b_hh": param(rng, (4 * H,), "bhh"),
                 **({"w_hr": param(rng, (P, H), "Whr")} if proj else {})} for _ in range(2)]
        return O.blstm(x, *dirs, h0=param(rng, (P,), "h0"), c0=param(rng, (H,), "c0")), \
            {x: fx}, {}
    return build


def _recurrence(go_backwards):
    def build(rng):
        x, fx = seq(rng, D=3)
        W, U = param(rng, (3, 2), "W"), param(rng, (2, 2), "U")
        h0 = param(rng, (2,), "h0")
        y = O.recurrence(lambda h, xt: O.tanh(xt @ W + h @ U * 0.5), x, h0,
                         go_backwards=go_backwards)
        return y, {x: fx}, {}
    return build


def _ctc(rng):
    x, fx = seq(rng, D=4)
    y = input_variable((), dtype=np.int32, dynamic_axes=("labels", "batch"), name="labels")
    lab = np.array([[1, 2, 3], [2, 0, 0], [3, 3, 0]], np.int32).T  # [S, B]
    return O.ctc_loss(x, y), {x: fx, y: (lab, np.array([1, 1, 2], np.int32))}, {}


def _transducer(rng):
    enc, fenc = seq(rng, D=4, name="enc")
    pred = input_variable(4, dynamic_axes=("pred", "batch"), name="pred")
    y = input_variable((), dtype=np.int32, dynamic_axes=("labels", "batch"), name="labels")
    lab = np.array([[1, 2, 4], [2, 0, 0], [3, 3, 0]], np.int32).T  # [S, B]
    tl = np.array([1, 1, 2], np.int32)
    fpred = (rng.standard_normal((4, B, 4)), tl + 1)
    node = O.transducer_loss(enc, pred, y, param(rng, (5, 4), "Wj"), param(rng, (5,), "bj"))
    return node, {enc: fenc, pred: fpred, y: (lab, tl)}, {}


def _prepend(rng):
    x, fx = seq(rng)
    return O.prepend_zero_frame(x) * 1.5, {x: fx}, {}


def _ce(smoothing):
    def build(rng):
        x, fx = seq(rng, D=4)
        y, fy = labels_seq(rng, 4)
        return O.cross_entropy_with_softmax(x, y, smoothing), {x: fx, y: fy}, {}
    return build


CASES = {
    "neg": _unary(O.neg), "exp": _unary(O.exp), "log": _unary(O.log, positive=True),
    "sqrt": _unary(O.sqrt, positive=True), "abs": _unary(O.abs), "tanh": _unary(O.tanh),
    "sigmoid": _unary(O.sigmoid), "swish": _unary(O.swish), "relu": _unary(O.relu),
    "leaky_relu": _unary(O.leaky_relu),
    "elu": _unary(O.elu), "gelu": _unary(O.gelu), "softplus": _unary(O.softplus),
    "clip": _unary(O.clip, min_value=-0.5, max_value=0.7), "identity": _unary(O.identity),
    "add": _binary(O.add), "sub": _binary(O.sub), "mul": _binary(O.mul),
    "div": _binary(O.div, positive_b=True), "pow": _pow, "maximum": _binary(O.maximum),
    "minimum": _binary(O.minimum), "times": _times, "matmul": _matmul,
    "reduce_sum": _reduce(O.reduce_sum), "reduce_mean": _reduce(O.reduce_mean, (0, 1), True),
    "reduce_max": _reduce(O.reduce_max), "reduce_min": _reduce(O.reduce_min, 0),
    "sum_all": _all(O.sum_all), "mean_all": _all(O.mean_all), "max_all": _all(O.max_all),
    "reshape": _reshape, "transpose": _transpose, "getitem": _getitem, "splice": _splice,
    "splice[stack]": _stack, "softmax": _softmax(O.softmax),
    "log_softmax": _softmax(O.log_softmax),
    "sequence_softmax": _softmax(O.softmax, "seq"),
    "sequence_log_softmax": _softmax(O.log_softmax, "seq"), "dropout": _dropout,
    "layer_norm": _layer_norm, "batch_norm": _batch_norm(True),
    "batch_norm[eval]": _batch_norm(False), "conv1d": _conv(),
    "conv1d[stride2,valid]": _conv(2, 1, "valid"), "conv1d[dilated,causal]": _conv(1, 2, "causal"),
    "pool1d": _pool("max"), "pool1d[avg,same]": _pool("avg", 3, 2, "same"),
    "stack_frames": _stack_frames, "subsample_frames": _subsample,
    "splice_frames": _splice_frames, "sequence_reverse": _reverse,
    "past_value": _delay(O.past_value), "future_value": _delay(O.future_value, 2),
    "sequence_sum": _seq_reduce(O.sequence_sum), "sequence_mean": _seq_reduce(O.sequence_mean),
    "sequence_last": _seq_reduce(O.sequence_last), "sequence_first": _seq_reduce(O.sequence_first),
    "sequence_max": _seq_reduce(O.sequence_max), "embedding": _embedding, "lstm": _lstm(),
    "lstm[proj,reverse]": _lstm(True, True),
    "lstm[after_dense_slot_reuse]": _lstm(after_dense=True), "blstm": _blstm(False),
    "blstm[proj]": _blstm(True), "recurrence": _recurrence(False),
    "recurrence[go_backwards]": _recurrence(True), "ctc_loss": _ctc,
    "transducer_loss": _transducer, "prepend_zero_frame": _prepend,
    "cross_entropy_with_softmax": _ce(0.0), "cross_entropy_with_softmax[smoothing]": _ce(0.1),
}


# -- attention and the Conformer's convolutions (asrkit.ops.attention, .depthwise, .conv2d) ---
def _mhsa(rel=False, **masks):
    def build(rng):
        from asrkit.ops.attention import mhsa

        x, fx = seq(rng, D=4)
        s = 0.5
        pos = dict(w_pos=param(rng, (4, 4), "Wpos") * s, pos_bias_u=param(rng, (2, 2), "u"),
                   pos_bias_v=param(rng, (2, 2), "v")) if rel else {}
        y = mhsa(x, param(rng, (12, 4), "Win") * s, param(rng, (12,), "bin"),
                 param(rng, (4, 4), "Wout") * s, param(rng, (4,), "bout"), 2, **pos, **masks)
        return y, {x: fx}, {}
    return build


def _positional_encoding(rng):
    from asrkit.ops.attention import positional_encoding

    x, fx = seq(rng, D=4)
    return positional_encoding(x, 2.0), {x: fx}, {}


def _depthwise(padding):
    def build(rng):
        from asrkit.ops.depthwise import depthwise_conv1d

        x, fx = seq(rng, D=3)
        return depthwise_conv1d(x, param(rng, (3, 3)), padding), {x: fx}, {}
    return build


def _glu(axis):
    def build(rng):
        from asrkit.ops.activations import glu

        x, fx = seq(rng, dims=(4, 6))
        return glu(x, axis), {x: fx}, {}
    return build


def _conv2d(rng):
    from asrkit.ops.conv2d import conv2d

    x, fx = seq(rng, dims=(5, 2))
    return conv2d(x, param(rng, (2, 3, 2, 3)), (2, 2)), {x: fx}, {}


CASES.update({
    "mhsa": _mhsa(), "mhsa[rel_pos]": _mhsa(True),
    "mhsa[rel_pos,causal]": _mhsa(True, causal=True),
    "mhsa[chunked]": _mhsa(chunk_size=2, left_chunks=0),
    "positional_encoding": _positional_encoding,
    "depthwise_conv1d": _depthwise("same"), "depthwise_conv1d[causal]": _depthwise("causal"),
    "conv2d": _conv2d, "glu": _glu(-1), "glu[axis0]": _glu(0),
})
