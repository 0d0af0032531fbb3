"""Transducer (RNN-T) criterion ops: the loss with the joiner merged in, the prediction network's
start frame, and the greedy-decoding error count for CV.

``transducer_loss(enc, pred, labels, weight, bias)`` is to a transducer what ``ctc_loss`` is to
CTC: one value per sequence, ``-log p(labels | enc, pred)``, over the encoder output ``enc
[T, B, H]`` and the prediction network's output ``pred [U+1, B, H]`` (both already projected to
the joiner dimension H), with the additive joiner ``weight @ tanh(enc + pred) + bias`` fused into
the kernel (``asrkit.kernels.rnnt_joiner_loss``): the ``[B, T, U+1, V]`` logits are never held.
The forward computes the gradients too (one pass over the lattice, as the CTC op); the backward
scales them by the incoming per-sequence gradient.
"""

from __future__ import annotations

import numpy as np

from asrkit.graph.node import BATCH, bind
from asrkit.graph.primitive import Primitive, Type
from asrkit.ops._rules import derived_axis, float_dtype, require_sequence


def _host(a):
    return a.copy_to_host() if hasattr(a, "copy_to_host") else np.asarray(a)


# -- the start frame of the prediction network -------------------------------------------------
def _prepend_rule(prim, x):
    require_sequence(prim, x)
    return Type(x.shape, (derived_axis(x.seq_axis, "start"), BATCH), x.dtype)


def _prepend_fwd(ctx, x):
    y = np.zeros((x.shape[0] + 1,) + tuple(x.shape[1:]), x.dtype)
    y[1:] = x
    return y


def _prepend_bwd(ctx, g, y, x):
    return (np.ascontiguousarray(g[1:]),)


def _prepend_cuda(ctx, x):
    from numba import cuda

    rest = tuple(x.shape[1:])
    y = cuda.device_array((x.shape[0] + 1,) + rest, x.dtype)
    y[:1].copy_to_device(np.zeros((1,) + rest, x.dtype))
    if x.shape[0]:
        y[1:].copy_to_device(x)
    return y


def _prepend_cuda_bwd(ctx, g, y, x):
    from numba import cuda

    gx = cuda.device_array((g.shape[0] - 1,) + tuple(g.shape[1:]), g.dtype)
    if gx.shape[0]:
        gx.copy_to_device(g[1:])
    return (gx,)


prepend_zero_frame_p = Primitive(
    "prepend_zero_frame", ("x",), _prepend_rule, _prepend_fwd, _prepend_bwd, needs=(),
    keeps_padding_zero=True, lengths_rule=lambda ctx, x: ctx.in_lengths[0] + 1,
    cuda=_prepend_cuda, cuda_backward=_prepend_cuda_bwd)


def prepend_zero_frame(x, name=""):
    """``[U, B, ...] -> [U+1, B, ...]``: a zero frame before each sequence, lengths ``U_b + 1``
    (the prediction network's input: the start symbol embeds to zeros, as icefall's blank with
    ``padding_idx``)."""
    return bind(prepend_zero_frame_p, [x], name=name)


# -- the loss ----------------------------------------------------------------------------------
def _loss_rule(prim, enc, pred, labels, weight, bias, blank=0, prune=0.0):
    nodes = [enc, pred, labels, weight, bias]
    for node, what in ((enc, "enc"), (pred, "pred"), (labels, "labels")):
        require_sequence(prim, node, what)
    if len(enc.shape) != 3 or len(pred.shape) != 3 or enc.shape[2] != pred.shape[2]:
        raise prim.error(nodes, "enc must be [T, B, H] and pred [U+1, B, H] with the same H")
    if len(labels.shape) != 2 or labels.dtype.kind not in "iu":
        raise prim.error(nodes, "labels must be an integer sequence [U, B]")
    H = enc.shape[2]
    if weight.dynamic_axes or len(weight.shape) != 2 or weight.shape[1] != H:
        raise prim.error(nodes, f"weight must be a static [V, {H}] tensor")
    if bias.dynamic_axes or tuple(bias.shape) != (weight.shape[0],):
        raise prim.error(nodes, f"bias must be a static [{weight.shape[0]}] tensor")
    if not 0 <= blank < weight.shape[0]:
        raise prim.error(nodes, f"blank {blank} is not a class index")
    return Type((None,), (BATCH,), float_dtype(enc, pred, weight))


