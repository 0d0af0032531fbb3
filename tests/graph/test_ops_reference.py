"""Ops against torch (the trusted reference), on unpadded data where sequences matter."""

import numpy as np
import pytest

import asrkit.ops as O
from asrkit.graph import Sequence, input_variable, parameter

torch = pytest.importorskip("torch")
F = torch.nn.functional


def t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


@pytest.mark.parametrize("name,ours,ref", [
    ("gelu", O.gelu, F.gelu), ("softplus", O.softplus, F.softplus), ("elu", O.elu, F.elu),
    ("sigmoid", O.sigmoid, torch.sigmoid), ("leaky_relu", O.leaky_relu, F.leaky_relu),
    ("tanh", O.tanh, torch.tanh), ("log_softmax", O.log_softmax, lambda z: F.log_softmax(z, -1)),
    ("softmax", O.softmax, lambda z: F.softmax(z, -1)),
])
def test_activations_match_torch(name, ours, ref, rng):
    x = input_variable(5, dynamic_axes=("batch",))
    data = (rng.standard_normal((7, 5)) * 4).astype(np.float32)
    np.testing.assert_allclose(ours(x).eval({x: data}), ref(t(data)).numpy(), rtol=1e-5,
                               atol=1e-6)


def test_sequence_softmax_normalises_over_valid_frames_only(rng):
    x = input_variable(2)
    data = rng.standard_normal((5, 2, 2)).astype(np.float32)
    out = O.softmax(x, axis="seq").eval({x: (data, [5, 3])})
    np.testing.assert_allclose(out.data[:3, 1], F.softmax(t(data[:3, 1]), 0).numpy(), rtol=1e-5)
    assert np.all(out.data[3:, 1] == 0)
    np.testing.assert_allclose(out.data.sum(0), 1.0, rtol=1e-5)


@pytest.mark.parametrize("stride,dilation,padding", [(1, 1, "same"), (2, 1, "valid"),
                                                     (1, 2, "same"), (3, 1, 2)])
