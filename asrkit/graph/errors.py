"""Errors raised while building or running a graph."""

from __future__ import annotations


class GraphError(ValueError):
    """A graph cannot be built or run as asked (missing input, bad feed, mismatched lengths)."""


class ShapeError(GraphError):
    """Shape inference failed at construction: the message names the op and the shapes at fault.

    Example: ``times(x: [*, *, 80], W: [40, 320]): inner dimensions 80 and 40 differ``.
    """


def format_shape(shape) -> str:
    """Render a full shape with dynamic dims as ``*``: ``(None, None, 80)`` -> ``[*, *, 80]``."""
    return "[" + ", ".join("*" if d is None else str(d) for d in shape) + "]"
