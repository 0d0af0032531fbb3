"""Graph nodes: inputs, parameters, constants and the Functions that ops build from them.

A node's ``shape`` is the full array shape with ``None`` for its dynamic axes, which lead:
``input_variable(80)`` is ``[*, *, 80]`` with ``dynamic_axes == ("seq", "batch")`` and is fed a
padded ``[T, B, 80]`` array with ``int32[B]`` lengths. Nodes are immutable once built (parameter
values excepted), so a compiled plan can be cached on them.
"""

from __future__ import annotations

import itertools

import numpy as np

from asrkit.graph.errors import GraphError, format_shape
from asrkit.graph.init import resolve_init
from asrkit.graph.primitive import Primitive, Type

SEQ, BATCH = "seq", "batch"
_uids = itertools.count()


class Variable:
    """A node of the graph; the base of Input, Parameter, Constant and Function.

    ``+ - * / ** @``, unary ``-`` and ``x[..., a:b]`` (static axes) build ops once the op
    catalogue is imported (``asrkit.ops`` attaches them: the graph never imports it).
    """

    __array_ufunc__ = None  # numpy defers to our reflected operators: np.float32(2) * x
    kind = "variable"

    def __init__(self, type_: Type, name: str = ""):
        self.shape = type_.shape
        self.dynamic_axes = type_.dynamic_axes
        self.dtype = type_.dtype
        self.name = name or ""
        self.uid = next(_uids)
        self.inputs: tuple[Variable, ...] = ()

    # -- type ------------------------------------------------------------------------------
    @property
    def static_shape(self) -> tuple:
        """The shape without the dynamic axes (what a parameter-like view sees)."""
        return self.shape[len(self.dynamic_axes):]

    @property
    def is_sequence(self) -> bool:
        """True for ``[T, B, ...]`` nodes (a sequence axis and a batch axis)."""
        return len(self.dynamic_axes) == 2

    @property
    def seq_axis(self) -> str | None:
        """Name of the sequence axis, or None."""
        return self.dynamic_axes[0] if self.is_sequence else None

    @property
    def ndim(self) -> int:
        """Rank of the runtime array, dynamic axes included."""
        return len(self.shape)

    @property
    def type(self) -> Type:
        """This node's Type."""
        return Type(self.shape, self.dynamic_axes, self.dtype)

    # -- graph queries ---------------------------------------------------------------------
    def _leaves(self, cls):
        from asrkit.graph.topo import topological_order

        return [n for n in topological_order([self]) if isinstance(n, cls)]

    @property
    def parameters(self) -> list[Parameter]:
        """Every Parameter this node depends on, in topological order."""
        return self._leaves(Parameter)

    @property
    def arguments(self) -> list[Input]:
        """Every Input this node depends on (what ``eval`` must be fed)."""
        return self._leaves(Input)

    def eval(self, feeds=None, *, train: bool = False, device: str = "cpu", seed: int = 0):
        """Evaluate this node.

        feeds: ``{input: array | (array, lengths) | Sequence}`` (keys may be Inputs or names).
        Returns a numpy array, or a :class:`Sequence` for sequence nodes.
        """
        from asrkit.graph.executor import evaluate

        return evaluate([self], feeds or {}, train=train, device=device, seed=seed)[0]

    def grad(self, feeds=None, wrt=None, **kwargs):
        """Gradients of the sum of this node's (valid) entries; see :func:`asrkit.graph.grad`."""
        from asrkit.graph.autodiff import grad

        return grad(self, wrt=wrt, inputs=feeds or {}, **kwargs)

    def __repr__(self):
        label = f" '{self.name}'" if self.name else ""
        what = self.op.name if isinstance(self, Function) else self.kind
        return f"<{what}{label} {format_shape(self.shape)} {self.dtype}>"


class Input(Variable):
    """A graph input fed at evaluation time (features, labels)."""

    kind = "input"


