"""The planner: liveness, buffer reuse and recomputation never change results."""

import zlib

import numpy as np
import pytest

import asrkit.ops as O
from asrkit.graph import Executor, get_plan, input_variable, parameter
from asrkit.graph.planner import RECOMPUTE, Plan
from tests.graph._cases import CASES


def _mlp(rng, layers=4, D=16):
    x = input_variable(D, name="x")
    h = x
    params = []
    for i in range(layers):
        W = parameter((D, D), init=rng.standard_normal((D, D)) * 0.3, name=f"W{i}")
        b = parameter(D, init=0.1, name=f"b{i}")
        params += [W, b]
        h = O.tanh(O.relu(h @ W + b) * 1.5 - 0.2)
    return x, params, O.sum_all(O.sigmoid(h))


def _run(plan, feeds, **kw):
    return Executor(plan, "cpu").run(feeds, **kw)


@pytest.mark.parametrize("recompute", [False, True])
def test_reuse_and_recompute_do_not_change_forward_or_gradients(recompute, rng):
    x, params, loss = _mlp(rng)
    feeds = {x: (rng.standard_normal((7, 3, 16)).astype(np.float32), [7, 5, 2])}
    naive = Plan([loss], wrt=params, root=loss, reuse=False)
    planned = Plan([loss], wrt=params, root=loss, reuse=True, recompute=recompute)
    a = _run(naive, feeds)
    for _ in range(2):  # slot buffers persist between runs
        b = _run(planned, feeds)
        np.testing.assert_array_equal(a.outputs[0], b.outputs[0])
        for p in params:
            np.testing.assert_array_equal(a.grads[p], b.grads[p])
    assert planned.n_slots > 0
    if recompute:
        assert planned.recomputed and any(s.kind == RECOMPUTE for s in planned.steps)


def test_forward_reuse_shares_slots_and_lowers_peak_memory(rng):
    x, params, loss = _mlp(rng, layers=6)
    feeds = {x: (rng.standard_normal((50, 4, 16)).astype(np.float32), [50, 40, 30, 20])}
    eval_plan = Plan([loss])
    slots = [s.slot for s in eval_plan.steps if s.slot is not None]
    assert len(slots) > eval_plan.n_slots  # several nodes share each slot
    res = _run(eval_plan, feeds)
    report = eval_plan.memory_report(res.sizes)
    assert report["planned_bytes"] < report["naive_bytes"] / 3
    train = Plan([loss], wrt=params, root=loss)
    mirror = Plan([loss], wrt=params, root=loss, recompute=True)
    rt = train.memory_report(_run(train, feeds).sizes)
    rm = mirror.memory_report(_run(mirror, feeds).sizes)
    assert rt["planned_bytes"] < rt["naive_bytes"]
    assert rm["planned_bytes"] < rt["planned_bytes"]


def test_outputs_are_never_overwritten_by_later_runs(rng):
    x = input_variable(4)
    h = O.tanh(x * 2.0)
    y = O.exp(h) + 1.0
    plan = get_plan([h, y])
    ex = Executor(plan, "cpu")
    d1 = rng.standard_normal((3, 2, 4)).astype(np.float32)
    r1 = ex.run({x: d1})
    kept = [o.copy() for o in r1.outputs]
    ex.run({x: rng.standard_normal((3, 2, 4)).astype(np.float32)})
    for o, k in zip(r1.outputs, kept):
        np.testing.assert_array_equal(o, k)


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_case_gives_identical_results_with_and_without_reuse(name):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    node, feeds, opts = CASES[name](rng)
    wrt = [p for p in node.parameters if p.trainable] + \
          [i for i in node.arguments if i.dtype.kind == "f"]
    a = _run(Plan([node], wrt=wrt, root=node, reuse=False), feeds, train=opts.get("train", False))
    b = _run(Plan([node], wrt=wrt, root=node, recompute=True), feeds,
             train=opts.get("train", False))
    np.testing.assert_array_equal(a.outputs[0], b.outputs[0])
    for w in wrt:
        np.testing.assert_array_equal(a.grads[w], b.grads[w])


def test_inputs_held_by_an_lstm_cache_stay_alive_until_its_backward():
    name = "lstm[after_dense_slot_reuse]"
    node, _, _ = CASES[name](np.random.default_rng(zlib.crc32(name.encode())))
    plan = Plan([node], wrt=node.parameters, root=node)
    lstm_bwd = next(i for i, s in enumerate(plan.steps)
                    if s.kind == "bwd" and s.node.op.name == "lstm")
    lstm = plan.steps[lstm_bwd].node
    for i, s in enumerate(plan.steps):
        for v in s.free_values:
            if v in lstm.inputs:
                assert i >= lstm_bwd, f"{v!r} freed at step {i}, before the LSTM backward"


def test_recurrent_outputs_read_by_their_cache_stay_alive_and_unslotted():
    """The CPU LSTM cache reads the layer's own output y in the backward (h_prev of dW_hh): the
    planner must keep y until the op's backward and never lend its storage to another node."""
    for name in ("lstm[after_dense_slot_reuse]", "blstm"):
        node, _, _ = CASES[name](np.random.default_rng(zlib.crc32(name.encode())))
        plan = Plan([node], wrt=node.parameters, root=node)
        for i, s in enumerate(plan.steps):
            if s.kind == "fwd" and s.node.op.name in ("lstm", "blstm"):
                assert s.slot is None
                rnn, fwd = s.node, i
        bwd = next(i for i, s in enumerate(plan.steps) if s.kind == "bwd" and s.node is rnn)
        assert plan.value_death[(rnn, 0)] >= bwd > fwd
