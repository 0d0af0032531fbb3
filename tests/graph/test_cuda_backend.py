"""The same graphs on the cuda backend (numba's simulator without a GPU) and on the cpu.

Every op of the catalogue has a device path and must run without touching the host fallback
(no RuntimeWarning). Gradients are checked for the parameters and for
the float inputs, so every backward runs too."""

import warnings
import zlib

import numpy as np
import pytest

from asrkit.graph import Sequence, forward_backward
from asrkit.graph.backends import cuda as cuda_backend
from asrkit.graph.node import Input
from tests.graph._cases import CASES


def _wrt(node, feeds):
    params = [p for p in node.parameters if p.trainable]
    inputs = [n for n in feeds if isinstance(n, Input) and np.dtype(n.dtype).kind == "f"]
    return params + inputs


@pytest.mark.cuda
@pytest.mark.parametrize("name", sorted(CASES))
def test_case_matches_cpu_on_cuda_backend(name):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    node, feeds, opts = CASES[name](rng)
    feeds = {k: (v[0].astype(np.float32) if v[0].dtype == np.float64 else v[0], v[1])
             for k, v in feeds.items()}
    wrt = _wrt(node, feeds)
    train = opts.get("train", False)
    results = []
    for device in ("cpu", "cuda"):
        cuda_backend._warned.clear()  # fallback warnings are issued once per process
        with warnings.catch_warnings():
            warnings.simplefilter("error" if device == "cuda" else "ignore", RuntimeWarning)
            results.append(forward_backward(node, wrt, feeds, train=train, device=device,
                                            seed=3))
    (vc, gc), (vd, gd) = results
    a, b = vc[0], vd[0]
    if isinstance(a, Sequence):
        np.testing.assert_array_equal(a.lengths, b.lengths)
        a, b = a.data, b.data
    np.testing.assert_allclose(b, a, rtol=2e-4, atol=1e-5)
    for p in wrt:
        np.testing.assert_allclose(gd[p], gc[p], rtol=2e-4, atol=1e-5, err_msg=p.name)


def _extra_cases():
    """Graphs beyond the catalogue cases: other axes and ranks, empty sequences, metrics."""
    import asrkit.ops as O
    from asrkit.graph import parameter
    from tests.graph._cases import param, seq

    def concat_axis0(rng):
        a, fa = seq(rng, dims=(2, 3), name="a")
        c, fc = seq(rng, dims=(1, 3), name="c")
        return O.splice(a, c, axis=0) * param(rng, (3, 3)), {a: fa, c: fc}

    def index_and_broadcast(rng):
        x, fx = seq(rng, dims=(2, 3))
        d, fd = seq(rng, dims=(2, 1), name="d", positive=True)
        return x[..., 1, :] / d[..., 0, :] + O.reduce_max(x, axis=0), {x: fx, d: fd}

    def empty_sequences(rng):
        x, (data, _) = seq(rng, D=2)
        L = np.array([4, 0, 2], np.int32)
        init = param(rng, (2,), "h0")
        y = O.past_value(x, init, time_step=6) + O.future_value(x, init, time_step=1)
        pooled = O.avg_pool1d(O.stack_frames(y, 2, 1), 2, 1, "same")
        out = O.splice(O.sequence_mean(pooled), O.sequence_last(x), O.sequence_max(x),
                       O.sequence_first(O.softmax(x, axis="seq")))
        return out * param(rng, (10,), "w"), {x: (data, L)}

    def batch_norm_rank4(rng):
        x, fx = seq(rng, dims=(2, 4))
        rm = parameter(4, init=0.0, name="rm", trainable=False)
        rv = parameter(4, init=1.0, name="rv", trainable=False)
        y = O.batch_norm(x, param(rng, (4,), "g"), param(rng, (4,), "b"), rm, rv)
        return O.max_all(y - 5.0) + O.mean_all(O.abs(y)), {x: fx}

    def static_matmul(rng):
        a = param(rng, (2, 3), "a")
        return O.matmul(a, param(rng, (3, 4), "b")), {}

    return {"concat[axis0]": concat_axis0, "getitem[int]+div[broadcast]": index_and_broadcast,
            "empty_sequences": empty_sequences, "batch_norm[rank4]+max_all": batch_norm_rank4,
            "matmul[static]": static_matmul}


EXTRA = _extra_cases()


@pytest.mark.cuda
@pytest.mark.parametrize("name", sorted(EXTRA))
def test_more_graphs_match_cpu_on_cuda_backend(name):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    node, feeds = EXTRA[name](rng)
    feeds = {k: (v[0].astype(np.float32), v[1]) for k, v in feeds.items()}
    wrt = _wrt(node, feeds)
    results = []
    for device in ("cpu", "cuda"):
        cuda_backend._warned.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("error" if device == "cuda" else "ignore", RuntimeWarning)
            results.append(forward_backward(node, wrt, feeds, train=True, device=device,
                                            seed=3))
    (vc, gc), (vd, gd) = results
    a, b = vc[0], vd[0]
    if isinstance(a, Sequence):
        np.testing.assert_array_equal(a.lengths, b.lengths)
        a, b = a.data, b.data
    np.testing.assert_allclose(b, a, rtol=2e-4, atol=1e-5)
    for p in wrt:
        np.testing.assert_allclose(gd[p], gc[p], rtol=2e-4, atol=1e-5, err_msg=p.name)


@pytest.mark.cuda
def test_metrics_on_the_device_match_cpu(rng):
    import asrkit.ops as O
    from asrkit.graph import evaluate, input_variable

    z = input_variable(5, name="z")
    frame_labels = input_variable((), dtype=np.int32, name="y")
    labels = input_variable((), dtype=np.int32, dynamic_axes=("labels", "batch"), name="lab")
    L = np.array([6, 3, 0], np.int32)
    feeds = {z: (rng.standard_normal((6, 3, 5)).astype(np.float32), L),
             frame_labels: (rng.integers(-1, 5, (6, 3)).astype(np.int32), L),
             labels: (rng.integers(1, 5, (3, 3)).astype(np.int32), np.array([3, 1, 0], np.int32))}
    outs = [O.classification_error(z, frame_labels), O.ctc_greedy_errors(z, labels),
            O.sequence_lengths(z)]
    cuda_backend._warned.clear()
    cpu = evaluate(outs, feeds)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        dev = evaluate(outs, feeds, device="cuda")
    for a, b in zip(cpu, dev):
        a, b = (getattr(v, "data", v) for v in (a, b))
        np.testing.assert_array_equal(b, a)
    assert getattr(cpu[0], "data", cpu[0]).sum() > 0 and cpu[1].sum() > 0


def test_batch_norm_counts_every_entry_of_the_valid_frames(rng):
    """x [T, B, 2, D]: statistics over the valid frames and the middle axis (the cuda path is
    compared with this cpu result above)."""
    import asrkit.ops as O
    from asrkit.graph import evaluate, input_variable, parameter

    x = input_variable((2, 4))
    L = np.array([4, 2, 3], np.int32)
    data = rng.standard_normal((4, 3, 2, 4)).astype(np.float32) + 3
    y = O.batch_norm(x, parameter(4, init=1.0), parameter(4, init=0.0),
                     parameter(4, init=0.0, trainable=False),
                     parameter(4, init=1.0, trainable=False))
    out = evaluate([y], {x: (data, L)}, train=True)[0]
    valid = np.concatenate([out.data[:n, b] for b, n in enumerate(L)]).reshape(-1, 4)
    np.testing.assert_allclose(valid.mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(valid.var(0), 1, rtol=1e-3)
