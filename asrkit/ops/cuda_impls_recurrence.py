"""CUDA forward/backward of ``recurrence`` (registered on import by the cuda backend).

The driver loop is the host scan of :mod:`asrkit.ops.scan`, but every array stays on the device:
the step subgraph runs per frame through a cuda :class:`~asrkit.graph.executor.Executor` fed with
device arrays (the state ``hs[t]`` and the frame ``x[t]``, both views), and small kernels apply
the lengths (keep an ended sequence's state, zero its output) and copy frames in and out. The
only per-frame host work is Python: launching kernels and walking the step's plan. States
``hs [T + 1, B, S]`` are kept for the backward, which re-runs the step forward and backward per
frame in reverse (backpropagation through time), as the host path does.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from asrkit.graph.executor import Executor
from asrkit.ops import scan
from asrkit.ops.cuda_layout import broadcast_to, contiguous, empty, flat, launch, zeros


@cuda.jit
def _select_frame(h_new, h_prev, lengths, t, F, h_out, y):
    """h_out = h_new and y = h_new where frame t is valid for the row's sequence, else the old
    state and 0 (rows are ``i // F``)."""
    i = cuda.grid(1)
    if i < h_out.size:
        if t < lengths[i // F]:
            v = h_new[i]
            h_out[i] = v
            y[i] = v
        else:
            h_out[i] = h_prev[i]
            y[i] = 0


@cuda.jit
def _seed_grad(g, gh, lengths, t, F, out):
    """out = g + gh on valid frames, 0 after a sequence's end."""
    i = cuda.grid(1)
    if i < out.size:
        out[i] = g[i] + gh[i] if t < lengths[i // F] else 0


@cuda.jit
def _carry_grad(gh_new, lengths, t, F, gh):
    """gh = gh_new on valid frames; an ended sequence passes its state gradient through."""
    i = cuda.grid(1)
    if i < gh.size and t < lengths[i // F]:
        gh[i] = gh_new[i]


@cuda.jit
def _copy(src, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = src[i]


@cuda.jit
def _accumulate(acc, g):
    i = cuda.grid(1)
    if i < acc.size:
        acc[i] += g[i]


def _as_dtype(a, dt):
    return a if a.dtype == dt else broadcast_to(a, tuple(a.shape), dt)


def _flat_of(a):
    return flat(contiguous(a))


def _setup(ctx, x, params, step):
    """Common checks: returns (T, B, F, host lengths, device lengths, dtype, x, params)."""
    dt = np.result_type(x.dtype, *[p.dtype for p in params])
    L = np.asarray(ctx.in_lengths[0], np.int32)
    T, B = int(x.shape[0]), int(x.shape[1])
    F = int(np.prod(step.h_prev.shape[1:], dtype=np.int64))
    x = _as_dtype(contiguous(x), dt)
    params = [_as_dtype(contiguous(p), dt) for p in params]
    return T, B, F, L, cuda.to_device(L), dt, x, params


def _recurrence_fwd(ctx, x, h0, *params, step):
    """Forward on device arrays: ``x [T, B, ...]``, ``h0`` (broadcast to ``[B, S]``) ->
    ``(y [T, B, S], (hs [T + 1, B, S], seeds int64[T]))``."""
    T, B, F, L, Ld, dt, x, params = _setup(ctx, x, params, step)
    state_shape = (B,) + tuple(step.h_prev.shape[1:])
    hs = empty((T + 1,) + state_shape, dt)
    hs[0].copy_to_device(broadcast_to(h0, state_shape, dt))
    ys = zeros((T,) + state_shape, dt)
    ex = Executor(step.forward_plan, "cuda")
    pv = scan._param_values(step, params)
    seeds = ctx.rng.integers(0, 2**31, T) if ctx.rng is not None else np.zeros(T, np.int64)
    n = B * F
    for t in range(int(L.max()) if len(L) else 0):
        res = ex.run({step.h_prev: hs[t], step.x_t: x[t]}, params=pv, train=ctx.train,
                     seed=int(seeds[t]))
        if n:
            _select_frame[launch(n)](_flat_of(res.outputs[0]), flat(hs[t]), Ld, t, F,
                                     flat(hs[t + 1]), flat(ys[t]))
    return ys, (hs, seeds)


def _recurrence_bwd(ctx, g, y, x, h0, *params, step, state=None):
    """Backpropagation through time on device arrays: ``g [T, B, S]`` -> gradients of
    ``(x, h0 as [B, S], *params)``."""
    hs, seeds = state
    T, B, F, L, Ld, dt, x, params = _setup(ctx, x, params, step)
    g = contiguous(g)
    ex = Executor(step.grad_plan, "cuda")
    pv = scan._param_values(step, params)
    gh = zeros(tuple(hs.shape[1:]), g.dtype)
    gx = zeros(tuple(x.shape), g.dtype)
    gparams = [zeros(tuple(p.shape), g.dtype) for p in params]
    n = B * F
    for t in reversed(range(int(L.max()) if len(L) else 0)):
        root = empty(tuple(gh.shape), g.dtype)
        if n:
            _seed_grad[launch(n)](flat(g[t]), flat(gh), Ld, t, F, flat(root))
        res = ex.run({step.h_prev: hs[t], step.x_t: x[t]}, params=pv, train=ctx.train,
                     seed=int(seeds[t]), root_grad=root)
        if n:
            _carry_grad[launch(n)](_flat_of(res.grads[step.h_prev]), Ld, t, F, flat(gh))
        gxt = res.grads[step.x_t]
        if gxt.size:
            _copy[launch(gxt.size)](_flat_of(gxt), flat(gx[t]))
        for acc, p in zip(gparams, step.params):
            if acc.size:
                _accumulate[launch(acc.size)](flat(acc), _flat_of(res.grads[p]))
    return (gx, gh, *gparams)


def register() -> None:
    """Attach the device impls to the ``recurrence`` primitive (idempotent)."""
    scan.scan_p.impls.update(cuda=_recurrence_fwd, cuda_backward=_recurrence_bwd)


register()
