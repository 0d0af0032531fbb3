"""The op catalogue (``asrkit.ops``): every op is a primitive (shape rule, forward, backward).

Importing this package registers every primitive in ``asrkit.graph.PRIMITIVES``. To add an op,
define next to its public wrapper (see ``elementwise.py``)::

    def _rule(prim, x, **attrs):            # nodes in, Type out; raise prim.error(...) on misuse
        return Type(x.shape, x.dynamic_axes, x.dtype)
    def _fwd(ctx, x, **attrs): ...          # numpy arrays in, array out (ctx.in_lengths, ctx.train)
    def _bwd(ctx, g, y, x, **attrs): ...    # one gradient per input (None: no gradient), at the
                                            # output's broadcast shape; the engine unbroadcasts
    my_p = Primitive("my_op", ("x",), _rule, _fwd, _bwd, needs=(0,))
    def my_op(x, name=""):
        return bind(my_p, [x], name=name)

and, beside them, its CUDA forward and backward on device arrays (``Primitive(...,
cuda=..., cuda_backward=...)``; one function when the kernels it calls take ``device=ctx.device``).
Kernel bodies live in ``asrkit.kernels`` (numpy twins in ``kernels/reference``). Then add a case
to ``tests/graph/_cases.py``: the catalogue test fails for any differentiable primitive without a
finite-difference check, and the cuda backend test runs every case on the device.

Importing this package also attaches the operators to graph nodes (``asrkit.ops.operators``).
"""

import asrkit.ops.operators  # noqa: F401  (attaches x + y, x @ W, ... to graph nodes)
from asrkit.ops.convolution import avg_pool1d, conv1d, max_pool1d
from asrkit.ops.criteria import (
    classification_error,
    cross_entropy_with_softmax,
    ctc_greedy_decode,
    ctc_greedy_errors,
    ctc_loss,
    edit_distance,
)
from asrkit.ops.dropout import dropout
from asrkit.ops.elementwise import (
    abs,
    add,
    clip,
    div,
    elu,
    exp,
    gelu,
    identity,
    leaky_relu,
    log,
    maximum,
    minimum,
    mul,
    neg,
    pow,
    reciprocal,
    relu,
    sigmoid,
    softplus,
    sqrt,
    square,
    stop_gradient,
    sub,
    swish,
    tanh,
)
from asrkit.ops.embedding import embedding
from asrkit.ops.linalg import matmul, times
from asrkit.ops.normalization import batch_norm, layer_norm
from asrkit.ops.recurrent import blstm, lstm
from asrkit.ops.reductions import (
    max_all,
    mean_all,
    reduce_max,
    reduce_mean,
    reduce_min,
    reduce_sum,
    sum_all,
)
from asrkit.ops.scan import recurrence
from asrkit.ops.sequence_ops import (
    future_value,
    past_value,
    sequence_first,
    sequence_last,
    sequence_lengths,
    sequence_max,
    sequence_mean,
    sequence_reverse,
    sequence_sum,
    splice_frames,
    stack_frames,
    subsample_frames,
)
from asrkit.ops.shape_ops import (
    concat,
    expand_dims,
    getitem,
    reshape,
    slice_axis,
    splice,
    squeeze,
    stack,
    swapaxes,
    transpose,
)
from asrkit.ops.softmax import log_softmax, softmax
from asrkit.ops.transducer import (
    prepend_zero_frame,
    transducer_greedy_errors,
    transducer_loss,
)

__all__ = [
    "abs", "add", "avg_pool1d", "batch_norm", "blstm", "classification_error", "clip", "concat",
    "conv1d", "cross_entropy_with_softmax", "ctc_greedy_decode", "ctc_greedy_errors", "ctc_loss",
    "div", "dropout", "edit_distance", "elu", "embedding", "exp", "expand_dims", "future_value",
    "gelu", "getitem", "identity", "layer_norm", "leaky_relu", "log", "log_softmax", "lstm",
    "matmul", "max_all", "max_pool1d", "maximum", "mean_all", "minimum", "mul", "neg",
    "past_value", "pow", "prepend_zero_frame", "reciprocal", "recurrence", "reduce_max",
    "reduce_mean", "reduce_min", "reduce_sum", "relu", "reshape", "sequence_first",
    "sequence_last", "sequence_lengths",
    "sequence_max", "sequence_mean", "sequence_reverse", "sequence_sum", "sigmoid", "slice_axis",
    "softmax", "softplus", "splice", "splice_frames", "sqrt", "square", "squeeze", "stack",
    "stack_frames", "stop_gradient", "sub", "subsample_frames", "sum_all", "swapaxes", "swish",
    "tanh",
    "times", "transducer_greedy_errors", "transducer_loss", "transpose",
]
