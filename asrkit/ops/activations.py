"""Activations built from the element-wise table's ops: Swish (SiLU) and GLU.

Both are compositions (``x * sigmoid(x)``; a split, a sigmoid and a product), so they run and
differentiate on every device the element-wise ops do. GELU is a row of the table itself
(``asrkit.ops.gelu``).
"""

from __future__ import annotations

from asrkit.ops.elementwise import mul, sigmoid
from asrkit.ops.shape_ops import slice_axis


def swish(x, name=""):
    """Swish / SiLU ``x * sigmoid(x)`` (torch.nn.SiLU, ESPnet's ``Swish``)."""
    return mul(x, sigmoid(x), name=name)


def glu(x, axis=-1, name=""):
    """Gated linear unit over static ``axis`` of even size 2C: ``a * sigmoid(b)`` with ``a``
    the first C entries and ``b`` the last (torch.nn.functional.glu)."""
    full = x.shape[axis]
    if full is None or full % 2:
        raise ValueError(f"glu: axis {axis} must have an even static size; got {full}")
    half = full // 2
    return mul(slice_axis(x, axis, 0, half), sigmoid(slice_axis(x, axis, half, full)),
               name=name)


__all__ = ["glu", "swish"]
