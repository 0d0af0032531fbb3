"""Execution backends, one module per device, found by name (``cpu``, ``cuda``).

A backend moves arrays between host and device and runs the few array operations the engine
itself needs (zeroing padding, accumulating and reducing gradients). Ops pick their own
per-device forward from ``Primitive.impls``; the cuda backend falls back loudly to the host for
ops that have no CUDA implementation yet.
"""

from __future__ import annotations

import importlib

_BACKENDS: dict = {}


def get_backend(device: str):
    """Return the backend object for ``device`` ("cpu" or "cuda"); cached."""
    if device not in ("cpu", "cuda"):
        raise ValueError(f"unknown device {device!r}; the graph runs on 'cpu' or 'cuda'")
    if device not in _BACKENDS:
        _BACKENDS[device] = importlib.import_module(f"asrkit.graph.backends.{device}").Backend()
    return _BACKENDS[device]
