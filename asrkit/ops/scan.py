"""Recurrence with any step function: ``recurrence(step, x, initial_state)`` (a scan).

CNTK builds recurrent networks from loops through ``past_value``; here a loop is an op holding
its step graph, as JAX's ``lax.scan``: ``h_t = step(h_{t-1}, x_t)``, built once from two
per-frame inputs with a ``batch`` axis, run frame by frame by the same executor. Sequences stop
at their own lengths (the state of an ended sequence is kept; its outputs are zero). The backward
pass runs backpropagation through time: per frame, in reverse, it re-runs the step forward and
backward (storing only the states, as the mirror planner does) and sums the gradients of the
parameters the step uses. Fused kernels (``lstm``) remain the fast path for LSTMs; this op is for
any other cell (GRU, RNN-T prediction networks, custom cells). On the cuda backend the same loop
runs on device arrays (:mod:`asrkit.ops.cuda_impls_recurrence`).
"""

from __future__ import annotations

import numpy as np

from asrkit.graph.executor import Executor, get_plan
from asrkit.graph.node import BATCH, Input, Parameter, bind, input_variable
from asrkit.graph.primitive import Primitive, Type
from asrkit.graph.topo import topological_order
from asrkit.ops._rules import require_sequence


class StepGraph:
    """A compiled step: inputs ``h_prev``, ``x_t`` (batch axis only), output ``h_t``, and the
    parameters it captures (which become inputs of the recurrence op)."""

    def __init__(self, step, state_shape, frame_shape, dtype):
        h_prev = input_variable(state_shape, dtype, (BATCH,), name="h_prev")
        x_t = input_variable(frame_shape, dtype, (BATCH,), name="x_t")
        self._compile(h_prev, x_t, step(h_prev, x_t))

    @classmethod
    def from_nodes(cls, h_prev, x_t, h_t) -> StepGraph:
        """Wrap an already built step graph (model files rebuild it this way)."""
        self = cls.__new__(cls)
        self._compile(h_prev, x_t, h_t)
        return self

    def _compile(self, h_prev, x_t, h_t):
        self.h_prev, self.x_t, self.h_t = h_prev, x_t, h_t
        order = topological_order([self.h_t])
        stray = [n for n in order if isinstance(n, Input) and n not in (self.h_prev, self.x_t)]
        if stray:
            raise ValueError(f"recurrence: the step uses graph input {stray[0]!r}; pass "
                             "per-frame inputs through x (splice them) instead")
        self.params = [n for n in order if isinstance(n, Parameter)]
        self.forward_plan = get_plan([self.h_t])
        self.grad_plan = get_plan([self.h_t], wrt=[self.h_prev, self.x_t, *self.params],
                                  root=self.h_t)

    def __repr__(self):
        return f"StepGraph({self.h_t!r})"


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


def _active(L, t, ndim):
    a = t < L
    return a.reshape(a.shape + (1,) * (ndim - 1))


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
    seeds = ctx.rng.integers(0, 2**31, T) if ctx.rng is not None else np.zeros(T, np.int64)
    for t in range(int(L.max()) if len(L) else 0):
        h_prev_all[t] = h
        res = ex.run({step.h_prev: h, step.x_t: x[t]}, params=pv, train=ctx.train,
                     seed=int(seeds[t]), dtype=dt)
        h_new = np.asarray(res.outputs[0], dt)
        act = _active(L, t, h.ndim)
        h = np.where(act, h_new, h)
        ys[t] = np.where(act, h_new, 0)
    return ys, (h_prev_all, seeds)


def _bwd(ctx, g, y, x, h0, *params, step, state=None):
    h_prev_all, seeds = state
    T, B = x.shape[:2]
    L = ctx.in_lengths[0]
    ex = Executor(step.grad_plan, "cpu")
    pv = _param_values(step, params)
    gh = np.zeros(h_prev_all.shape[1:], g.dtype)
    gx = np.zeros(x.shape, g.dtype)
    gparams = [np.zeros(p.shape, g.dtype) for p in params]
    for t in reversed(range(int(L.max()) if len(L) else 0)):
        act = _active(L, t, gh.ndim)
        root = np.where(act, g[t] + gh, 0)
        res = ex.run({step.h_prev: h_prev_all[t], step.x_t: x[t]}, params=pv, train=ctx.train,
                     seed=int(seeds[t]), root_grad=root, dtype=h_prev_all.dtype)
        gh = np.where(act, res.grads[step.h_prev], gh)  # ended sequences pass h through
        gx[t] = res.grads[step.x_t]
        for k, p in enumerate(step.params):
            gparams[k] += res.grads[p]
    return (gx, gh, *gparams)


# backward re-runs the step: it reads x and every captured parameter (any number of inputs)
scan_p = Primitive("recurrence", ("x", "initial_state"), _rule, _fwd, _bwd, needs=range(4096),
                   stateful=True)


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
