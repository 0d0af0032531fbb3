"""The cuda backend: values are numba device arrays; ops run on the GPU.

Every op of the catalogue registers its CUDA forward/backward with its primitive
(``Primitive(..., cuda=..., cuda_backward=...)``). An op without one, or whose impl returns
``NotImplemented`` for the inputs given, falls back to its numpy forward through the host, with a
RuntimeWarning naming the op once per process, so a graph always runs and the slow path is
visible. Gradient bookkeeping (masking, accumulation, reductions to broadcast shapes) runs on
the device, through the kernels of ``asrkit.kernels.cuda``.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager

import numpy as np

from asrkit.graph.broadcast import unbroadcast
from asrkit.graph.sequence import zero_padding
from asrkit.kernels._device import is_cuda_array, require_cuda

_warned: set = set()


def _on_device(a) -> bool:
    """CUDA arrays, and the simulator's device arrays (they only have ``copy_to_host``)."""
    return is_cuda_array(a) or hasattr(a, "copy_to_host")


def _fallback_warning(op_name: str, what: str) -> None:
    if (op_name, what) not in _warned:
        _warned.add((op_name, what))
        warnings.warn(f"asrkit.graph cuda backend: op {op_name!r} has no CUDA {what}; "
                      "running it on the host (slow path)", RuntimeWarning, stacklevel=4)


@contextmanager
def _on_host(ctx):
    """The op's cpu functions run on host copies: they see ``ctx.device == "cpu"``."""
    ctx.device = "cpu"
    try:
        yield
    finally:
        ctx.device = "cuda"


class Backend:
    """CUDA backend over numba.cuda device arrays."""

    name = "cuda"

    def __init__(self):
        self.cuda = require_cuda()
        from asrkit.kernels.cuda import elementwise, layout, sequence

        self.elementwise, self.layout, self.sequence = elementwise, layout, sequence

    def to_device(self, a):
        """Copy a host array to the device (device arrays pass through)."""
        if _on_device(a):
            return a
        a = np.ascontiguousarray(a)
        return self.cuda.to_device(a)

    def to_host(self, a):
        """Copy a device array to the host (host arrays pass through)."""
        if _on_device(a):
            return a.copy_to_host()
        return np.asarray(a)

    def run(self, op, ctx, xs, attrs, out=None):
        """Run ``op`` on the device if it has a CUDA forward, else through the host."""
        impl = op.impls.get("cuda")
        if impl is not None:
            res = impl(ctx, *xs, **attrs)
            if res is not NotImplemented:
                return res
        _fallback_warning(op.name, "forward")
        with _on_host(ctx):
            res = op.forward(ctx, *[self.to_host(x) for x in xs], **attrs)
        if op.stateful:
            y, state = res
            return self.to_device(y), state
        return self.to_device(res)

    def run_backward(self, op, ctx, g, y, xs, attrs, state):
        """Run ``op``'s backward (through the host unless it has a CUDA backward)."""
        impl = op.impls.get("cuda_backward")
        if impl is not None:
            res = impl(ctx, g, y, *xs, state=state, **attrs) if op.stateful else \
                impl(ctx, g, y, *xs, **attrs)
            if res is not NotImplemented:
                return res
        _fallback_warning(op.name, "backward")
        h = self.to_host
        xs = [None if x is None else h(x) for x in xs]
        y = None if y is None else h(y)
        with _on_host(ctx):
            if op.stateful:
                gs = op.backward(ctx, h(g), y, *xs, state=state, **attrs)
            else:
                gs = op.backward(ctx, h(g), y, *xs, **attrs)
        return tuple(None if gi is None else self.to_device(np.ascontiguousarray(gi))
                     for gi in gs)

    def zero_padding(self, x, lengths, copy=False):
        """Zero ``x``'s padding frames on the device."""
        if x.shape[0] == 0 or int(np.min(lengths, initial=x.shape[0])) >= x.shape[0]:
            return x
        if not _on_device(x):
            return self.to_device(zero_padding(np.asarray(x), lengths, copy=True))
        return self.sequence.fill_padding(x, lengths, 0, out=None if copy else x)

    def unbroadcast(self, g, shape):
        """Sum ``g`` back to ``shape`` (numpy broadcasting's adjoint) on the device."""
        if tuple(g.shape) == tuple(shape):
            return g
        if _on_device(g):
            return self.layout.sum_to_shape(g, tuple(shape))
        return self.to_device(np.ascontiguousarray(unbroadcast(self.to_host(g), shape)))

    def ones(self, shape, dtype):
        """A device array of ones."""
        return self.to_device(np.ones(shape, dtype))

    def add(self, a, b, inplace: bool):
        """``a + b`` (a new device array)."""
        if _on_device(a) and _on_device(b) and tuple(a.shape) == tuple(b.shape) \
                and a.dtype == b.dtype:
            return self.elementwise.binary("add", a, b)
        return self.to_device(self.to_host(a) + self.to_host(b))

    def may_share_memory(self, a, b) -> bool:
        """Device results of the host fallback are always fresh."""
        return False
