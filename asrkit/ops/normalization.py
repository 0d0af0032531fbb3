"""Layer normalisation and batch normalisation (statistics over valid frames only).

The kernels (:mod:`asrkit.kernels.cpu.normalization` on the cpu, the CUDA ones on the device,
both twins of :mod:`asrkit.kernels.reference.normalization`) normalise; the ops keep batch
norm's running statistics.
"""

from __future__ import annotations

import numpy as np

from asrkit.graph.node import bind
from asrkit.graph.primitive import Primitive, Type
from asrkit.kernels._device import kernel
from asrkit.ops._rules import errors_name, float_dtype


def _norm_rule(prim, x, scale, bias, *stats, **attrs):
    if len(x.shape) - len(x.dynamic_axes) < 1:
        raise prim.error([x, scale, bias, *stats], "x needs a static feature axis")
    D = x.shape[-1]
    for name, p in [("scale", scale), ("bias", bias)] + [("stat", s) for s in stats]:
        if p.dynamic_axes or p.shape not in ((D,), ()):
            raise prim.error([x, scale, bias, *stats], f"{name} must be static [{D}] (or a "
                             "scalar)")
    return Type(x.shape, x.dynamic_axes, float_dtype(x, scale, bias))


# -- layer norm ------------------------------------------------------------------------------
def _ln_fwd(ctx, x, scale, bias, eps=1e-5):
    if ctx.device == "cuda" and len({x.dtype, scale.dtype, bias.dtype}) != 1:
        return NotImplemented
    return kernel("normalization", "layer_norm", ctx.device)(x, scale, bias, eps)


def _ln_bwd(ctx, g, y, x, scale, bias, eps=1e-5, state=None):
    return kernel("normalization", "layer_norm_backward", ctx.device)(g, state, scale)


# zero frames normalise to xhat = 0 (the bias makes the output nonzero there), and zero g
# with xhat = 0 gives gx = 0: the input gradient needs no mask
layer_norm_p = Primitive("layer_norm", ("x", "scale", "bias"), _norm_rule, _ln_fwd, _ln_bwd,
                         needs=(1,), stateful=True, grad_keeps_padding_zero=True, cuda=_ln_fwd,
                         cuda_backward=_ln_bwd)


def layer_norm(x, scale, bias, eps=1e-5, name=""):
    """Normalise over the last axis: ``(x - mean) / sqrt(var + eps) * scale + bias``.

    x: ``[..., D]``; scale, bias: ``[D]`` nodes (parameters). Same as torch.nn.LayerNorm(D).
    """
    return bind(layer_norm_p, [x, scale, bias], name=name, eps=float(eps))


# -- batch norm ------------------------------------------------------------------------------
def _bn_fwd(ctx, x, scale, bias, running_mean, running_var, eps=1e-5, momentum=0.1):
    if ctx.device == "cuda" and (x.dtype.kind != "f" or len({x.dtype, scale.dtype,
                                                             bias.dtype}) != 1):
        return NotImplemented
    k = "normalization"
    if not ctx.train:
        var = running_var if ctx.device == "cpu" else running_var.copy_to_host()
        mean = running_mean if ctx.device == "cpu" else running_mean.copy_to_host()
        rstd = 1.0 / np.sqrt(var + eps)
        y, xhat = kernel(k, "batch_norm", ctx.device)(x, scale, bias, mean, rstd)
        return y, (xhat, rstd, None)
    L = ctx.in_lengths[0]
    with errors_name(ctx):
        mean, var, n = kernel(k, "batch_stats", ctx.device)(x, L)
    rstd = 1.0 / np.sqrt(var + eps)
    y, xhat = kernel(k, "batch_norm", ctx.device)(x, scale, bias, mean, rstd, L)
    _update_running(ctx, running_mean, running_var, x.dtype, mean, var * (n / max(n - 1.0, 1.0)),
                    momentum)
    return y, (xhat, rstd, n)


def _update_running(ctx, running_mean, running_var, dtype, mean, var_unbiased, momentum):
    """Running statistics live in the (non-trainable) parameter arrays, updated in place as
    torch does: unbiased variance, exponential average with weight ``momentum``. On the cpu
    they are the arrays the op received; the cuda path updates the parameters' host arrays."""
    stats = (running_mean, running_var)
    if ctx.device != "cpu":
        stats = [getattr(node, "value", None) for node in ctx.node.inputs[3:5]]
    for value, stat in zip(stats, (mean, var_unbiased)):
        if isinstance(value, np.ndarray) and (ctx.device == "cpu" or value.dtype == dtype):
            value *= 1.0 - momentum
            value += (momentum * stat).astype(value.dtype)


def _bn_bwd(ctx, g, y, x, scale, bias, running_mean, running_var, eps=1e-5, momentum=0.1,
            state=None):
    xhat, rstd, n = state
    gx, gscale, gbias = kernel("normalization", "batch_norm_backward", ctx.device)(
        g, xhat, scale, rstd, ctx.in_lengths[0] if n is not None else None, n)
    return gx, gscale, gbias, None, None


# the kernels zero the input gradient on padding frames themselves
batch_norm_p = Primitive("batch_norm", ("x", "scale", "bias", "running_mean", "running_var"),
                         _norm_rule, _bn_fwd, _bn_bwd, needs=(1,), stateful=True,
                         grad_keeps_padding_zero=True, cuda=_bn_fwd, cuda_backward=_bn_bwd)


def batch_norm(x, scale, bias, running_mean, running_var, eps=1e-5, momentum=0.1, name=""):
    """Batch normalisation per feature (last axis) over every valid frame of the batch.

    In training, normalises with the statistics of the real frames (padding excluded) and
    updates ``running_mean``/``running_var`` (non-trainable parameters ``[D]``) in place; in
    evaluation, uses them. Matches torch.nn.BatchNorm1d on the unpadded frames.
    """
    return bind(batch_norm_p, [x, scale, bias, running_mean, running_var], name=name,
                eps=float(eps), momentum=float(momentum))
