"""Recurrence with any step function: ``recurrence(step, x, initial_state)`` (a scan).

CNTK builds recurrent networks from loops through ``past_value``; here a loop is an op holding
its step graph, as JAX's ``lax.scan``: ``h_t = step(h_{t-1}, x_t)``, built once from two
per-frame inputs with a ``batch`` axis, run frame by frame by the same executor. Sequences stop
at their own lengths (the state of an ended sequence is kept; its outputs are zero). The backward
pass runs backpropagation through time: per frame, in reverse, it re-runs the step forward and
backward (storing only the states, as the mirror planner does) and sums the gradients of the
parameters the step uses. Fused kernels (``lstm``) remain the fast path for LSTMs; this op is for
any other cell (GRU, RNN-T prediction networks, custom cells). On the cuda backend the same loop
runs on device arrays: the step runs through a cuda executor and the sequence kernels keep the
states of ended sequences, so nothing comes back to the host per frame.
"""

from __future__ import annotations

import numpy as np

from asrkit.graph.executor import Executor
from asrkit.graph.node import BATCH, bind
from asrkit.graph.primitive import Primitive, Type
from asrkit.graph.step import StepGraph
from asrkit.kernels.reference.sequence import carry_grad, seed_grad, select_frame
from asrkit.ops._rules import require_sequence


def _rule(prim, x, h0, *params, step):
    require_sequence(prim, x)
    out = step.h_t
    if out.dynamic_axes != (BATCH,) or out.shape != step.h_prev.shape:
        raise prim.error([x, h0], f"the step must map h_prev {list(step.h_prev.shape)} to a "
                         f"state of the same shape; it returns {list(out.shape)} with dynamic "
                         f"axes {out.dynamic_axes}")
    return Type((None,) + out.shape, x.dynamic_axes, out.dtype)


def _param_values(step, params):
    return dict(zip(step.params, params))


def _fwd(ctx, x, h0, *params, step):
    T, B = x.shape[:2]
    L = ctx.in_lengths[0]
    state_shape = (B,) + tuple(step.h_prev.shape[1:])
    dt = np.result_type(x, *params) if params else x.dtype
    h = np.array(np.broadcast_to(h0, state_shape), dtype=dt)
    ys = np.zeros((T,) + state_shape, dt)
    h_prev_all = np.zeros((T,) + state_shape, dt)
    ex = Executor(step.forward_plan, "cpu")
    pv = _param_values(step, params)
    seeds = _seeds(ctx, T)
    for t in range(int(L.max()) if len(L) else 0):
        h_prev_all[t] = h
        res = ex.run({step.h_prev: h, step.x_t: x[t]}, params=pv, train=ctx.train,
                     seed=int(seeds[t]), dtype=dt)
        h, ys[t] = select_frame(np.asarray(res.outputs[0], dt), h, L, t)
    return ys, (h_prev_all, seeds)


def _seeds(ctx, T):
    return ctx.rng.integers(0, 2**31, T) if ctx.rng is not None else np.zeros(T, np.int64)


def _bwd(ctx, g, y, x, h0, *params, step, state=None):
    h_prev_all, seeds = state
    L = ctx.in_lengths[0]
    ex = Executor(step.grad_plan, "cpu")
    pv = _param_values(step, params)
    gh = np.zeros(h_prev_all.shape[1:], g.dtype)
    gx = np.zeros(x.shape, g.dtype)
    gparams = [np.zeros(p.shape, g.dtype) for p in params]
    for t in reversed(range(int(L.max()) if len(L) else 0)):
        res = ex.run({step.h_prev: h_prev_all[t], step.x_t: x[t]}, params=pv, train=ctx.train,
                     seed=int(seeds[t]), root_grad=seed_grad(g[t], gh, L, t),
                     dtype=h_prev_all.dtype)
        gh = carry_grad(res.grads[step.h_prev], gh, L, t)
        gx[t] = res.grads[step.x_t]
        for k, p in enumerate(step.params):
            gparams[k] += res.grads[p]
    return (gx, gh, *gparams)


# -- on the device: the same loop over device arrays ---------------------------------------------
def _cuda_setup(ctx, x, params, step):
    """(T, B, dtype, host lengths, device lengths, x and params in that dtype)."""
    from numba import cuda

    from asrkit.kernels.cuda.layout import broadcast_to, contiguous

    dt = np.result_type(x.dtype, *[p.dtype for p in params])

    def cast(a):
        a = contiguous(a)
        return a if a.dtype == dt else broadcast_to(a, tuple(a.shape), dt)
    L = np.asarray(ctx.in_lengths[0], np.int32)
    return (int(x.shape[0]), int(x.shape[1]), dt, L, cuda.to_device(L), cast(x),
            [cast(p) for p in params])


