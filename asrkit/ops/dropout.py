"""Dropout: seeded, active only in training mode (inverted scaling, so eval is the identity)."""

from __future__ import annotations

from asrkit.graph.node import bind
from asrkit.graph.primitive import Primitive
from asrkit.kernels import elementwise as ew
from asrkit.ops._rules import same_type


def _rule(prim, x, rate):
    if not 0.0 <= rate < 1.0:
        raise prim.error([x], f"dropout rate must be in [0, 1); got {rate}")
    return same_type(prim, x)


def _fwd(ctx, x, rate):
    if not ctx.train or rate == 0.0:
        return x, None
    # The mask is drawn on the host from the run's generator, so cpu and cuda drop the same
    # entries for the same seed.
    keep = (ctx.rng.random(tuple(x.shape)) >= rate).astype(x.dtype)
    keep *= x.dtype.type(1.0 / (1.0 - rate))
    if ctx.device == "cuda":
        from numba import cuda

        keep = cuda.to_device(keep)
    return ew.binary("mul", x, keep, device=ctx.device), keep


def _bwd(ctx, g, y, x, rate, state):
    return (g if state is None else ew.binary("mul", g, state, device=ctx.device),)


dropout_p = Primitive("dropout", ("x",), _rule, _fwd, _bwd, needs=(), keeps_padding_zero=True,
                      stateful=True, stochastic=True, view=True, cuda=_fwd, cuda_backward=_bwd)


def dropout(x, rate=0.5, name=""):
    """Zero each entry with probability ``rate`` in training (scaled by 1/(1-rate)); identity in
    evaluation. The mask comes from the run's seeded generator (reproducible)."""
    return bind(dropout_p, [x], name=name, rate=float(rate))
