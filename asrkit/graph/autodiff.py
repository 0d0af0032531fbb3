"""Reverse-mode differentiation of a graph: ``grad`` and ``value_and_grad``.

The gradient of a non-scalar root is that of the sum of its valid (non-padding) entries, as
CNTK's criterion nodes are summed over the minibatch; pass ``root_grad`` for any other seed.
"""

from __future__ import annotations

from asrkit.graph.executor import forward_backward
from asrkit.graph.node import Parameter


def value_and_grad(root, wrt=None, inputs=None, **kwargs):
    """Return ``(value, {node: gradient})`` of ``root`` at ``inputs``.

    root: a node; wrt: nodes (parameters and/or inputs; default all trainable parameters);
    inputs: the feeds; kwargs: ``train``, ``seed``, ``device``, ``params``, ``dtype``,
    ``root_grad``, ``recompute``, ``reuse`` (see ``forward_backward``). Gradients have the shapes
    of the wrt nodes' values (padded ``[T, B, ...]`` with zero padding for sequence inputs).
    """
    if wrt is None:
        wrt = [p for p in root.parameters if p.trainable]
    elif isinstance(wrt, Parameter) or not isinstance(wrt, (list, tuple)):
        wrt = [wrt]
    kwargs.setdefault("train", False)
    values, grads = forward_backward(root, list(wrt), inputs or {}, **kwargs)
    return values[0], grads


def grad(root, wrt=None, inputs=None, **kwargs) -> dict:
    """Return ``{node: d sum(root) / d node}`` for each node of ``wrt``; see value_and_grad."""
    return value_and_grad(root, wrt, inputs, **kwargs)[1]
