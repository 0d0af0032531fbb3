"""The graph engine: construction, shape errors, feeds, padding invariants, autodiff."""

import numpy as np
import pytest

import asrkit.ops as O
from asrkit.graph import (
    GraphError,
    Sequence,
    ShapeError,
    constant,
    grad,
    input_variable,
    parameter,
    value_and_grad,
)


def test_shape_error_names_the_op_and_shapes():
    x = input_variable(80, name="feats")
    W = parameter((40, 320))
    with pytest.raises(ShapeError, match=r"times\(x: \[\*, \*, 80\], W: \[40, 320\]\): inner "
                                         r"dimensions 80 and 40 differ"):
        x @ W


def test_broadcast_errors_are_caught_at_construction():
    x = input_variable(4)
    with pytest.raises(ShapeError, match=r"add\(a: \[\*, \*, 4\], b: \[3\]\)"):
        x + parameter(3)
    y = input_variable(4, dynamic_axes=("labels", "batch"))
    with pytest.raises(ShapeError, match="different axes"):
        x + y


def test_operators_build_the_expected_values(rng):
    x = input_variable(3)
    W = parameter((3, 2), init=rng.standard_normal((3, 2)))
    b = parameter(2, init=[0.5, -0.5])
    y = 2.0 * O.relu(x @ W + b) - 1 / (1 + O.exp(-(x @ W))) ** 2
    data = rng.standard_normal((3, 2, 3)).astype(np.float32)
    h = data @ W.value
    ref = 2 * np.maximum(h + b.value, 0) - 1 / (1 + np.exp(-h)) ** 2
    out = y.eval({x: data})
    assert isinstance(out, Sequence)
    np.testing.assert_allclose(out.data, ref, rtol=1e-5)
    assert np.float32(3) * x is not None  # numpy scalars defer to the node


def test_padding_is_zero_in_values_and_gradients(rng):
    x = input_variable(2)
    b = parameter(2, init=[1.0, 2.0])
    y = O.log(O.exp(x) + b)  # padding would be log(0 + b) != 0 without the engine's mask
    data = rng.standard_normal((4, 2, 2)).astype(np.float32)
    data[2:, 1] = np.nan  # garbage in the caller's padding never reaches anything
    out = y.eval({x: (data, [4, 2])})
    assert np.all(out.data[2:, 1] == 0)
    assert np.all(np.isfinite(out.data))
    g = grad(O.sum_all(y), wrt=[x, b], inputs={x: (data, [4, 2])})
    assert np.all(g[x][2:, 1] == 0) and np.all(np.isfinite(g[b]))
    valid = np.concatenate([data[:, 0], data[:2, 1]])
    np.testing.assert_allclose(g[b], (1 / (np.exp(valid) + b.value)).sum(0), rtol=1e-5)
    assert np.isnan(data[3, 1, 0])  # the caller's array is untouched


@pytest.mark.parametrize("train", [True, False])
def test_unmasked_gradients_of_bias_add_and_norms_stay_zero_on_padding(rng, train):
    """``a + b``, ``a - b``, layer norm and batch norm leave their input gradients unmasked
    (``grad_keeps_padding_zero``): they are zero on padding by themselves, and the values that
    their outputs feed are masked as before."""
    x = input_variable(4)
    b = parameter(4, init=rng.standard_normal(4))
    one, zero = parameter(4, init=1.0), parameter(4, init=0.0)
    h = O.layer_norm(x - b, one, zero) + b
    h = O.batch_norm(h, one, zero, parameter(4, init=0.0, trainable=False),
                     parameter(4, init=1.0, trainable=False))
    y = O.tanh(h) * (x + b)
    data = rng.standard_normal((5, 3, 4)).astype(np.float32)
    feeds = {x: (data, [5, 2, 4])}
    out = y.eval(feeds, train=train)
    assert not out.data[2:, 1].any() and not out.data[4:, 2].any()
    g = grad(O.sum_all(y), wrt=[x, b], inputs=feeds, train=train)
    assert not g[x][2:, 1].any() and not g[x][4:, 2].any()
    assert np.all(np.isfinite(g[b]))


def test_mean_all_counts_only_valid_frames():
    x = input_variable(1)
    data = np.array([[[1.0], [5.0]], [[3.0], [7.0]]], np.float32)
    assert O.mean_all(x).eval({x: (data, [2, 1])}) == pytest.approx(3.0)