class Parameter(Variable):
    """A learnable tensor with a value (``.value``, float32 by default) and no dynamic axes."""

    kind = "parameter"

    def __init__(self, value: np.ndarray, name: str = "", trainable: bool = True):
        value = np.ascontiguousarray(value)
        super().__init__(Type(value.shape, (), value.dtype), name)
        self.value = value
        self.trainable = trainable

    def set_value(self, value) -> None:
        """Replace the value in place (same shape, cast to this parameter's dtype)."""
        value = np.asarray(value, dtype=self.dtype)
        if value.shape != self.shape:
            raise GraphError(f"parameter '{self.name}': new value has shape {value.shape}, "
                             f"expected {self.shape}")
        self.value[...] = value


class Constant(Variable):
    """A fixed tensor; python and numpy scalars become Constants when mixed with nodes."""

    kind = "constant"

    def __init__(self, value, name: str = "", dtype=None):
        value = np.asarray(value, dtype=dtype)
        if dtype is None and value.dtype.kind == "f":
            value = value.astype(np.float32)
        super().__init__(Type(value.shape, (), value.dtype), name)
        self.value = value


class Function(Variable):
    """The output of an op applied to input nodes (``op``, ``inputs``, ``attrs``)."""

    kind = "function"

    def __init__(self, op: Primitive, inputs, attrs: dict, type_: Type, name: str = ""):
        super().__init__(type_, name)
        self.op = op
        self.inputs = tuple(inputs)
        self.attrs = attrs


def as_node(x, dtype=None) -> Variable:
    """Return ``x`` if it is a node, else wrap it as a Constant (python floats become float32)."""
    if isinstance(x, Variable):
        return x
    if hasattr(x, "__cuda_array_interface__"):
        raise GraphError("device arrays cannot be graph constants; pass numpy arrays")
    return Constant(x, dtype=dtype)


def bind(op: Primitive, inputs, name: str = "", **attrs) -> Function:
    """Apply ``op`` to ``inputs`` (nodes or constants): run its shape rule, return the node."""
    nodes = [as_node(x) for x in inputs]
    type_ = op.shape_rule(op, *nodes, **attrs)
    return Function(op, nodes, attrs, type_, name)


def input_variable(shape=(), dtype=np.float32, dynamic_axes=(SEQ, BATCH), name: str = "",
                   is_sparse: bool = False) -> Input:
    """Declare a graph input.

    shape: the static shape per frame (an int or a tuple); dynamic_axes: ``("seq", "batch")`` for
    padded sequences ``[T, B, *shape]`` (any name for the sequence axis, e.g. ``("labels",
    "batch")`` for a target sequence of other lengths), ``("batch",)`` for one item per sequence,
    ``()`` for a plain array. Integer dtypes hold class indices (labels, token ids).
    """
    if is_sparse:
        raise GraphError("sparse inputs are given as integer indices: use dtype=np.int32")
    shape = (shape,) if np.isscalar(shape) else tuple(shape)
    dynamic_axes = tuple(dynamic_axes)
    if len(dynamic_axes) > 2 or (len(dynamic_axes) == 2 and dynamic_axes[1] != BATCH) or (
            len(dynamic_axes) == 1 and dynamic_axes[0] != BATCH):
        raise GraphError(f"input '{name}': dynamic_axes must be (seq_name, 'batch'), ('batch',) "
                         f"or (); got {dynamic_axes}")
    if any(not isinstance(d, (int, np.integer)) or d < 0 for d in shape):
        raise GraphError(f"input '{name}': static shape must be non-negative ints; got {shape}")
    return Input(Type((None,) * len(dynamic_axes) + tuple(int(d) for d in shape), dynamic_axes,
                      dtype), name)


def parameter(shape, init="glorot_uniform", name: str = "", dtype=np.float32, seed=None,
              trainable: bool = True) -> Parameter:
    """Create a learnable parameter of static ``shape``.

    init: an initialiser (``asrkit.graph.init``), its name, a number or an array; ``seed`` draws
    it from its own generator instead of the shared one (``asrkit.graph.set_seed``).
    """
    shape = (shape,) if np.isscalar(shape) else tuple(int(d) for d in shape)
    value = resolve_init(init, shape, seed).astype(dtype)
    return Parameter(value, name, trainable)


def constant(value, name: str = "", dtype=None) -> Constant:
    """Create a constant node holding ``value`` (floats default to float32)."""
    return Constant(value, name, dtype)
