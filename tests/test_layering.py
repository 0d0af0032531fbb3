"""The import layering of DESIGN.md, checked on the source.

kernels <- graph/ops <- layers, losses, learners <- distributed, config, export <- recognizer
(using a model) <- cli, bench, serve. features and io need no graph; lm needs nothing above kernels;
decoders may use lm and kernels (and features/io), never the graph. utils sits below everything.
"""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

# source folder -> the asrkit module it installs as
FOLDERS = {
    "asrkit": "asrkit",
    "kernels": "asrkit.kernels",
    "lm": "asrkit.lm",
    "decoders": "asrkit.decoders",
}

BASE = {"asrkit.utils", "asrkit._lazy", "asrkit._blas"}
LOW = BASE | {"asrkit.kernels"}
GRAPH = LOW | {"asrkit.graph"}
OPS = GRAPH | {"asrkit.ops"}
MODEL = OPS | {"asrkit.layers", "asrkit.losses", "asrkit.learners", "asrkit.features",
                 "asrkit.io"}
UPPER = MODEL | {"asrkit.distributed", "asrkit.config", "asrkit.export", "asrkit.lm",
                 "asrkit.decoders", "asrkit.training", "asrkit.models",
                 "asrkit.nnlm"}
USING = UPPER | {"asrkit.recognizer"}
EVERYTHING = USING | {"asrkit.cli", "asrkit.bench", "asrkit.report", "asrkit.serve"}

# component -> components it may import (a component may always import itself)
ALLOWED = {
    "asrkit.utils": set(),
    "asrkit._lazy": set(),
    "asrkit._blas": set(),
    "asrkit.kernels": BASE,
    "asrkit.features": LOW | {"asrkit.io"},
    "asrkit.io": LOW | {"asrkit.features"},
    "asrkit.lm": LOW,
    "asrkit.decoders": LOW | {"asrkit.lm", "asrkit.features", "asrkit.io"},
    "asrkit.graph": GRAPH,
    "asrkit.ops": OPS,
    "asrkit.layers": OPS | {"asrkit.layers", "asrkit.losses"},
    "asrkit.losses": OPS,
    "asrkit.learners": OPS | {"asrkit.layers", "asrkit.losses"},
    "asrkit.distributed": MODEL | {"asrkit.config"},
    "asrkit.config": MODEL,
    "asrkit.export": MODEL | {"asrkit.config", "asrkit.models"},
    "asrkit.training": MODEL | {"asrkit.distributed", "asrkit.config", "asrkit.models"},
    "asrkit.models": MODEL | {"asrkit.config"},
    "asrkit.nnlm": MODEL | {"asrkit.lm"},
    "asrkit.recognizer": USING,
    "asrkit.cli": EVERYTHING,
    "asrkit.bench": EVERYTHING,
    "asrkit.report": EVERYTHING,
    "asrkit.serve": EVERYTHING,
}


def _component(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "asrkit":
        return None
    if len(parts) == 1 or parts[1] in ("__init__", "__main__"):
        return "asrkit"
    return "asrkit." + parts[1]


def _source_files():
    for folder, pkg in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            yield path, ".".join([pkg, *parts])


def _imports(path: pathlib.Path, module: str):
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            yield node.lineno, name
            if name == "asrkit":  # `from asrkit import ops` imports asrkit.ops
                for alias in node.names:
                    yield node.lineno, f"asrkit.{alias.name}"


CASES = list(_source_files())


@pytest.mark.parametrize("path,module", CASES, ids=[m for _, m in CASES])
def test_imports_follow_design_layering(path, module):
    me = _component(module)
    if me == "asrkit":
        allowed = EVERYTHING  # asrkit/__init__.py and __main__.py
    else:
        assert me in ALLOWED, f"{module}: component {me} is not in the layering table"
        allowed = ALLOWED[me] | {me}
    for lineno, name in _imports(path, module):
        other = _component(name)
        if other is None or other == "asrkit" and name == "asrkit":
            continue
        assert other in allowed, (
            f"{path.relative_to(ROOT)}:{lineno}: {me} may not import {name} (DESIGN.md layering)")


def test_no_generic_top_level_packages_installed():
    import importlib.util

    import asrkit.kernels

    assert asrkit.kernels.__name__ == "asrkit.kernels"
    for name in ("kernels", "lm", "decoders"):
        spec = importlib.util.find_spec(name)
        assert spec is None or "site-packages" not in str(spec.origin or ""), name
