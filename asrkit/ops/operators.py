"""Operator sugar on graph nodes, attached by the catalogue (the graph never imports it).

``x + y``, ``x - y``, ``x * y``, ``x / y``, ``x ** y``, ``x @ W`` (``times``), ``-x`` and
``x[..., a:b]`` (``getitem`` on static axes) build ops; python and numpy scalars on either side
become constants.
"""

from __future__ import annotations

from asrkit.graph.node import Variable
from asrkit.ops.elementwise import add, div, mul, neg, pow, sub
from asrkit.ops.linalg import times
from asrkit.ops.shape_ops import getitem


def _left(op):
    def method(self, other):
        return op(self, other)
    return method


def _right(op):
    def method(self, other):
        return op(other, self)
    return method


for _name, _op in (("add", add), ("sub", sub), ("mul", mul), ("truediv", div), ("pow", pow),
                   ("matmul", times)):
    setattr(Variable, f"__{_name}__", _left(_op))
    setattr(Variable, f"__r{_name}__", _right(_op))
Variable.__neg__ = lambda self: neg(self)
Variable.__getitem__ = lambda self, key: getitem(self, key)
