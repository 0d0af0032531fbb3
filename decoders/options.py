"""Checks of the numbers a user gives a search (beams, counts, scales), shared by the decoders.

Each raises ValueError naming the option, so every command and API that takes the option
reports a bad value the same way: ``beam must be a finite number > 0, got -5.0``.
"""

from __future__ import annotations

import math
import numbers


def finite(name: str, value, low: float = -math.inf, strict: bool = False,
           allow_inf: bool = False) -> float:
    """``value`` as a float when it is a real number (not NaN; +inf only with ``allow_inf``)
    above ``low`` (``> low`` with ``strict``, else ``>= low``); ValueError otherwise."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    v = float(value) if ok else math.nan
    ok = ok and not math.isnan(v) and (allow_inf or math.isfinite(v)) and v != -math.inf
    ok = ok and (v > low if strict else v >= low)
    if not ok:
        what = "a number" if allow_inf else "a finite number"
        bound = "" if low == -math.inf else f" {'>' if strict else '>='} {low:g}"
        raise ValueError(f"{name} must be {what}{bound}, got {value!r}")
    return v


def count(name: str, value, low: int = 1) -> int:
    """``value`` as an int when it is an integer >= ``low``; ValueError otherwise."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)