def _loss_args(ctx, labels):
    il, pl, tl = ctx.in_lengths[0], ctx.in_lengths[1], ctx.in_lengths[2]
    if np.any(pl != tl + 1):
        raise ValueError(f"{ctx.where()}: pred must have one frame more than labels per "
                         f"sequence (lengths {pl.tolist()} vs {tl.tolist()})")
    return np.ascontiguousarray(_host(labels).T, dtype=np.int32), il, tl


def _loss_fwd(ctx, enc, pred, labels, weight, bias, blank=0, prune=0.0):
    from asrkit.kernels import rnnt_joiner_loss

    targets, il, tl = _loss_args(ctx, labels)
    dt = np.result_type(enc, pred, weight, bias)
    dt = dt if dt in (np.float32, np.float64) else np.dtype(np.float32)
    args = [np.ascontiguousarray(a, dtype=dt) for a in (enc, pred, weight, bias)]
    costs, grads = rnnt_joiner_loss(*args, targets, il, tl, blank=blank, device="cpu",
                                    prune=prune)
    # what the backward needs when the per-sequence scales differ (see _loss_bwd)
    return np.asarray(costs), (grads, args, targets, il, tl)


def _per_sequence(g):
    g = _host(g).reshape(-1)
    return g, bool(np.all(g == g[0])) if g.size else True


def _loss_bwd(ctx, g, y, enc, pred, labels, weight, bias, blank=0, prune=0.0, state=None):
    grads, args, targets, il, tl = state
    d_enc, d_pred, d_w, d_b = (_host(a) for a in grads)  # host copies on the cuda fallback
    g, uniform = _per_sequence(g)
    scale = g.astype(d_enc.dtype).reshape(1, -1, 1)
    if uniform:  # the usual case, sum(costs): one factor for all four gradients
        s = d_enc.dtype.type(g[0] if g.size else 0)
        return d_enc * scale, d_pred * scale, None, d_w * s, d_b * s
    # the joiner's weight gradients sum over sequences: with per-sequence factors each
    # sequence's share is computed on its own
    from asrkit.kernels import rnnt_joiner_loss

    args = [_host(a) for a in args]
    d_w, d_b = np.zeros_like(d_w), np.zeros_like(d_b)
    for b in np.flatnonzero(g):
        sl = slice(int(b), int(b) + 1)
        _, (_, _, wb, bb) = rnnt_joiner_loss(args[0][:, sl], args[1][:, sl], args[2], args[3],
                                             targets[sl], il[sl], tl[sl], blank=blank,
                                             device="cpu", prune=prune)
        d_w += g[b] * wb
        d_b += g[b] * bb
    return d_enc * scale, d_pred * scale, None, d_w, d_b


def _loss_cuda(ctx, enc, pred, labels, weight, bias, blank=0, prune=0.0):
    from asrkit.kernels import rnnt_joiner_loss

    targets, il, tl = _loss_args(ctx, labels)
    costs, grads = rnnt_joiner_loss(enc, pred, weight, bias, targets, il, tl, blank=blank,
                                    device="cuda", prune=prune)
    return costs, (grads, (enc, pred, weight, bias), targets, il, tl)


def _loss_cuda_bwd(ctx, g, y, enc, pred, labels, weight, bias, blank=0, prune=0.0, state=None):
    from asrkit.kernels import elementwise as ew

    g_host, uniform = _per_sequence(g)
    if not uniform or not g_host.size:
        return NotImplemented  # the host backward handles per-sequence factors
    d_enc, d_pred, d_w, d_b = state[0]
    per_seq = g.reshape((1, -1, 1))
    first = g[:1]  # the common factor, kept on the device
    return (ew.binary("mul", d_enc, per_seq, device=ctx.device),
            ew.binary("mul", d_pred, per_seq, device=ctx.device), None,
            ew.binary("mul", d_w, first.reshape((1, 1)), device=ctx.device),
            ew.binary("mul", d_b, first, device=ctx.device))


transducer_loss_p = Primitive("transducer_loss", ("enc", "pred", "labels", "weight", "bias"),
                              _loss_rule, _loss_fwd, _loss_bwd, needs=(), stateful=True,
                              cuda=_loss_cuda, cuda_backward=_loss_cuda_bwd)


