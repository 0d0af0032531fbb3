"""Finite-difference checks (float64) of every differentiable primitive in the catalogue."""

import zlib

import numpy as np
import pytest

import asrkit.ops  # noqa: F401  (registers the catalogue)
from asrkit.graph import PRIMITIVES, check_grads, input_variable, parameter
from tests.graph._cases import CASES


def test_every_differentiable_primitive_has_a_gradient_case():
    covered = {name.split("[")[0] for name in CASES}
    ours = {n: p for n, p in PRIMITIVES.items()  # other components register their own ops
            if p.forward.__module__.startswith("asrkit.ops.")}
    assert len(ours) > 60
    missing = sorted(n for n, p in ours.items() if p.differentiable and n not in covered
                     and n != "stop_gradient")
    assert not missing, f"primitives without a gradient check: {missing}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_match_finite_differences(name):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    node, feeds, opts = CASES[name](rng)
    numeric, analytic = check_grads(node, feeds, eps=1e-6, tol=1e-6, train=opts.get("train", False))
    assert np.isfinite(numeric)


def test_check_grads_catches_a_wrong_gradient():
    from asrkit.graph import Primitive, bind
    from asrkit.graph.primitive import PRIMITIVES as REG

    def fwd(ctx, x):
        return x * x

    def wrong(ctx, g, y, x):
        return (g * x,)  # should be 2 g x

    try:
        bad = Primitive("test_bad_square", ("x",), lambda p, x: x.type, fwd, wrong)
        x = input_variable(2)
        node = bind(bad, [x]) * parameter(2, init=1.0)
        with pytest.raises(AssertionError, match="gradient check failed"):
            check_grads(node, {x: np.ones((2, 1, 2)) * 0.7})
    finally:
        REG.pop("test_bad_square", None)
