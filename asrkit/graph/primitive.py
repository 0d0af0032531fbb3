"""Primitives: one entry per op holding its shape rule, forward per device and backward.

A public op wrapper (``asrkit.ops.tanh``) binds its primitive to input nodes; the shape rule runs
at once, so errors surface at construction. The engine calls, per node::

    y = forward(ctx, *xs, **attrs)                # or (y, state) when stateful
    gxs = backward(ctx, g, y, *xs, **attrs)       # (+ state=...) one gradient or None per input

Gradients are returned at the broadcast shape of the output; the engine reduces them back to each
input's shape (``unbroadcast``), never the op. ``ctx`` is an :class:`OpContext`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from asrkit.graph.errors import ShapeError, format_shape

PRIMITIVES: dict[str, Primitive] = {}


class Type:
    """A node's type: full ``shape`` (None for dynamic dims), ``dynamic_axes`` names, ``dtype``."""

    __slots__ = ("shape", "dynamic_axes", "dtype")

    def __init__(self, shape, dynamic_axes=(), dtype=np.float32):
        self.shape = tuple(shape)
        self.dynamic_axes = tuple(dynamic_axes)
        self.dtype = np.dtype(dtype)

    def __repr__(self):
        return f"Type({format_shape(self.shape)}, {self.dynamic_axes}, {self.dtype})"


class Primitive:
    """One op of the catalogue.

    name:           op name (registry key, model files, error messages)
    arg_names:      names of the inputs, used in ShapeError messages
    shape_rule:     ``rule(prim, *inputs, **attrs) -> Type``; raise ``prim.error(...)``
    forward:        ``forward(ctx, *xs, **attrs) -> y`` (numpy, the cpu device)
    backward:       ``backward(ctx, g, y, *xs, **attrs) -> tuple`` or None (not differentiable)
    lengths_rule:   ``rule(ctx, *xs, **attrs) -> int32[B]`` for ops that change sequence lengths
    needs:          what backward reads: input indices and/or "out"; others may be freed early
    keeps_padding_zero: zero padding in -> zero padding out, and zero g on padding gives zero
                    input gradients on padding (so the engine may skip masking)
    grad_keeps_padding_zero: the backward half of that alone (default: keeps_padding_zero),
                    for ops whose output needs masking but whose input gradients do not:
                    ``a + b`` with a bias ``b``, layer norm (the engine's mask of their
                    pass-through gradients was a copy of an array already zero there)
    out_shape:      ``f(*xs, **attrs) -> shape`` when forward accepts ``out=`` (buffer reuse)
    inplace:        ``out`` may be the buffer of input 0 (elementwise ops)
    view:           the output may alias input 0's memory (reshape, transpose, identity)
    cheap:          recomputing it in the backward pass is cheaper than storing it (mirror)
    stateful:       forward returns ``(y, state)`` and backward receives ``state=``
    stochastic:     draws from ``ctx.rng`` (never recomputed)
    cuda, cuda_backward: the forward and backward on device arrays (``impls["cuda"]``,
                    ``impls["cuda_backward"]``); they may return ``NotImplemented`` for inputs
                    they do not cover, and the backend then runs the cpu functions on host copies
    """

    def __init__(self, name: str, arg_names, shape_rule: Callable, forward: Callable,
                 backward: Callable | None = None, *, lengths_rule=None, needs=None,
                 keeps_padding_zero=False, grad_keeps_padding_zero=None, out_shape=None,
                 inplace=False, view=False, cheap=False, stateful=False, stochastic=False,
                 cuda=None, cuda_backward=None):
        if name in PRIMITIVES:
            raise ValueError(f"primitive {name!r} is already registered")
        self.name = name
        self.arg_names = tuple(arg_names)
        self.shape_rule = shape_rule
        self.forward = forward
        self.backward = backward
        self.lengths_rule = lengths_rule
        n = len(self.arg_names)
        self.needs = frozenset(range(n)) | {"out"} if needs is None else frozenset(needs)
        self.keeps_padding_zero = keeps_padding_zero
        self.grad_keeps_padding_zero = keeps_padding_zero if grad_keeps_padding_zero is None \
            else grad_keeps_padding_zero
        self.out_shape = out_shape
        self.inplace = inplace
        self.view = view
        self.cheap = cheap
        self.stateful = stateful
        self.stochastic = stochastic
        self.impls = {k: f for k, f in (("cuda", cuda), ("cuda_backward", cuda_backward))
                      if f is not None}
        PRIMITIVES[name] = self

    @property
    def differentiable(self) -> bool:
        """False for metrics and integer ops (no backward)."""
        return self.backward is not None

    def error(self, inputs, message: str) -> ShapeError:
        """Return a ShapeError ``name(a: [..], b: [..]): message`` for the given input nodes."""
        names = list(self.arg_names) + [f"arg{i}" for i in range(len(self.arg_names), len(inputs))]
        args = ", ".join(f"{a}: {format_shape(x.shape)}" for a, x in zip(names, inputs))
        return ShapeError(f"{self.name}({args}): {message}")

    def __repr__(self):
        return f"<primitive {self.name}>"


class OpContext:
    """What a forward/backward call may know beyond its arrays.

    in_lengths: per input, its ``int32[B]`` lengths or None; lengths: the output's lengths;
    train: training mode (dropout, batch norm); rng: numpy Generator for stochastic ops;
    device: "cpu" or "cuda"; needs_grad: per input, whether backward must produce its gradient;
    g_writable: backward may write an input gradient into ``g`` (returning it) to save memory;
    node: the Function being run (for error messages).
    """

    __slots__ = ("in_lengths", "lengths", "train", "rng", "device", "needs_grad", "node",
                 "g_writable")

    def __init__(self, node, in_lengths, lengths, train, rng, device, needs_grad=None):
        self.node = node
        self.in_lengths = in_lengths
        self.lengths = lengths
        self.train = train
        self.rng = rng
        self.device = device
        self.needs_grad = needs_grad
        self.g_writable = False  # backward may overwrite g (the engine owns it and drops it)

    def where(self) -> str:
        """Describe the node for error messages: ``op 'name'``."""
        n = self.node
        return f"{n.op.name}" + (f" '{n.name}'" if n.name else "")
