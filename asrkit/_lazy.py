"""Lazy re-exports for package ``__init__`` files (PEP 562).

A package lists ``name -> module`` and gets a module-level ``__getattr__`` that imports the module
on first use, so ``from asrkit.features import fbank`` works while ``import asrkit.features``
stays cheap and no module is loaded that the caller does not use.
"""

from __future__ import annotations

import importlib


def lazy_exports(package: str, exports: dict[str, str]):
    """Return ``(__getattr__, __dir__)`` for ``package`` exporting ``exports`` (name -> module)."""

    def __getattr__(name: str):
        try:
            module = exports[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        return getattr(importlib.import_module(module), name)

    def __dir__():
        return sorted(exports)

    return __getattr__, __dir__
