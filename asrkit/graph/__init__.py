"""The graph engine (``asrkit.graph``): nodes, shape inference, autodiff, planner, executor.

Build a graph with ``input_variable``, ``parameter``, ``constant`` and the ops of ``asrkit.ops``
(or operators: ``x @ W + b``); evaluate any node with ``node.eval({x: (array, lengths)})``; get
gradients with ``grad(loss, wrt=[...], inputs=feeds)``. See README "Graph engine".
"""

from asrkit.graph.autodiff import grad, value_and_grad
from asrkit.graph.dot import to_dot, write_picture
from asrkit.graph.errors import GraphError, ShapeError
from asrkit.graph.executor import Executor, evaluate, forward_backward, get_plan
from asrkit.graph.gradcheck import check_grads
from asrkit.graph.init import set_seed
from asrkit.graph.inspect import find_by_name, summary
from asrkit.graph.node import (
    BATCH,
    SEQ,
    Constant,
    Function,
    Input,
    Parameter,
    Variable,
    bind,
    constant,
    input_variable,
    parameter,
)
from asrkit.graph.planner import Plan
from asrkit.graph.primitive import PRIMITIVES, OpContext, Primitive, Type
from asrkit.graph.sequence import Sequence
from asrkit.graph.serialize import Model, load_model, save_model

__all__ = [
    "BATCH", "SEQ", "Constant", "Executor", "Function", "GraphError", "Input", "Model",
    "OpContext", "PRIMITIVES", "Parameter", "Plan", "Primitive", "Sequence", "ShapeError", "Type",
    "Variable", "bind", "check_grads", "constant", "evaluate", "find_by_name", "forward_backward",
    "get_plan", "grad", "input_variable", "load_model", "parameter", "save_model", "set_seed",
    "summary", "to_dot", "value_and_grad", "write_picture",
]