def test_feed_errors_name_the_input():
    x = input_variable(3, name="feats")
    y = O.tanh(x)
    with pytest.raises(GraphError, match="input 'feats'.*not fed"):
        y.eval({})
    with pytest.raises(GraphError,
                       match=r"input 'feats': expected .*\[\*, \*, 3\], got \[2, 1, 4\]"):
        y.eval({x: np.zeros((2, 1, 4))})
    with pytest.raises(GraphError, match="sequence 1 has length 7"):
        y.eval({x: (np.zeros((2, 2, 3)), [1, 7])})
    assert y.eval({"feats": np.zeros((2, 1, 3))}).data.shape == (2, 1, 3)


def test_mismatched_lengths_on_one_axis_are_an_error():
    a, b = input_variable(2), input_variable(2)
    with pytest.raises(GraphError, match="different lengths"):
        (a + b).eval({a: (np.zeros((3, 2, 2)), [3, 2]), b: (np.zeros((3, 2, 2)), [3, 3])})


def test_grad_of_shared_nodes_accumulates(rng):
    x = input_variable(2, dynamic_axes=("batch",))
    w = parameter(2, init=[0.3, -0.2])
    h = x * w
    loss = O.sum_all(h * h + h)
    data = rng.standard_normal((4, 2)).astype(np.float32)
    value, g = value_and_grad(loss, wrt=[w], inputs={x: data})
    ref = ((2 * data * w.value + 1) * data).sum(0)
    np.testing.assert_allclose(g[w], ref, rtol=1e-5)
    assert value == pytest.approx(float(((data * w.value) ** 2 + data * w.value).sum()),
                                  rel=1e-5)


def test_grad_defaults_to_trainable_parameters_and_stop_gradient(rng):
    x = input_variable(2, dynamic_axes=("batch",))
    w = parameter(2, init=1.0)
    frozen = parameter(2, init=1.0, trainable=False)
    loss = O.sum_all(x * w * frozen + O.stop_gradient(x * w))
    g = grad(loss, inputs={x: np.ones((3, 2), np.float32)})
    assert list(g) == [w]
    np.testing.assert_allclose(g[w], [3.0, 3.0])


def test_parameters_and_arguments():
    x = input_variable(2, name="x")
    W = parameter((2, 2), name="W")
    y = O.tanh(x @ W) * constant(2.0)
    assert y.parameters == [W] and y.arguments == [x]


def test_dropout_is_seeded_and_off_in_eval(rng):
    x = input_variable(50, dynamic_axes=("batch",))
    y = O.dropout(x, 0.5)
    data = np.ones((4, 50), np.float32)
    a = y.eval({x: data}, train=True, seed=1)
    b = y.eval({x: data}, train=True, seed=1)
    c = y.eval({x: data}, train=True, seed=2)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert set(np.unique(a)) <= {0.0, 2.0}
    np.testing.assert_array_equal(y.eval({x: data}), data)


def test_integer_label_feed_rejects_fractions():
    y = input_variable((), dtype=np.int32, name="labels")
    with pytest.raises(GraphError, match="integer"):
        O.embedding(y, parameter((3, 2))).eval({y: np.array([[0.5]])})


@pytest.mark.cuda
def test_ops_without_a_cuda_kernel_fall_back_loudly(rng, monkeypatch):
    from asrkit.graph.backends import cuda as cuda_backend
    from asrkit.graph.backends import get_backend

    get_backend("cuda")  # registers the CUDA impls; then take softplus's away for this test
    for key in ("cuda", "cuda_backward"):
        monkeypatch.delitem(O.softplus.primitive.impls, key)
    cuda_backend._warned.clear()
    x = input_variable(3)
    W = parameter((3, 2), init=rng.standard_normal((3, 2)))
    loss = O.sum_all(O.softplus(x @ W))
    data = rng.standard_normal((3, 2, 3)).astype(np.float32)
    feeds = {x: (data, [3, 1])}
    cpu = grad(loss, wrt=[W], inputs=feeds)[W]
    with pytest.warns(RuntimeWarning, match="'softplus' has no CUDA"):
        dev = grad(loss, wrt=[W], inputs=feeds, device="cuda")[W]
    np.testing.assert_allclose(dev, cpu, rtol=1e-5)


@pytest.mark.cuda
def test_blstm_ctc_graph_runs_on_device_kernels_and_matches_cpu(rng):
    import warnings

    from asrkit.layers import BLSTM, Dense, Sequential

    x = input_variable(3)
    y = input_variable((), dtype=np.int32, dynamic_axes=("labels", "batch"))
    model = Sequential([BLSTM(2), Dense(4, activation="relu"), Dense(4)])
    loss = O.sum_all(O.ctc_loss(model(x), y))
    feeds = {x: (rng.standard_normal((4, 2, 3)).astype(np.float32), [4, 3]),
             y: (np.array([[1, 2], [2, 0]], np.int32), [2, 1])}
    cpu = grad(loss, inputs=feeds)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no host fallback anywhere in this graph
        dev = grad(loss, inputs=feeds, device="cuda")
    for p, g in cpu.items():
        np.testing.assert_allclose(dev[p], g, rtol=1e-4, atol=1e-6, err_msg=p.name)


