"""Side-by-side benchmarks: asrkit against a reference library, in one process.

Each module here that defines ``NAME``, ``HELP``, ``add_arguments(parser)`` and
``run(args) -> list[Case]`` is a benchmark, reached as ``asrkit bench NAME``. Timings are medians
of repeated runs after a warm-up (which also triggers Numba compilation), and the figure that
matters is the ratio, since these shared machines are noisy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable


@dataclasses.dataclass
class Case:
    """One benchmark case: asrkit's and the reference's median seconds (and optional extras)."""

    name: str
    asrkit_s: float
    reference: str
    reference_s: float | None
    extra: dict = dataclasses.field(default_factory=dict)
    asrkit_spread: tuple[float, float] | None = None     # first and third quartiles, seconds
    reference_spread: tuple[float, float] | None = None

    @property
    def speedup(self) -> float | None:
        """reference time / asrkit time: above 1 means asrkit is faster."""
        if self.reference_s is None or self.asrkit_s <= 0:
            return None
        return self.reference_s / self.asrkit_s

    def as_dict(self) -> dict:
        """JSON-ready dict of the case."""
        d = dataclasses.asdict(self)
        d["speedup"] = self.speedup
        return d


def median_time(fn: Callable[[], object], repeat: int = 5, warmup: int = 1,
                min_time: float = 0.0) -> float:
    """Median wall time in seconds of ``fn()`` over ``repeat`` runs after ``warmup`` runs.

    With ``min_time`` > 0, keeps running until that many seconds have been spent in total, so
    that very short calls are timed often enough. (In-process; to time each side of a
    comparison in its own process, see ``asrkit.bench.sides``.)
    """
    from asrkit.bench.sides import time_runs

    return time_runs(fn, repeat=repeat, warmup=warmup, min_time=min_time).median


def format_cases(title: str, cases: list[Case]) -> str:
    """Render cases as an aligned text table with the speed-up ratio column."""
    lines = [title, f"{'case':40s} {'asrkit':>10s} {'reference':>22s} {'ratio':>8s}"]
    for c in cases:
        ref = "-" if c.reference_s is None else f"{c.reference}: {c.reference_s * 1e3:.1f}ms"
        ratio = "-" if c.speedup is None else f"{c.speedup:.2f}x"
        lines.append(f"{c.name:40s} {c.asrkit_s * 1e3:8.1f}ms {ref:>22s} {ratio:>8s}")
        for side, q in (("asrkit", c.asrkit_spread), (c.reference, c.reference_spread)):
            if q is not None:
                lines.append(f"    {side} spread (quartiles): {q[0] * 1e3:.1f}-{q[1] * 1e3:.1f}ms")
        for k, v in c.extra.items():
            lines.append(f"    {k}: {v}")
    lines.append("ratio = reference time / asrkit time (above 1: asrkit is faster)")
    return "\n".join(lines)
