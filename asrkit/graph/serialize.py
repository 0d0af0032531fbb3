"""Model files: one ``.npz`` holding the graph description (JSON) and every parameter.

Loading rebuilds the graph from the op registry alone (``PRIMITIVES``: import ``asrkit.ops``, or
the module of a custom op, first), re-running each shape rule, so a model file needs no recipe
or layer code. The file is written atomically.

Layout: an archive (:mod:`asrkit.utils.archive`) whose JSON header is the graph (nodes in
topological order, named outputs, metadata) and whose arrays are the parameters
(``param/<index>``) and constants (``const/<index>``).
"""

from __future__ import annotations

import numpy as np

from asrkit.graph.errors import GraphError
from asrkit.graph.node import Constant, Function, Input, Parameter, bind
from asrkit.graph.primitive import PRIMITIVES
from asrkit.graph.step import StepGraph
from asrkit.graph.topo import topological_order
from asrkit.utils.archive import Archive, ArchiveError, save_archive

FORMAT, VERSION = "asrkit-graph", 1


def _encode(v, ids=None):
    if hasattr(v, "h_prev") and hasattr(v, "h_t"):  # a recurrence's step graph
        return {"__step__": [ids[id(v.h_prev)], ids[id(v.x_t)], ids[id(v.h_t)]]}
    if isinstance(v, tuple):
        return {"__tuple__": [_encode(x) for x in v]}
    if isinstance(v, list):
        return [_encode(x) for x in v]
    if isinstance(v, dict):
        return {"__dict__": {k: _encode(x) for k, x in v.items()}}
    if isinstance(v, np.generic):
        return v.item()
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    raise GraphError(f"cannot store attribute value {v!r} ({type(v).__name__}) in a model file")


def _decode(v, built=None):
    if isinstance(v, dict):
        if "__step__" in v:
            return StepGraph.from_nodes(*[built[i] for i in v["__step__"]])
        if "__tuple__" in v:
            return tuple(_decode(x) for x in v["__tuple__"])
        return {k: _decode(x) for k, x in v["__dict__"].items()}
    if isinstance(v, list):
        return [_decode(x) for x in v]
    return v


class Model:
    """A loaded model: named ``outputs``, its ``inputs`` by name, and its ``parameters``."""

    def __init__(self, outputs: dict, metadata: dict):
        self.outputs = outputs
        order = topological_order(list(outputs.values()))
        self.inputs = {n.name: n for n in order if isinstance(n, Input)}
        self.parameters = [n for n in order if isinstance(n, Parameter)]
        self.metadata = metadata

    def __getitem__(self, name):
        return self.outputs[name]


def _order_with_steps(roots):
    """Topological order that also holds the step graphs of recurrences, each before its user."""
    steps: list = []
    while True:
        order = topological_order(steps + roots)
        found = [v.h_t for n in order if isinstance(n, Function) for v in n.attrs.values()
                 if hasattr(v, "h_prev") and hasattr(v, "h_t")]
        new = [h for h in found if all(h is not s for s in steps)]
        if not new:
            return order
        steps = new + steps


def save_model(path, outputs, metadata: dict | None = None) -> None:
    """Write ``outputs`` (a node, a list, or ``{name: node}``) and their graph to ``path``.

    Inputs should be named (feeds are then given by name after loading). metadata: any JSON
    dict stored alongside (e.g. the feature configuration).
    """
    if not isinstance(outputs, dict):
        outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
        outputs = {(o.name or f"output{i}"): o for i, o in enumerate(outputs)}
    order = _order_with_steps(list(outputs.values()))
    ids = {id(n): i for i, n in enumerate(order)}
    arrays, nodes = {}, []
    for i, n in enumerate(order):
        rec = {"id": i, "name": n.name}
        if isinstance(n, Input):
            rec.update(kind="input", shape=list(n.static_shape), dtype=n.dtype.str,
                       dynamic_axes=list(n.dynamic_axes))
        elif isinstance(n, Parameter):
            key = f"param/{i}"
            arrays[key] = n.value
            rec.update(kind="parameter", array=key, trainable=n.trainable)
        elif isinstance(n, Constant):
            key = f"const/{i}"
            arrays[key] = n.value
            rec.update(kind="constant", array=key)
        elif isinstance(n, Function):
            rec.update(kind="function", op=n.op.name, inputs=[ids[id(x)] for x in n.inputs],
                       attrs={k: _encode(v, ids) for k, v in n.attrs.items()})
        else:
            raise GraphError(f"cannot store node {n!r}")
        nodes.append(rec)
    graph = {"format": FORMAT, "version": VERSION, "nodes": nodes,
             "outputs": {k: ids[id(v)] for k, v in outputs.items()},
             "metadata": metadata or {}}
    save_archive(path, graph, arrays)


def load_model(path) -> Model:
    """Read a model file written by :func:`save_model`; returns a :class:`Model`.

    Its ops must be registered: ``import asrkit.ops`` (and the modules of any custom ops).
    """
    try:
        with Archive(path) as archive:
            graph = archive.header
            data = {name: archive.read(name) for name in archive.names}
    except ArchiveError as e:
        raise GraphError(f"{path}: not an asrkit model file ({e})") from None
    if graph.get("format") != FORMAT or graph.get("version", 0) > VERSION:
        raise GraphError(f"{path}: unsupported model format {graph.get('format')!r} "
                         f"version {graph.get('version')!r}")
    built = []
    for rec in graph["nodes"]:
        kind, name = rec["kind"], rec["name"]
        if kind == "input":
            from asrkit.graph.node import input_variable

            n = input_variable(tuple(rec["shape"]), np.dtype(rec["dtype"]),
                               tuple(rec["dynamic_axes"]), name)
        elif kind == "parameter":
            n = Parameter(np.array(data[rec["array"]]), name, rec.get("trainable", True))
        elif kind == "constant":
            n = Constant(np.array(data[rec["array"]]), name)
        else:
            op = PRIMITIVES.get(rec["op"])
            if op is None:
                raise GraphError(f"{path}: node {rec['id']} uses op {rec['op']!r}, which no "
                                 "imported module registers (import asrkit.ops first)")
            attrs = {k: _decode(v, built) for k, v in rec["attrs"].items()}
            n = bind(op, [built[i] for i in rec["inputs"]], name=name, **attrs)
        built.append(n)
    outputs = {k: built[i] for k, i in graph["outputs"].items()}
    return Model(outputs, graph.get("metadata", {}))

