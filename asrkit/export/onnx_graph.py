"""A small ONNX graph builder over ``onnx.helper``: unique names, initialisers, constants.

The exporter emits nodes through :class:`GraphBuilder` so names never clash, weights become
initialisers of the outermost graph, and a subgraph (a Scan body) shares the name counter with
its parent, so its names never shadow an outer one.
"""

from __future__ import annotations

import numpy as np


class GraphBuilder:
    """Collects the nodes, initialisers and value infos of one ONNX graph.

    ``parent``: the enclosing builder of a subgraph (names are drawn from the root's counter and
    weights are placed in the root graph, which a subgraph may read by name).
    """

    def __init__(self, parent: GraphBuilder | None = None):
        import onnx.helper  # noqa: F401  (fail here, with the import error, if onnx is missing)

        self.parent = parent
        self.nodes: list = []
        self.initializers: list = []
        self._counter = [0] if parent is None else parent._counter
        self._constants: dict = {} if parent is None else parent._constants

    @property
    def root(self) -> GraphBuilder:
        """The outermost builder."""
        return self if self.parent is None else self.parent.root

    def fresh(self, hint: str) -> str:
        """A new unique value name starting with ``hint``."""
        self._counter[0] += 1
        return f"{hint}_{self._counter[0]}"

    def op(self, op_type: str, inputs: list[str], hint: str | None = None, outputs: int = 1,
           names: list[str] | None = None, **attrs):
        """Add a node; returns its output name (or a list of names when ``outputs`` > 1)."""
        from onnx import helper

        outs = names or [self.fresh(hint or op_type.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs,
                                           name=self.fresh(f"n_{op_type}"), **attrs))
        return outs[0] if outputs == 1 and names is None else outs

    def weight(self, array: np.ndarray, hint: str) -> str:
        """Store ``array`` (float32 unless integer) as an initialiser of the root graph."""
        from onnx import numpy_helper

        array = np.asarray(array)
        if array.dtype.kind == "f":
            array = array.astype(np.float32)
        root = self.root
        name = root.fresh(hint)
        root.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def const(self, value, dtype=np.int64) -> str:
        """A shared constant tensor (small shapes, axes, scalars), stored once per value."""
        array = np.asarray(value, dtype)
        key = (array.dtype.str, array.shape, array.tobytes())
        if key not in self._constants:
            self._constants[key] = self.root.weight(array, "const")
        return self._constants[key]

    def make_graph(self, name: str, inputs: list, outputs: list):
        """The ``GraphProto`` of everything added (initialisers only in the root graph)."""
        from onnx import helper

        inits = self.initializers if self.parent is None else []
        return helper.make_graph(self.nodes, name, inputs, outputs, initializer=inits)
