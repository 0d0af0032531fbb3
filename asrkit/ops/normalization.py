"""Layer normalisation and batch normalisation (statistics over valid frames only)."""

from __future__ import annotations

import numpy as np

from asrkit.graph.node import bind
from asrkit.graph.primitive import Primitive, Type
from asrkit.graph.sequence import valid_mask
from asrkit.ops._rules import float_dtype


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
    mu = x.mean(axis=-1, keepdims=True)
    xc = x - mu
    rstd = 1.0 / np.sqrt((xc * xc).mean(axis=-1, keepdims=True) + eps)
    xhat = xc * rstd
    return xhat * scale + bias, (xhat, rstd)


def _ln_bwd(ctx, g, y, x, scale, bias, eps=1e-5, state=None):
    xhat, rstd = state
    gxhat = g * scale
    gx = rstd * (gxhat - gxhat.mean(axis=-1, keepdims=True)
                 - xhat * (gxhat * xhat).mean(axis=-1, keepdims=True))
    return gx, g * xhat, g


layer_norm_p = Primitive("layer_norm", ("x", "scale", "bias"), _norm_rule, _ln_fwd, _ln_bwd,
                         needs=(1,), stateful=True)


def layer_norm(x, scale, bias, eps=1e-5, name=""):
    """Normalise over the last axis: ``(x - mean) / sqrt(var + eps) * scale + bias``.

    x: ``[..., D]``; scale, bias: ``[D]`` nodes (parameters). Same as torch.nn.LayerNorm(D).
    """
    return bind(layer_norm_p, [x, scale, bias], name=name, eps=float(eps))


# -- batch norm ------------------------------------------------------------------------------
def _valid(ctx, x):
    """Mask ``[T, B, 1..]`` of valid frames (or None when every entry counts)."""
    L = ctx.in_lengths[0]
    if L is None:
        return None
    return valid_mask(L, x.shape[0], x.ndim, x.dtype)


def _bn_fwd(ctx, x, scale, bias, running_mean, running_var, eps=1e-5, momentum=0.1):
    axes = tuple(range(x.ndim - 1))
    if not ctx.train:
        rstd = 1.0 / np.sqrt(running_var + eps)
        xhat = (x - running_mean) * rstd
        return xhat * scale + bias, (xhat, rstd, None, False)
    m = _valid(ctx, x)
    # every entry of a valid frame counts (x [T, B, ..., D]: the middle axes too)
    n = float(m.sum()) * int(np.prod(x.shape[2:-1])) if m is not None else \
        float(np.prod([x.shape[a] for a in axes]))
    if n < 1:
        raise ValueError(f"{ctx.where()}: batch norm over an empty batch")
    mu = x.sum(axis=axes) / n
    xc = x - mu
    if m is not None:
        xc = xc * m
    var = (xc * xc).sum(axis=axes) / n
    rstd = 1.0 / np.sqrt(var + eps)
    xhat = xc * rstd
    # Running statistics live in the (non-trainable) parameter arrays, updated in place as
    # torch does: unbiased variance, exponential average with weight `momentum`.
    running_mean *= 1.0 - momentum
    running_mean += momentum * mu
    running_var *= 1.0 - momentum
    running_var += momentum * var * (n / max(n - 1.0, 1.0))
    return xhat * scale + bias, (xhat, rstd, m, n)


def _bn_bwd(ctx, g, y, x, scale, bias, running_mean, running_var, eps=1e-5, momentum=0.1,
            state=None):
    xhat, rstd, m, n = state
    gxhat = g * scale
    if n is False:  # evaluation mode: fixed statistics
        return gxhat * rstd, g * xhat, g, None, None
    axes = tuple(range(g.ndim - 1))
    gx = rstd * (gxhat - gxhat.sum(axis=axes) / n - xhat * (gxhat * xhat).sum(axis=axes) / n)
    if m is not None:
        gx = gx * m
    return gx, g * xhat, g, None, None


batch_norm_p = Primitive("batch_norm", ("x", "scale", "bias", "running_mean", "running_var"),
                         _norm_rule, _bn_fwd, _bn_bwd, needs=(1,), stateful=True)


def batch_norm(x, scale, bias, running_mean, running_var, eps=1e-5, momentum=0.1, name=""):
    """Batch normalisation per feature (last axis) over every valid frame of the batch.

    In training, normalises with the statistics of the real frames (padding excluded) and
    updates ``running_mean``/``running_var`` (non-trainable parameters ``[D]``) in place; in
    evaluation, uses them. Matches torch.nn.BatchNorm1d on the unpadded frames.
    """
    return bind(batch_norm_p, [x, scale, bias, running_mean, running_var], name=name,
                eps=float(eps), momentum=float(momentum))
