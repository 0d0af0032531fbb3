"""The cpu backend: numpy arrays in host memory; ops run their numpy/numba.njit forwards."""

from __future__ import annotations

import numpy as np

from asrkit.graph.broadcast import unbroadcast
from asrkit.graph.sequence import zero_padding


class Backend:
    """Host backend (the identity on arrays)."""

    name = "cpu"

    def to_device(self, a):
        """Return ``a`` as a numpy array."""
        return np.asarray(a)

    def to_host(self, a):
        """Return ``a`` as a numpy array."""
        return np.asarray(a)

    def run(self, op, ctx, xs, attrs, out=None):
        """Run ``op``'s forward on ``xs``."""
        if out is not None:
            return op.forward(ctx, *xs, out=out, **attrs)
        return op.forward(ctx, *xs, **attrs)

    def run_backward(self, op, ctx, g, y, xs, attrs, state):
        """Run ``op``'s backward; returns one gradient (or None) per input."""
        if op.stateful:
            return op.backward(ctx, g, y, *xs, state=state, **attrs)
        return op.backward(ctx, g, y, *xs, **attrs)

    def zero_padding(self, x, lengths, copy=False):
        """Zero ``x``'s padding frames (``[T, B, ...]``)."""
        return zero_padding(x, lengths, copy=copy)

    def unbroadcast(self, g, shape):
        """Sum ``g`` back to ``shape``."""
        return unbroadcast(g, shape)

    def ones(self, shape, dtype):
        """An array of ones."""
        return np.ones(shape, dtype)

    def add(self, a, b, inplace: bool):
        """``a + b`` (into ``a`` when ``inplace``)."""
        if inplace:
            a += b
            return a
        return a + b

    def may_share_memory(self, a, b) -> bool:
        """True when ``a`` and ``b`` may overlap in memory."""
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and \
            np.may_share_memory(a, b)
