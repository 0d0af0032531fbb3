"""A picture of the op graph: graphviz dot source for any node's graph, and rendering it.

One dot node per op, input, parameter and constant, labelled with its name, op type and shape
(dynamic axes as ``*``: ``[*, *, 640]``); inputs, parameters and constants are drawn each in
their own style, the outputs with a double border. With ``clusters=True`` the nodes of one
layer are boxed together: a node's layer (its name scope) is its dotted name without the last
part (``layers.0.weight_ih_l0`` -> ``layers.0``, as the layers name what they build); an
unnamed op joins the scope of its parameters, or of its inputs when they all share one.

    from asrkit.graph import to_dot, write_picture
    write_picture(to_dot(ctc_loss_node), "net.svg")   # .svg/.png/.pdf need graphviz's dot
"""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np

from asrkit.graph.errors import format_shape
from asrkit.graph.node import Constant, Function, Input, Parameter
from asrkit.graph.topo import topological_order
from asrkit.utils import atomic_open

STYLES = {
    Input: 'shape=ellipse, style=filled, fillcolor="#cfe2f3"',
    Parameter: 'shape=box, style=filled, fillcolor="#fff2cc"',
    Constant: 'shape=box, style="dotted", fontsize=8, color="#999999"',
    Function: 'shape=box, style="rounded,filled", fillcolor="#f3f3f3"',
}
RENDERED = ("svg", "png", "pdf")


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _scope(name: str) -> str:
    return name.rsplit(".", 1)[0] if "." in name else ""


def _label(node) -> str:
    if isinstance(node, Function):
        kind = node.op.name
    elif isinstance(node, Constant) and node.value.size == 1:
        kind = f"constant {node.value.reshape(-1)[0]:g}"
    else:
        kind = node.kind + ("" if getattr(node, "trainable", True) else " (frozen)")
    lines = [node.name] if node.name else []
    dtype = "" if node.dtype == np.float32 else f" {node.dtype}"
    return "\n".join(lines + [kind, format_shape(node.shape) + dtype])


def layer_scopes(order) -> dict[int, str]:
    """``{id(node): scope}`` for nodes in topological ``order`` ("" for the top level)."""
    scopes: dict[int, str] = {}
    for n in order:
        scope = _scope(n.name)
        if not scope and isinstance(n, Function):
            params = {scopes[id(i)] for i in n.inputs if isinstance(i, Parameter)}
            fed = {scopes[id(i)] for i in n.inputs if not isinstance(i, Constant) or i.name}
            scope = next(iter(params)) if len(params) == 1 else (
                next(iter(fed)) if len(fed) == 1 and not params else "")
        scopes[id(n)] = scope
    users: dict[int, set] = {}
    for n in order:
        for i in n.inputs:
            users.setdefault(id(i), set()).add(scopes[id(n)])
    for n in order:  # an unnamed constant sits with the ops that use it
        if isinstance(n, Constant) and not n.name:
            used_in = users.get(id(n), set())
            scopes[id(n)] = next(iter(used_in)) if len(used_in) == 1 else ""
    return scopes


def to_dot(outputs, clusters: bool = True, constants: bool = True, title: str = "",
           rankdir: str = "TB") -> str:
    """Graphviz dot source of the graph that ``outputs`` (a node or a list) depend on.

    clusters: box each layer's nodes together (see the module docstring); constants: draw
    constant nodes (scalars show their value); title: a label over the picture; rankdir: "TB"
    (inputs at the top) or "LR". Returns the dot text.
    """
    roots = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    order = [n for n in topological_order(roots) if constants or not isinstance(n, Constant)]
    ids = {id(n): f"n{i}" for i, n in enumerate(order)}
    out_ids = {id(r) for r in roots}
    lines = ["digraph asrkit {", f"  rankdir={rankdir};",
             '  node [fontname="Helvetica", fontsize=10]; edge [color="#555555"];']
    if title:
        lines.append(f"  labelloc=t; label={_quote(title)};")
    decl = {}
    for n in order:
        extra = ", peripheries=2" if id(n) in out_ids else ""
        tip = f', tooltip={_quote("dynamic axes: " + ", ".join(n.dynamic_axes))}' \
            if n.dynamic_axes else ""
        decl[id(n)] = f"{ids[id(n)]} [label={_quote(_label(n))}, {STYLES[type(n)]}{extra}{tip}];"
    scopes = layer_scopes(order) if clusters else {}
    groups: dict[str, list] = {}
    for n in order:
        groups.setdefault(scopes.get(id(n), ""), []).append(n)
    for scope, members in groups.items():
        if not scope:
            lines += ["  " + decl[id(n)] for n in members]
            continue
        lines.append(f"  subgraph {_quote('cluster_' + scope)} {{")
        lines.append(f'    label={_quote(scope)}; style=rounded; color="#888888";')
        lines += ["    " + decl[id(n)] for n in members]
        lines.append("  }")
    for n in order:
        for i in n.inputs:
            if id(i) in ids:
                lines.append(f"  {ids[id(i)]} -> {ids[id(n)]};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render(source: str, fmt: str = "svg") -> bytes | None:
    """Run graphviz's ``dot -T<fmt>`` on ``source``; returns the picture's bytes, or None when
    graphviz is not installed or fails (a picture is never worth an error)."""
    exe = shutil.which("dot")
    if exe is None:
        return None
    try:
        return subprocess.run([exe, f"-T{fmt}"], input=source.encode(), capture_output=True,
                              timeout=120, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return None


def write_picture(source: str, path: str) -> str:
    """Write dot ``source`` to ``path``: ``.dot``/``.gv`` as text, ``.svg``/``.png``/``.pdf``
    rendered by graphviz. Without graphviz the dot text goes to ``path`` with ``.dot`` in place
    of the extension. Returns the path written."""
    stem, ext = os.path.splitext(path)
    fmt = ext[1:].lower()
    if fmt not in RENDERED + ("dot", "gv"):
        raise ValueError(f"{path}: unknown picture type {ext!r} (use .svg, .png, .pdf or .dot)")
    data = render(source, fmt) if fmt in RENDERED else None
    if data is None:
        path = path if fmt in ("dot", "gv") else stem + ".dot"
        data = source.encode()
    with atomic_open(path, "wb") as f:
        f.write(data)
    return path
