"""The LM's output layer as one op: ``x [T, B, in] @ W [in, out] + b [out]`` on 2-D GEMMs.

``asrkit.ops.times`` multiplies a ``[T, B, in]`` array by ``W`` with ``np.matmul`` on the 3-D
array, which numpy runs as T separate small products: on ``[30, 32, 256] @ [256, 2000]`` that
is about 10x slower than one ``[960, 256] @ [256, 2000]`` GEMM. The vocabulary projection is
the largest product of an LM, so it gets this op, whose forward and backward fold the leading
axes into one. (A local workaround until ``times`` does the same; the result is identical.)
"""

from __future__ import annotations

import numpy as np

from asrkit.graph.node import bind
from asrkit.graph.primitive import Primitive, Type


def _rule(prim, x, W, b):
    nodes = [x, W, b]
    if W.dynamic_axes or b.dynamic_axes or len(W.shape) != 2 or len(b.shape) != 1:
        raise prim.error(nodes, "W must be a static [in, out] matrix and b a static [out] vector")
    if len(x.shape) - len(x.dynamic_axes) < 1 or x.shape[-1] != W.shape[0]:
        raise prim.error(nodes, f"x's last axis must have W's input size {W.shape[0]}")
    if b.shape[0] != W.shape[1]:
        raise prim.error(nodes, f"b has {b.shape[0]} entries, W has {W.shape[1]} outputs")
    return Type(x.shape[:-1] + (W.shape[1],), x.dynamic_axes, np.result_type(x.dtype, W.dtype))


def _fwd(ctx, x, W, b):
    y = np.matmul(x.reshape(-1, x.shape[-1]), W)
    y += b
    return y.reshape(x.shape[:-1] + (W.shape[1],))


def _bwd(ctx, g, y, x, W, b):
    g2 = g.reshape(-1, W.shape[1])
    need = ctx.needs_grad or (True, True, True)
    gx = np.matmul(g2, W.T).reshape(x.shape) if need[0] else None
    gW = np.matmul(x.reshape(-1, x.shape[-1]).T, g2) if need[1] else None
    gb = g2.sum(axis=0) if need[2] else None
    return gx, gW, gb


affine_p = Primitive("nnlm_affine", ("x", "W", "b"), _rule, _fwd, _bwd, needs=(0, 1))


def affine(x, W, b, name=""):
    """``x [..., in] @ W [in, out] + b [out] -> [..., out]`` (the engine zeroes padding)."""
    return bind(affine_p, [x, W, b], name=name)


# -- the output layer fused with the cross-entropy --------------------------------------------
def _xent_rule(prim, h, W, b, mask, targets):
    nodes = [h, W, b, mask, targets]
    if not h.is_sequence or len(h.shape) != 3:
        raise prim.error(nodes, "h must be a sequence [T, B, features]")
    if W.dynamic_axes or len(W.shape) != 2 or W.shape[0] != h.shape[-1]:
        raise prim.error(nodes, f"W must be a static [{h.shape[-1]}, vocab] matrix")
    V = W.shape[1]
    if b.dynamic_axes or mask.dynamic_axes or b.shape != (V,) or mask.shape != (V,):
        raise prim.error(nodes, f"b and mask must be static [{V}] vectors")
    if targets.dtype.kind not in "iu" or targets.dynamic_axes != h.dynamic_axes or \
            len(targets.shape) != 2:
        raise prim.error(nodes, "targets must be an integer sequence [T, B] on h's axes")
    return Type((None, None), h.dynamic_axes, np.result_type(h.dtype, W.dtype))


def _xent_fwd(ctx, h, W, b, mask, targets):
    T, B, P = h.shape
    V = W.shape[1]
    t = targets.reshape(-1)
    if t.size and (t.min() < 0 or t.max() >= V):
        bad = int(t[(t < 0) | (t >= V)][0])
        raise ValueError(f"{ctx.where()}: target {bad} is outside the vocabulary [0, {V})")
    z = np.matmul(h.reshape(-1, P), W)
    z += b + mask
    # one [N, V] buffer: logits -> shifted -> exp -> softmax (kept for the backward)
    z -= z.max(axis=1, keepdims=True)
    rows = np.arange(len(t))
    picked = z[rows, t]
    np.exp(z, out=z)
    s = z.sum(axis=1)
    cost = np.log(s) - picked
    z /= s[:, None]
    return cost.reshape(T, B).astype(z.dtype, copy=False), (z, t)


def _xent_bwd(ctx, g, y, h, W, b, mask, targets, state):
    probs, t = state
    dz = probs  # the forward's buffer, turned into d cost / d z in place (one backward a run)
    dz[np.arange(len(t)), t] -= 1.0
    dz *= g.reshape(-1, 1)
    need = ctx.needs_grad or (True, True, True, False, False)
    P = h.shape[-1]
    gh = np.matmul(dz, W.T).reshape(h.shape) if need[0] else None
    gW = np.matmul(h.reshape(-1, P).T, dz) if need[1] else None
    gb = dz.sum(axis=0) if need[2] else None
    return gh, gW, gb, None, None


output_xent_p = Primitive("nnlm_output_xent", ("h", "W", "b", "mask", "targets"), _xent_rule,
                          _xent_fwd, _xent_bwd, needs=(0, 1), stateful=True)


def output_xent(h, W, b, mask, targets, name=""):
    """Per-token ``-ln softmax(h @ W + b + mask)[target]``: ``h [T, B, P]``, ``W [P, V]``,
    ``b, mask [V]`` (mask: a constant, e.g. -1e9 for classes never predicted), int ``targets
    [T, B]`` -> ``[T, B]`` (zero on padding). Equals ``cross_entropy_with_softmax(times(h, W)
    + b + mask, targets)`` with one ``[T*B, V]`` buffer instead of several and a single GEMM
    each way; the gradient of ``z`` is ``softmax(z) - onehot(target)``.
    """
    return bind(output_xent_p, [h, W, b, mask, targets], name=name)