@pytest.mark.cuda
def test_gru_ctc_graph_runs_recurrence_on_the_device_and_matches_cpu(rng):
    import warnings

    from asrkit.layers import GRU, Dense, Sequential

    x = input_variable(3)
    y = input_variable((), dtype=np.int32, dynamic_axes=("labels", "batch"))
    model = Sequential([GRU(2, bidirectional=True), Dense(4)])  # both scan directions
    loss = O.sum_all(O.ctc_loss(model(x), y))
    feeds = {x: (rng.standard_normal((4, 2, 3)).astype(np.float32), [4, 2]),
             y: (np.array([[1, 2], [3, 0]], np.int32), [2, 1])}
    wrt = [*model.parameters, x]
    cpu_loss, cpu = value_and_grad(loss, wrt=wrt, inputs=feeds)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # recurrence must not fall back to the host
        dev_loss, dev = value_and_grad(loss, wrt=wrt, inputs=feeds, device="cuda")
    np.testing.assert_allclose(dev_loss, cpu_loss, rtol=1e-5)
    for p, g in cpu.items():
        np.testing.assert_allclose(dev[p], g, rtol=1e-4, atol=1e-6, err_msg=p.name)


@pytest.mark.cuda
def test_recurrence_on_the_device_copies_nothing_back_per_frame(rng, monkeypatch):
    import warnings

    from numba import cuda

    x = input_variable(2)
    U = parameter((2, 2), init=rng.standard_normal((2, 2)))
    loss = O.sum_all(O.recurrence(lambda h, xt: O.tanh(xt + h @ U), x, 0.0, state_shape=2))
    device_array = type(cuda.to_device(np.zeros(1)))
    copy_to_host = device_array.copy_to_host
    counts = []
    for T in (2, 6):
        calls = [0]

        def counted(self, *a, _calls=calls, **k):
            _calls[0] += 1
            return copy_to_host(self, *a, **k)

        monkeypatch.setattr(device_array, "copy_to_host", counted)
        data = rng.standard_normal((T, 3, 2)).astype(np.float32)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no host fallback either
            dev = grad(loss, wrt=[U, x], inputs={x: (data, [T, 1, 0])}, device="cuda")
        monkeypatch.setattr(device_array, "copy_to_host", copy_to_host)
        cpu = grad(loss, wrt=[U, x], inputs={x: (data, [T, 1, 0])})
        for k in (U, x):
            np.testing.assert_allclose(dev[k], cpu[k], rtol=1e-5, atol=1e-6)
        counts.append(calls[0])
    assert 0 < counts[0] == counts[1]  # the host copies do not grow with the number of frames


@pytest.mark.cuda
def test_device_array_feeds_only_reach_non_sequence_inputs_on_cuda():
    from numba import cuda

    from asrkit.graph.executor import Executor, get_plan

    h = input_variable(2, dynamic_axes=("batch",), name="h")
    s = input_variable(2, name="s")
    ones = cuda.to_device(np.ones((3, 2), np.float32))
    out = Executor(get_plan([O.tanh(h)]), "cuda").run({h: ones}).outputs[0]
    np.testing.assert_allclose(out.copy_to_host(), np.tanh(np.ones((3, 2))), rtol=1e-6)
    with pytest.raises(GraphError, match="input 'h'.*shape"):
        Executor(get_plan([O.tanh(h)]), "cuda").run({h: cuda.to_device(np.ones(3))})
    with pytest.raises(GraphError, match="input 's'.*non-sequence"):
        Executor(get_plan([O.tanh(s)]), "cuda").run({s: ones})
    with pytest.raises(GraphError, match="input 'h'.*'cpu' backend"):
        Executor(get_plan([O.tanh(h)]), "cpu").run({h: ones})


def test_summary_and_find_by_name():
    from asrkit.graph import find_by_name, summary
    from asrkit.layers import Dense

    x = input_variable(4, name="feats")
    y = Dense(3, name="out")(x)
    table = summary(y)
    assert "out.W" in table and "[*, *, 3]" in table and "15 trainable parameters" in table
    assert find_by_name(y, "out.b").shape == (3,)
    with pytest.raises(KeyError, match="0 nodes are named 'nope'"):
        find_by_name(y, "nope")
