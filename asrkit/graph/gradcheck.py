"""Finite-difference gradient checks in float64, shared by the tests of every op and layer.

As JAX's ``check_grads``: perturb every differentiated leaf along one random direction ``v`` and
compare ``(F(x + eps v) - F(x - eps v)) / (2 eps)`` with ``<grad F, v>``, where
``F = sum(r * root)`` over valid entries for a fixed random ``r``. One direction tests every
entry of every gradient at once, so it is cheap enough to run on the whole op catalogue.
"""

from __future__ import annotations

import numpy as np

from asrkit.graph.executor import Executor, bind_feed, get_plan
from asrkit.graph.node import Input, Parameter
from asrkit.graph.sequence import Sequence, zero_padding


def _as_feed(node, value):
    if isinstance(value, Sequence):
        return value.data, value.lengths
    if isinstance(value, tuple):
        return value
    return value, None


def check_grads(fn_node, inputs, eps=1e-6, tol=1e-5, wrt=None, seed=0, train=False,
                run_seed=0):
    """Check the gradients of ``fn_node`` against central finite differences in float64.

    fn_node: any node; inputs: feeds ``{Input: array | (array, lengths) | Sequence}``; wrt: the
    nodes to check (default: all float inputs and trainable parameters); run_seed: the seed of
    stochastic ops, the same for every evaluation. Returns ``(numeric, analytic)``; raises
    AssertionError naming the node when they differ by more than ``tol`` (relative).
    """
    rng = np.random.default_rng(seed)
    plan = get_plan([fn_node])
    if wrt is None:
        wrt = [n for n in plan.inputs if n.dtype.kind == "f"] + \
              [p for p in plan.parameters if p.trainable and p.dtype.kind == "f"]
    feeds64 = {}
    lengths = {}
    for n in plan.inputs:
        raw = inputs[n] if n in inputs else inputs[n.name]
        data, L = bind_feed(n, raw, np.float64)
        feeds64[n] = data
        lengths[n] = L
    params64 = {p: np.asarray(p.value, np.float64) for p in plan.parameters}

    def feeds_at(shift):
        out = {}
        for n in plan.inputs:
            d = feeds64[n] + shift[n] if n in shift else feeds64[n]
            out[n] = (d, lengths[n]) if lengths[n] is not None else d
        return out

    def params_at(shift):
        return {p: params64[p] + shift[p] if p in shift else params64[p] for p in plan.parameters}

    direction = {}
    for w in wrt:
        base = feeds64[w] if isinstance(w, Input) else params64[w]
        v = rng.standard_normal(base.shape)
        if isinstance(w, Input) and lengths[w] is not None:
            v = zero_padding(v, lengths[w])
        direction[w] = v

    ex = Executor(plan, "cpu")
    y0 = ex.run(feeds_at({}), params=params_at({}), dtype=np.float64, seed=run_seed,
                train=train)
    out = np.asarray(y0.outputs[0], np.float64)
    r = rng.standard_normal(out.shape)
    if y0.lengths[0] is not None:
        r = zero_padding(r, y0.lengths[0])

    def F(sign):
        shift = {w: sign * eps * v for w, v in direction.items()}
        res = ex.run(feeds_at({w: s for w, s in shift.items() if isinstance(w, Input)}),
                     params=params_at({w: s for w, s in shift.items()
                                       if isinstance(w, Parameter)}),
                     dtype=np.float64, seed=run_seed, train=train)
        return float(np.sum(np.asarray(res.outputs[0], np.float64) * r))

    numeric = (F(1.0) - F(-1.0)) / (2 * eps)
    gplan = get_plan([fn_node], wrt=list(wrt), root=fn_node)
    res = Executor(gplan, "cpu").run(feeds_at({}), params=params_at({}), dtype=np.float64,
                                     seed=run_seed, train=train, root_grad=r)
    analytic = float(sum(np.sum(np.asarray(res.grads[w], np.float64) * v)
                         for w, v in direction.items()))
    err = abs(numeric - analytic)
    scale = max(1.0, abs(numeric), abs(analytic))
    if not err <= tol * scale:
        raise AssertionError(f"gradient check failed for {fn_node!r}: finite differences "
                             f"{numeric:.10g}, backprop {analytic:.10g} (|diff| {err:.3g} > "
                             f"tol {tol} x {scale:.3g})")
    return numeric, analytic
