"""Broadcasting, in one place: the shape rule for elementwise ops and the gradient reduction.

Ops return gradients at the broadcast shape of their output; ``unbroadcast`` sums them back to
each input's shape once, in the engine (as tinygrad and JAX do), so no op repeats that logic.
"""

from __future__ import annotations

import numpy as np

from asrkit.graph.primitive import Type


def broadcast_type(prim, *nodes, dtype=None) -> Type:
    """Numpy broadcasting of full shapes, with ``None`` for dynamic dims.

    A dynamic dim meets another dynamic dim or 1; two sequence axes must have the same name.
    Returns the output Type; raises ``prim.error`` naming the op and shapes otherwise.
    """
    ndim = max(len(n.shape) for n in nodes)
    out = []
    for k in range(ndim):
        dims = [n.shape[len(n.shape) - ndim + k] for n in nodes if len(n.shape) - ndim + k >= 0]
        if any(d is None for d in dims):
            if any(d is not None and d != 1 for d in dims):
                raise prim.error(nodes, "a dynamic axis meets a static one of size "
                                 f"{[d for d in dims if d is not None and d != 1][0]}")
            out.append(None)
        else:
            big = {d for d in dims if d != 1}
            if len(big) > 1:
                raise prim.error(nodes, f"shapes do not broadcast (sizes {sorted(big)} on axis "
                                 f"{k - ndim})")
            out.append(big.pop() if big else 1)
    dyn = max((n.dynamic_axes for n in nodes), key=len)
    seqs = {n.dynamic_axes[0] for n in nodes if len(n.dynamic_axes) == 2}
    if len(seqs) > 1:
        raise prim.error(nodes, f"sequences on different axes {sorted(seqs)} cannot be combined")
    for n in nodes:  # dynamic axes must line up with the output's dynamic axes
        lead = ndim - len(n.shape)
        for j, _ in enumerate(n.dynamic_axes):
            if lead + j >= len(dyn) or out[lead + j] is not None:
                raise prim.error(nodes, "dynamic axes do not line up")
    if dtype is None:
        dtype = np.result_type(*[n.dtype for n in nodes])
    return Type(out, dyn, dtype)


def unbroadcast(g: np.ndarray, shape: tuple) -> np.ndarray:
    """Sum ``g`` over the axes that broadcasting added or stretched, returning ``shape``."""
    if g.shape == tuple(shape):
        return g
    extra = g.ndim - len(shape)
    axes = tuple(range(extra)) + tuple(extra + i for i, d in enumerate(shape)
                                       if d == 1 and g.shape[extra + i] != 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    return g.reshape(shape)
