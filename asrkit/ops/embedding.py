"""Embedding lookup: integer ids -> rows of a table (the gradient is a scatter-add)."""

from __future__ import annotations

from asrkit.graph.node import bind
from asrkit.graph.primitive import Primitive, Type
from asrkit.kernels._device import kernel
from asrkit.ops._rules import errors_name


def _rule(prim, ids, table):
    if ids.dtype.kind not in "iu":
        raise prim.error([ids, table], f"ids must be integers; got {ids.dtype}")
    if table.dynamic_axes or len(table.shape) != 2:
        raise prim.error([ids, table], "table must be a static [vocab, dim] tensor")
    return Type(ids.shape + (table.shape[1],), ids.dynamic_axes, table.dtype)


def _fwd(ctx, ids, table):
    with errors_name(ctx):
        return kernel("layout", "take_rows", ctx.device)(table, ids)


def _bwd(ctx, g, y, ids, table):
    return None, kernel("layout", "add_rows", ctx.device)(g, ids, int(table.shape[0]))


embedding_p = Primitive("embedding", ("ids", "table"), _rule, _fwd, _bwd, needs=(0, 1), cuda=_fwd,
                        cuda_backward=_bwd)


def embedding(ids, table, name=""):
    """Look up ``table [V, D]`` rows for integer ``ids [...]`` -> ``[..., D]``."""
    return bind(embedding_p, [ids, table], name=name)
