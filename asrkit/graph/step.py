"""The step of a scan: a small graph ``h_t = step(h_prev, x_t)`` compiled once.

A recurrence op (``asrkit.ops.recurrence``) holds one as an attribute and runs its plans frame
by frame; model files store it as its three nodes and rebuild it with :meth:`StepGraph.from_nodes`.
"""

from __future__ import annotations

from asrkit.graph.executor import get_plan
from asrkit.graph.node import BATCH, Input, Parameter, input_variable
from asrkit.graph.topo import topological_order


class StepGraph:
    """A compiled step: inputs ``h_prev``, ``x_t`` (batch axis only), output ``h_t``, and the
    parameters it captures (which become inputs of the recurrence op)."""

    def __init__(self, step, state_shape, frame_shape, dtype):
        h_prev = input_variable(state_shape, dtype, (BATCH,), name="h_prev")
        x_t = input_variable(frame_shape, dtype, (BATCH,), name="x_t")
        self._compile(h_prev, x_t, step(h_prev, x_t))

    @classmethod
    def from_nodes(cls, h_prev, x_t, h_t) -> StepGraph:
        """Wrap an already built step graph (model files rebuild it this way)."""
        self = cls.__new__(cls)
        self._compile(h_prev, x_t, h_t)
        return self

    def _compile(self, h_prev, x_t, h_t):
        self.h_prev, self.x_t, self.h_t = h_prev, x_t, h_t
        order = topological_order([self.h_t])
        stray = [n for n in order if isinstance(n, Input) and n not in (self.h_prev, self.x_t)]
        if stray:
            raise ValueError(f"recurrence: the step uses graph input {stray[0]!r}; pass "
                             "per-frame inputs through x (splice them) instead")
        self.params = [n for n in order if isinstance(n, Parameter)]
        self.forward_plan = get_plan([self.h_t])
        self.grad_plan = get_plan([self.h_t], wrt=[self.h_prev, self.x_t, *self.params],
                                  root=self.h_t)

    def __repr__(self):
        return f"StepGraph({self.h_t!r})"