def transducer_loss(enc, pred, labels, weight, bias, blank=0, prune=0.0, name=""):
    """RNN-T loss per sequence, ``-log p(labels | enc, pred)`` -> ``[B]``.

    enc: the encoder output ``[T, B, H]``; pred: the prediction network's output ``[U+1, B, H]``
    (row 0 follows the start symbol; its lengths are the label lengths + 1); labels: an integer
    sequence ``[U, B]`` (its lengths are the target lengths); weight ``[V, H]`` and bias ``[V]``:
    the joiner's output layer (``logits = weight @ tanh(enc[t] + pred[u]) + bias``, log-softmax
    fused). ``prune``: lattice nodes of lower posterior occupancy are left out of the backward
    (``rnnt_joiner_loss``; 0 keeps all). Equals ``rnnt_loss`` on the explicitly joined logits
    (torchaudio's ``rnnt_loss(..., reduction="none")``); a sequence without frames costs inf.
    """
    return bind(transducer_loss_p, [enc, pred, labels, weight, bias], name=name,
                blank=int(blank), prune=float(prune))


# -- greedy decoding errors (CV) ---------------------------------------------------------------
def _errors_rule(prim, enc, labels, weight, bias, *predictor, kind="stateless", blank=0,
                 max_symbols=3):
    require_sequence(prim, enc, "enc")
    require_sequence(prim, labels, "labels")
    if kind not in ("stateless", "lstm"):
        raise prim.error([enc, labels], f"kind must be 'stateless' or 'lstm'; got {kind!r}")
    return Type((None,), (BATCH,), float_dtype(enc))


def predictor_step(kind: str, arrays, blank: int):
    """The numpy step object (``asrkit.kernels.transducer``) of a prediction network from its
    parameter arrays in the order ``asrkit.layers.transducer.Predictor.step_arrays`` gives."""
    from asrkit.kernels.transducer import LstmPredictorStep, StatelessPredictorStep

    arrays = [_host(a) for a in arrays]
    if kind == "stateless":
        embed, conv, proj_w, proj_b = arrays
        return StatelessPredictorStep(embed, conv, proj_w, proj_b, blank)
    embed, *lstm, proj_w, proj_b = arrays
    layers = [tuple(lstm[i:i + 4]) for i in range(0, len(lstm), 4)]
    return LstmPredictorStep(embed, layers, proj_w, proj_b, blank)


def _errors_fwd(ctx, enc, labels, weight, bias, *predictor, kind="stateless", blank=0,
                max_symbols=3):
    from asrkit.kernels.transducer import greedy_search
    from asrkit.ops.criteria import edit_distance

    step = predictor_step(kind, predictor, blank)
    enc, labels = _host(enc).astype(np.float32), _host(labels)
    weight, bias = _host(weight).astype(np.float32), _host(bias).astype(np.float32)
    errs = []
    for b, (T, U) in enumerate(zip(ctx.in_lengths[0], ctx.in_lengths[1])):
        hyp, _, _ = greedy_search(enc[:, b], step, weight, bias, blank, max_symbols, int(T))
        errs.append(edit_distance(labels[: int(U), b], hyp))
    out = np.array(errs, float_dtype(ctx.node.inputs[0]))
    if ctx.device == "cuda":
        from numba import cuda

        return cuda.to_device(out)
    return out


transducer_greedy_errors_p = Primitive("transducer_greedy_errors", ("enc", "labels", "weight",
                                                                    "bias", "predictor"),
                                       _errors_rule, _errors_fwd, None, cuda=_errors_fwd)


def transducer_greedy_errors(enc, labels, weight, bias, predictor, kind="stateless", blank=0,
                             max_symbols=3, name=""):
    """Token errors per sequence of greedy transducer decoding against ``labels`` -> ``[B]``.

    enc ``[T, B, H]``; labels ``[U, B]``; weight, bias: the joiner's output layer; predictor:
    the prediction network's parameters in ``predictor_step``'s order; kind: ``"stateless"`` or
    ``"lstm"``. No gradient.
    """
    return bind(transducer_greedy_errors_p, [enc, labels, weight, bias, *predictor], name=name,
                kind=kind, blank=int(blank), max_symbols=int(max_symbols))


__all__ = ["predictor_step", "prepend_zero_frame", "transducer_greedy_errors",
           "transducer_loss"]