def _cuda_fwd(ctx, x, h0, *params, step):
    """``x [T, B, ...]``, ``h0`` (broadcast to ``[B, S]``) -> ``(y [T, B, S], (hs [T + 1, B, S],
    seeds))`` on device arrays."""
    from asrkit.kernels.cuda.layout import broadcast_to, empty, zeros
    from asrkit.kernels.cuda.sequence import select_frame as select

    T, B, dt, L, Ld, x, params = _cuda_setup(ctx, x, params, step)
    state_shape = (B,) + tuple(step.h_prev.shape[1:])
    hs = empty((T + 1,) + state_shape, dt)
    hs[0].copy_to_device(broadcast_to(h0, state_shape, dt))
    ys = zeros((T,) + state_shape, dt)
    ex = Executor(step.forward_plan, "cuda")
    pv = _param_values(step, params)
    seeds = _seeds(ctx, T)
    for t in range(int(L.max()) if len(L) else 0):
        res = ex.run({step.h_prev: hs[t], step.x_t: x[t]}, params=pv, train=ctx.train,
                     seed=int(seeds[t]))
        select(res.outputs[0], hs[t], Ld, t, h_out=hs[t + 1], y_out=ys[t])
    return ys, (hs, seeds)


def _cuda_bwd(ctx, g, y, x, h0, *params, step, state=None):
    """Backpropagation through time on device arrays -> gradients of ``(x, h0 as [B, S],
    *params)``."""
    from asrkit.kernels import elementwise as ew
    from asrkit.kernels.cuda import sequence
    from asrkit.kernels.cuda.layout import contiguous, flat, scatter, zeros

    hs, seeds = state
    T, B, dt, L, Ld, x, params = _cuda_setup(ctx, x, params, step)
    g = contiguous(g)
    ex = Executor(step.grad_plan, "cuda")
    pv = _param_values(step, params)
    gh = zeros(tuple(hs.shape[1:]), g.dtype)
    gx = zeros(tuple(x.shape), g.dtype)
    frame = x[0].size if T else 0
    gparams = [zeros(tuple(p.shape), g.dtype) for p in params]
    strides = tuple(int(np.prod(x.shape[i + 1:], dtype=np.int64)) for i in range(1, x.ndim))
    for t in reversed(range(int(L.max()) if len(L) else 0)):
        res = ex.run({step.h_prev: hs[t], step.x_t: x[t]}, params=pv, train=ctx.train,
                     seed=int(seeds[t]), root_grad=sequence.seed_grad(g[t], gh, Ld, t))
        gh = sequence.carry_grad(res.grads[step.h_prev], gh, Ld, t)
        scatter(res.grads[step.x_t], flat(gx), strides, t * frame, accumulate=False)
        for acc, p in zip(gparams, step.params):
            if acc.size:
                ew.binary("add", acc, res.grads[p], out=acc, device="cuda")
    return (gx, gh, *gparams)


# backward re-runs the step: it reads x and every captured parameter (any number of inputs)
scan_p = Primitive("recurrence", ("x", "initial_state"), _rule, _fwd, _bwd, needs=range(4096),
                   stateful=True, cuda=_cuda_fwd, cuda_backward=_cuda_bwd)


def recurrence(step, x, initial_state=0.0, state_shape=None, go_backwards=False, name=""):
    """Run ``h_t = step(h_prev, x_t)`` over each sequence of ``x [T, B, ...]`` -> ``[T, B, S]``.

    step: a function of two nodes (``h_prev [*, S]`` and ``x_t [*, ...]``, batch axis only)
    returning the new state node, e.g. ``lambda h, x: tanh(x @ W + h @ U + b)``; parameters it
    uses are found automatically and get gradients. state_shape: the static state shape
    (default: that of ``initial_state``, which may be a scalar only if state_shape is given).
    go_backwards: run each sequence from its last frame (the output is in input order).
    """
    from asrkit.graph.node import as_node
    from asrkit.ops.sequence_ops import sequence_reverse

    h0 = as_node(initial_state)
    if state_shape is None:
        if not h0.static_shape:
            raise ValueError("recurrence: give state_shape (the initial state is a scalar)")
        state_shape = h0.static_shape
    state_shape = (state_shape,) if np.isscalar(state_shape) else tuple(state_shape)
    dtype = x.dtype if x.dtype.kind == "f" else np.float32
    step_graph = StepGraph(step, state_shape, x.static_shape, dtype)
    xs = sequence_reverse(x) if go_backwards else x
    y = bind(scan_p, [xs, h0, *step_graph.params], name=name, step=step_graph)
    return sequence_reverse(y) if go_backwards else y


__all__ = ["StepGraph", "recurrence"]
