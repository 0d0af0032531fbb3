"""Benchmarks that run asrkit and a reference library side by side and print ratios.

Examples:
  asrkit bench fbank
  asrkit bench ctc --json
"""

from __future__ import annotations

import importlib
import json
import pkgutil

COMMAND = "bench"
HELP = "benchmark asrkit against reference libraries (ratios; --json for programs)"


def _bench_modules() -> dict:
    import asrkit.bench as pkg

    mods = {}
    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"asrkit.bench.{info.name}")
        if hasattr(mod, "NAME"):
            mods[mod.NAME] = mod
    return dict(sorted(mods.items()))


def add_arguments(parser) -> None:
    """Add one sub-subcommand per benchmark module."""
    sub = parser.add_subparsers(dest="bench_name", metavar="NAME", required=True)
    for name, mod in _bench_modules().items():
        p = sub.add_parser(name, help=mod.HELP, description=mod.__doc__)
        p.add_argument("--json", action="store_true", help="print results as JSON")
        p.add_argument("--repeat", type=int, default=5, help="timed runs per case (median)")
        mod.add_arguments(p)
        p.set_defaults(_bench=mod)


def run(args) -> int:
    """Run the chosen benchmark and print its table or JSON."""
    from asrkit.bench import format_cases

    mod = args._bench
    cases = mod.run(args)
    if args.json:
        print(json.dumps({"bench": mod.NAME, "cases": [c.as_dict() for c in cases]}, indent=2))
    else:
        print(format_cases(f"asrkit bench {mod.NAME}", cases))
    return 0
