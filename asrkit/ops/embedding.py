"""Embedding lookup: integer ids -> rows of a table (the gradient is a scatter-add)."""

from __future__ import annotations

import numpy as np

from asrkit.graph.node import bind
from asrkit.graph.primitive import Primitive, Type


def _rule(prim, ids, table):
    if ids.dtype.kind not in "iu":
        raise prim.error([ids, table], f"ids must be integers; got {ids.dtype}")
    if table.dynamic_axes or len(table.shape) != 2:
        raise prim.error([ids, table], "table must be a static [vocab, dim] tensor")
    return Type(ids.shape + (table.shape[1],), ids.dynamic_axes, table.dtype)


def _fwd(ctx, ids, table):
    V = table.shape[0]
    if ids.size and (ids.min() < 0 or ids.max() >= V):
        bad = ids[(ids < 0) | (ids >= V)][0]
        raise ValueError(f"{ctx.where()}: id {int(bad)} is outside the vocabulary [0, {V})")
    return table[ids]


def _bwd(ctx, g, y, ids, table):
    gt = np.zeros(table.shape, g.dtype)
    np.add.at(gt, ids.reshape(-1), g.reshape(-1, table.shape[1]))
    return None, gt


embedding_p = Primitive("embedding", ("ids", "table"), _rule, _fwd, _bwd, needs=(0, 1))


def embedding(ids, table, name=""):
    """Look up ``table [V, D]`` rows for integer ``ids [...]`` -> ``[..., D]``."""
    return bind(embedding_p, [ids, table], name=name)
