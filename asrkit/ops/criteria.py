"""Training criteria and evaluation metrics: CTC, cross-entropy with softmax, error rates.

Criteria return one value per frame (cross-entropy) or per sequence (CTC); sum them (``sum_all``)
or average them for the minibatch objective. Metrics have no gradient.
"""

from __future__ import annotations

import numpy as np

from asrkit.graph.node import BATCH, bind
from asrkit.graph.primitive import Primitive, Type
from asrkit.kernels import elementwise as ew
from asrkit.kernels._device import kernel
from asrkit.ops._rules import errors_name, float_dtype, require_sequence


# -- CTC -------------------------------------------------------------------------------------
def _ctc_rule(prim, logits, labels, blank=0, zero_infinity=False):
    require_sequence(prim, logits, "logits")
    require_sequence(prim, labels, "labels")
    if len(logits.shape) != 3:
        raise prim.error([logits, labels], "logits must be [T, B, classes]")
    if len(labels.shape) != 2 or labels.dtype.kind not in "iu":
        raise prim.error([logits, labels], "labels must be an integer sequence [S, B]")
    if not 0 <= blank < logits.shape[2]:
        raise prim.error([logits, labels], f"blank {blank} is not a class index")
    return Type((None,), (BATCH,), float_dtype(logits))


def _ctc_device(ctx, dtype):
    return "reference" if np.dtype(dtype) == np.float64 else ctx.device


def _ctc_fwd(ctx, logits, labels, blank=0, zero_infinity=False):
    from asrkit.kernels import ctc_loss

    targets = np.ascontiguousarray(labels.T, dtype=np.int32)
    costs, grad = ctc_loss(np.ascontiguousarray(logits), targets, ctx.in_lengths[0],
                           ctx.in_lengths[1], blank=blank,
                           device=_ctc_device(ctx, logits.dtype))
    costs = np.asarray(costs)
    if zero_infinity:
        costs = np.where(np.isfinite(costs), costs, 0).astype(costs.dtype)
    return costs, grad


def _ctc_bwd(ctx, g, y, logits, labels, blank=0, zero_infinity=False, state=None):
    # d(sum of costs)/dlogits, scaled per sequence by the incoming gradient g [B]
    return ew.binary("mul", state, g.reshape((1, -1, 1)), device=ctx.device), None


def _host(a):
    return a.copy_to_host() if hasattr(a, "copy_to_host") else np.asarray(a)


def _ctc_cuda(ctx, logits, labels, blank=0, zero_infinity=False):
    from numba import cuda

    from asrkit.kernels import ctc_loss

    targets = np.ascontiguousarray(_host(labels).T, dtype=np.int32)
    costs, grad = ctc_loss(logits, targets, ctx.in_lengths[0], ctx.in_lengths[1], blank=blank,
                           device="cuda")
    if zero_infinity:
        c = _host(costs)
        if not np.all(np.isfinite(c)):
            costs = cuda.to_device(np.where(np.isfinite(c), c, 0).astype(c.dtype))
    return costs, grad


ctc_p = Primitive("ctc_loss", ("logits", "labels"), _ctc_rule, _ctc_fwd, _ctc_bwd, needs=(),
                  stateful=True, cuda=_ctc_cuda, cuda_backward=_ctc_bwd)


def ctc_loss(logits, labels, blank=0, zero_infinity=False, name=""):
    """CTC loss per sequence: ``-log p(labels | logits)`` -> ``[B]``.

    logits: unnormalised ``[T, B, C]`` sequence (log-softmax is fused into the kernel); labels:
    an integer sequence ``[S, B]`` on its own axis (its lengths are the target lengths).
    Impossible alignments cost inf (0 with ``zero_infinity``, as torch). Matches
    torch.nn.functional.ctc_loss(log_softmax(logits), ..., reduction='none').
    """
    return bind(ctc_p, [logits, labels], name=name, blank=int(blank),
                zero_infinity=bool(zero_infinity))


# -- cross-entropy ---------------------------------------------------------------------------
def _ce_rule(prim, z, labels, label_smoothing=0.0):
    if len(z.shape) - len(z.dynamic_axes) < 1:
        raise prim.error([z, labels], "z needs a class axis")
    if labels.dtype.kind not in "iu":
        raise prim.error([z, labels], f"labels must be integer class indices; got {labels.dtype}")
    if labels.shape != z.shape[:-1] or labels.dynamic_axes != z.dynamic_axes:
        raise prim.error([z, labels], "labels must have z's shape without the class axis")
    if not 0.0 <= label_smoothing < 1.0:
        raise prim.error([z, labels], f"label_smoothing must be in [0, 1); got {label_smoothing}")
    return Type(z.shape[:-1], z.dynamic_axes, float_dtype(z))


