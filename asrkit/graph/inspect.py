"""Looking at a graph: a per-node summary table and lookup of nodes by name (as CNTK's
``find_by_name`` and ``logging.graph``)."""

from __future__ import annotations

import numpy as np

from asrkit.graph.errors import format_shape
from asrkit.graph.node import Constant, Function, Input, Parameter
from asrkit.graph.topo import topological_order


def find_by_name(root, name: str):
    """Return the node called ``name`` among ``root``'s ancestors; KeyError if none or several."""
    hits = [n for n in topological_order([root]) if n.name == name]
    if len(hits) != 1:
        raise KeyError(f"{len(hits)} nodes are named {name!r} in the graph of {root!r}")
    return hits[0]


def summary(root) -> str:
    """A table of every node ``root`` depends on: kind/op, name, shape, dtype, inputs, and the
    trainable parameter count at the end."""
    order = topological_order([root] if not isinstance(root, (list, tuple)) else list(root))
    index = {id(n): i for i, n in enumerate(order)}
    lines = [f"{'#':>4}  {'op':22s} {'name':28s} {'shape':18s} {'dtype':8s} inputs"]
    n_params = 0
    for i, n in enumerate(order):
        if isinstance(n, Function):
            what, ins = n.op.name, ", ".join(f"#{index[id(x)]}" for x in n.inputs)
        else:
            what = {Input: "input", Parameter: "parameter", Constant: "constant"}[type(n)]
            ins = ""
            if isinstance(n, Parameter) and n.trainable:
                n_params += int(np.prod(n.shape))
        lines.append(f"{i:>4}  {what:22s} {n.name[:28]:28s} {format_shape(n.shape):18s} "
                     f"{str(n.dtype):8s} {ins}")
    lines.append(f"{len(order)} nodes, {n_params} trainable parameters")
    return "\n".join(lines)