def test_conv1d_matches_torch_per_sequence(stride, dilation, padding, rng):
    x = input_variable(3)
    K = 3
    W = parameter((K, 3, 4), init=rng.standard_normal((K, 3, 4)))
    data = rng.standard_normal((9, 2, 3)).astype(np.float32)
    lengths = np.array([9, 6], np.int32)
    out = O.conv1d(x, W, stride, dilation, padding).eval({x: (data, lengths)})
    w_t = t(W.value.transpose(2, 1, 0))  # torch: [out, in, K]
    for b, L in enumerate(lengths):
        xb = t(data[:L, b].T[None])  # [1, C, L]
        if padding == "same":
            total = dilation * (K - 1)
            xb = F.pad(xb, (total // 2, total - total // 2))
            ref = F.conv1d(xb, w_t, stride=stride, dilation=dilation)[0].T.numpy()
            ref = ref[: -(-L // stride)]
        elif padding == "valid":
            ref = F.conv1d(xb, w_t, stride=stride, dilation=dilation)[0].T.numpy()
        else:
            ref = F.conv1d(F.pad(xb, (padding, 0)), w_t, stride=stride,
                           dilation=dilation)[0].T.numpy()
        assert out.lengths[b] == len(ref)
        np.testing.assert_allclose(out.data[: len(ref), b], ref, rtol=1e-4, atol=1e-5)
        assert np.all(out.data[len(ref):, b] == 0)


def test_max_and_avg_pool_match_torch(rng):
    x = input_variable(2)
    data = rng.standard_normal((8, 2, 2)).astype(np.float32)
    lengths = np.array([8, 5], np.int32)
    mx = O.max_pool1d(x, 2).eval({x: (data, lengths)})
    av = O.avg_pool1d(x, 2).eval({x: (data, lengths)})
    for b, L in enumerate(lengths):
        xb = t(data[:L, b].T[None])
        ref_m = F.max_pool1d(xb, 2)[0].T.numpy()
        ref_a = F.avg_pool1d(xb, 2)[0].T.numpy()
        assert mx.lengths[b] == len(ref_m)
        np.testing.assert_allclose(mx.data[: len(ref_m), b], ref_m, rtol=1e-6)
        np.testing.assert_allclose(av.data[: len(ref_a), b], ref_a, rtol=1e-6)


def test_layer_norm_matches_torch(rng):
    x = input_variable(6)
    g = parameter(6, init=rng.standard_normal(6))
    b = parameter(6, init=rng.standard_normal(6))
    data = rng.standard_normal((4, 3, 6)).astype(np.float32)
    out = O.layer_norm(x, g, b).eval({x: data})
    ref = F.layer_norm(t(data), (6,), t(g.value), t(b.value)).numpy()
    np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-5, atol=1e-5)


def test_batch_norm_uses_only_valid_frames_and_updates_running_stats(rng):
    x = input_variable(3)
    g, b = parameter(3, init=1.0), parameter(3, init=0.0)
    rm = parameter(3, init=0.0, trainable=False)
    rv = parameter(3, init=1.0, trainable=False)
    y = O.batch_norm(x, g, b, rm, rv, momentum=0.1)
    data = rng.standard_normal((5, 2, 3)).astype(np.float32)
    data[3:, 1] = 100.0  # padding garbage must not reach the statistics
    lengths = np.array([5, 3])
    out = y.eval({x: (data, lengths)}, train=True)
    valid = np.concatenate([data[:5, 0], data[:3, 1]])
    bn = torch.nn.BatchNorm1d(3, momentum=0.1)
    ref = bn(t(valid)).detach().numpy()
    np.testing.assert_allclose(np.concatenate([out.data[:5, 0], out.data[:3, 1]]), ref,
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(rm.value, bn.running_mean.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rv.value, bn.running_var.numpy(), rtol=1e-5, atol=1e-6)
    evald = y.eval({x: (data, lengths)}, train=False)
    bn.eval()
    np.testing.assert_allclose(evald.data[:5, 0], bn(t(data[:5, 0])).detach().numpy(),
                               rtol=1e-4, atol=1e-5)


def test_cross_entropy_with_label_smoothing_matches_torch(rng):
    z = input_variable(5)
    y = input_variable((), dtype=np.int32)
    data = rng.standard_normal((4, 2, 5)).astype(np.float32)
    lab = rng.integers(0, 5, (4, 2)).astype(np.int32)
    ce = O.cross_entropy_with_softmax(z, y, label_smoothing=0.1)
    out = ce.eval({z: (data, [4, 2]), y: (lab, [4, 2])})
    ref = F.cross_entropy(t(data.reshape(-1, 5)), t(lab.reshape(-1).astype(np.int64)),
                          reduction="none", label_smoothing=0.1).numpy().reshape(4, 2)
    np.testing.assert_allclose(out.data[:, 0], ref[:, 0], rtol=1e-5)
    np.testing.assert_allclose(out.data[:2, 1], ref[:2, 1], rtol=1e-5)
    assert np.all(out.data[2:, 1] == 0)


def test_ctc_loss_and_gradient_match_torch(rng):
    from asrkit.graph import grad

    C = 5
    x = input_variable(C)
    lab = input_variable((), dtype=np.int32, dynamic_axes=("labels", "batch"))
    logits = rng.standard_normal((6, 2, C)).astype(np.float32)
    in_len = np.array([6, 4], np.int32)
    targets = np.array([[1, 2], [3, 0], [4, 0]], np.int32)  # [S, B]
    tgt_len = np.array([3, 1], np.int32)
    loss = O.ctc_loss(x, lab)
    feeds = {x: (logits, in_len), lab: (targets, tgt_len)}
    costs = loss.eval(feeds)
    gx = grad(O.sum_all(loss), wrt=[x], inputs=feeds)[x]
    lt = t(logits).requires_grad_(True)
    ref = F.ctc_loss(F.log_softmax(lt, -1), t(targets.T.astype(np.int64)), t(in_len),
                     t(tgt_len), reduction="none")
    ref.sum().backward()
    np.testing.assert_allclose(costs, ref.detach().numpy(), rtol=1e-4)
    np.testing.assert_allclose(gx, lt.grad.numpy(), rtol=1e-3, atol=1e-5)


def test_lstm_matches_torch_packed(rng):
    from asrkit.graph import grad

    I, H = 3, 4
    lstm_t = torch.nn.LSTM(I, H)
    p = {k: v.detach().numpy().copy() for k, v in lstm_t.named_parameters()}
    x = input_variable(I)
    ws = [parameter(p[k].shape, init=p[k]) for k in
          ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")]
    y = O.lstm(x, *ws)
    data = rng.standard_normal((5, 2, I)).astype(np.float32)
    lengths = np.array([5, 3], np.int32)
    out = y.eval({x: (data, lengths)})
    packed = torch.nn.utils.rnn.pack_padded_sequence(t(data), t(lengths.astype(np.int64)))
    ref, _ = lstm_t(packed)
    ref, _ = torch.nn.utils.rnn.pad_packed_sequence(ref, total_length=5)
    np.testing.assert_allclose(out.data, ref.detach().numpy(), rtol=1e-4, atol=1e-5)
    g = grad(O.sum_all(y), wrt=[ws[0]], inputs={x: (data, lengths)})[ws[0]]
    ref.sum().backward()
    np.testing.assert_allclose(g, lstm_t.weight_ih_l0.grad.numpy(), rtol=1e-3, atol=1e-5)


def test_stack_subsample_splice_and_reverse_frames():
    x = input_variable(1)
    data = np.arange(1, 7, dtype=np.float32).reshape(6, 1, 1).repeat(2, axis=1)
    L = np.array([6, 4], np.int32)
    st = O.stack_frames(x, 2).eval({x: (data, L)})
    assert st.lengths.tolist() == [3, 2]
    np.testing.assert_array_equal(st.data[:, 1, :], [[1, 2], [3, 4], [0, 0]])
    sub = O.subsample_frames(x, 3).eval({x: (data, L)})
    assert sub.lengths.tolist() == [2, 2]
    np.testing.assert_array_equal(sub.data[:, :, 0], [[1, 1], [4, 4]])
    sp = O.splice_frames(x, 1, 1).eval({x: (data, L)})
    np.testing.assert_array_equal(sp.data[:4, 1, :], [[1, 1, 2], [1, 2, 3], [2, 3, 4],
                                                      [3, 4, 4]])
    rv = O.sequence_reverse(x).eval({x: (data, L)})
    np.testing.assert_array_equal(rv.data[:, 1, 0], [4, 3, 2, 1, 0, 0])
    pv = O.past_value(x, 9.0).eval({x: (data, L)})
    np.testing.assert_array_equal(pv.data[:, 1, 0], [9, 1, 2, 3, 0, 0])
    fv = O.future_value(x, 9.0).eval({x: (data, L)})
    np.testing.assert_array_equal(fv.data[:, 1, 0], [2, 3, 4, 9, 0, 0])
    last = O.sequence_last(x).eval({x: Sequence(data, L)})
    np.testing.assert_array_equal(last[:, 0], [6, 4])
    mean = O.sequence_mean(x).eval({x: Sequence(data, L)})
    np.testing.assert_allclose(mean[:, 0], [3.5, 2.5])


def test_metrics():
    z = input_variable(3)
    y = input_variable((), dtype=np.int32)
    logits = np.eye(3, dtype=np.float32)[[0, 1, 2, 0]].reshape(4, 1, 3)
    err = O.classification_error(z, y).eval({z: logits, y: np.array([[0], [1], [0], [0]])})
    np.testing.assert_array_equal(err.data[:, 0], [0, 0, 1, 0])
    lab = input_variable((), dtype=np.int32, dynamic_axes=("labels", "batch"))
    # frames: 1 1 blank 2 -> "1 2"; reference "1 2 2" -> one deletion
    frames = np.eye(3, dtype=np.float32)[[1, 1, 0, 2]].reshape(4, 1, 3)
    errs = O.ctc_greedy_errors(z, lab).eval({z: frames, lab: np.array([[1], [2], [2]])})
    assert errs.tolist() == [1.0]
    assert O.edit_distance([1, 2, 3], [1, 3]) == 1


def test_recurrence_matches_torch_rnn_per_sequence(rng):
    I, H = 3, 4
    rnn = torch.nn.RNN(I, H)
    x = input_variable(I)
    W = parameter((I, H), init=rnn.weight_ih_l0.detach().numpy().T)
    U = parameter((H, H), init=rnn.weight_hh_l0.detach().numpy().T)
    b = parameter(H, init=(rnn.bias_ih_l0 + rnn.bias_hh_l0).detach().numpy())
    y = O.recurrence(lambda h, xt: O.tanh(xt @ W + h @ U + b), x, 0.0, state_shape=H)
    data = rng.standard_normal((5, 2, I)).astype(np.float32)
    out = y.eval({x: (data, [5, 3])})
    for bi, L in enumerate((5, 3)):
        ref, _ = rnn(t(data[:L, bi:bi + 1]))
        np.testing.assert_allclose(out.data[:L, bi], ref[:, 0].detach().numpy(), rtol=1e-5,
                                   atol=1e-6)
    assert np.all(out.data[3:, 1] == 0)


def test_recurrence_rejects_outer_inputs_in_the_step():
    x, other = input_variable(2), input_variable(2, dynamic_axes=("batch",))
    with pytest.raises(ValueError, match="the step uses graph input"):
        O.recurrence(lambda h, xt: h + xt + other, x, 0.0, state_shape=2)
