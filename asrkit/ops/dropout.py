"""Dropout: seeded, active only in training mode (inverted scaling, so eval is the identity)."""

from __future__ import annotations

from asrkit.graph.node import bind
from asrkit.graph.primitive import Primitive
from asrkit.ops._rules import same_type


def _rule(prim, x, rate):
    if not 0.0 <= rate < 1.0:
        raise prim.error([x], f"dropout rate must be in [0, 1); got {rate}")
    return same_type(prim, x)


def _fwd(ctx, x, rate):
    if not ctx.train or rate == 0.0:
        return x, None
    keep = (ctx.rng.random(x.shape) >= rate).astype(x.dtype)
    keep *= x.dtype.type(1.0 / (1.0 - rate))
    return x * keep, keep


def _bwd(ctx, g, y, x, rate, state):
    return (g if state is None else g * state,)


dropout_p = Primitive("dropout", ("x",), _rule, _fwd, _bwd, needs=(), keeps_padding_zero=True,
                      stateful=True, stochastic=True, view=True)


def dropout(x, rate=0.5, name=""):
    """Zero each entry with probability ``rate`` in training (scaled by 1/(1-rate)); identity in
    evaluation. The mask comes from the run's seeded generator (reproducible)."""
    return bind(dropout_p, [x], name=name, rate=float(rate))