def _ce_fwd(ctx, z, labels, label_smoothing=0.0):
    if ctx.device == "cuda" and z.dtype.kind != "f":
        return NotImplemented
    with errors_name(ctx):
        return kernel("criteria", "cross_entropy", ctx.device)(z, labels, label_smoothing)


def _ce_bwd(ctx, g, y, z, labels, label_smoothing=0.0, state=None):
    return kernel("criteria", "cross_entropy_backward", ctx.device)(g, state,
                                                                   label_smoothing), None


cross_entropy_p = Primitive("cross_entropy_with_softmax", ("z", "labels"), _ce_rule, _ce_fwd,
                            _ce_bwd, needs=(), stateful=True, cuda=_ce_fwd, cuda_backward=_ce_bwd)


def cross_entropy_with_softmax(z, labels, label_smoothing=0.0, name=""):
    """Per-frame cross-entropy of ``softmax(z)`` against integer ``labels``.

    z ``[..., C]`` (unnormalised), labels ``[...]`` ints (negative = ignored, loss 0). With
    label smoothing eps the target is ``(1 - eps) * onehot + eps / C`` (as torch). Padding
    frames of sequences give 0.
    """
    return bind(cross_entropy_p, [z, labels], name=name, label_smoothing=float(label_smoothing))


# -- metrics ---------------------------------------------------------------------------------
def _err_rule(prim, z, labels):
    _ce_rule(prim, z, labels)
    return Type(z.shape[:-1], z.dynamic_axes, float_dtype(z))


def _err_fwd(ctx, z, labels):
    if ctx.device == "cuda" and (z.dtype.kind != "f" or labels.dtype.kind not in "iu"):
        return NotImplemented
    return kernel("criteria", "classification_error", ctx.device)(z, labels)


def float_dtype_of(a):
    """The float dtype for results computed from ``a``."""
    return a.dtype if a.dtype.kind == "f" else np.dtype(np.float32)


classification_error_p = Primitive("classification_error", ("z", "labels"), _err_rule, _err_fwd,
                                   None, cuda=_err_fwd)


def classification_error(z, labels, name=""):
    """Per-frame 0/1 error: ``argmax(z) != label`` (negative labels count as correct). No grad."""
    return bind(classification_error_p, [z, labels], name=name)


def edit_distance(ref, hyp) -> int:
    """Levenshtein distance between two integer sequences (substitutions, insertions, deletions)."""
    ref, hyp = list(ref), list(hyp)
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1]


def ctc_greedy_decode(logits, lengths, blank=0) -> list[np.ndarray]:
    """Best-path decoding: argmax per frame, merge repeats, drop blanks. Returns B int arrays."""
    return _best_path(np.argmax(np.asarray(logits), axis=-1), lengths, blank)


def _best_path(best, lengths, blank):
    """The arg-max path ``int [T, B]`` with repeats merged and blanks dropped, per sequence."""
    out = []
    for b, n in enumerate(np.asarray(lengths)):
        path = best[: int(n), b]
        keep = np.ones(len(path), bool)
        keep[1:] = path[1:] != path[:-1]
        path = path[keep]
        out.append(path[path != blank])
    return out


def _greedy_fwd(ctx, logits, labels, blank=0):
    # the arg-max path [T, B] comes to the host for the edit distances (a small dynamic
    # programme per sequence)
    if ctx.device == "cuda" and logits.dtype.kind != "f":
        return NotImplemented
    best = _host(kernel("criteria", "argmax", ctx.device)(logits))
    hyps = _best_path(best, ctx.in_lengths[0], blank)
    labels = _host(labels)
    refs = [labels[: int(n), b] for b, n in enumerate(ctx.in_lengths[1])]
    errs = np.array([edit_distance(r, h) for r, h in zip(refs, hyps)], float_dtype_of(logits))
    if ctx.device == "cuda":
        from numba import cuda

        return cuda.to_device(errs)
    return errs


def _greedy_rule(prim, logits, labels, blank=0):
    return _ctc_rule(prim, logits, labels, blank)


ctc_greedy_errors_p = Primitive("ctc_greedy_errors", ("logits", "labels"), _greedy_rule,
                                _greedy_fwd, None, cuda=_greedy_fwd)


def ctc_greedy_errors(logits, labels, blank=0, name=""):
    """Token errors per sequence of best-path CTC decoding against ``labels`` -> ``[B]``.

    The token error rate of a batch is ``sum(errors) / sum(label lengths)``. No gradient.
    """
    return bind(ctc_greedy_errors_p, [logits, labels], name=name, blank=int(blank))
