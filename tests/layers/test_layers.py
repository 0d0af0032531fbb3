"""Layers against torch.nn, and their gradients by finite differences."""

import numpy as np
import pytest

import asrkit.ops as O
from asrkit.graph import check_grads, grad, input_variable
from asrkit.layers import (
    BLSTM,
    LSTM,
    TDNN,
    BatchNorm,
    Conv1d,
    Dense,
    Dropout,
    Embedding,
    LayerNorm,
    Residual,
    Sequential,
    count_parameters,
)

torch = pytest.importorskip("torch")


def _packed_torch(module, data, lengths):
    packed = torch.nn.utils.rnn.pack_padded_sequence(torch.from_numpy(data),
                                                     torch.from_numpy(lengths.astype(np.int64)),
                                                     enforce_sorted=False)
    out, _ = module(packed)
    out, _ = torch.nn.utils.rnn.pad_packed_sequence(out, total_length=data.shape[0])
    return out


@pytest.mark.parametrize("layers,bidirectional,proj", [(1, False, None), (2, True, None),
                                                       (2, True, 2)])
def test_lstm_layer_matches_torch_lstm(layers, bidirectional, proj, rng):
    I, H = 3, 4
    ref = torch.nn.LSTM(I, H, num_layers=layers, bidirectional=bidirectional,
                        proj_size=proj or 0)
    x = input_variable(I)
    lstm = LSTM(H, layers, bidirectional, proj)
    y = lstm(x)
    lstm.load_torch_state(ref.state_dict())
    data = rng.standard_normal((6, 3, I)).astype(np.float32)
    lengths = np.array([6, 2, 4], np.int32)
    out = y.eval({x: (data, lengths)})
    want = _packed_torch(ref, data, lengths)
    np.testing.assert_allclose(out.data, want.detach().numpy(), rtol=1e-4, atol=1e-5)
    g = grad(O.sum_all(y), wrt=lstm.parameters, inputs={x: (data, lengths)})
    want.sum().backward()
    for name, p in ref.named_parameters():
        np.testing.assert_allclose(g[lstm._params[name]], p.grad.numpy(), rtol=1e-3, atol=1e-4,
                                   err_msg=name)


def test_blstm_gradients_by_finite_differences(rng):
    x = input_variable(2)
    y = BLSTM(2, proj_dim=1)(x)
    data = rng.standard_normal((4, 2, 2))
    check_grads(O.tanh(y), {x: (data, np.array([4, 3]))}, tol=1e-6)


def test_dense_conv_tdnn_norms_and_containers(rng):
    x = input_variable(4)
    net = Sequential([
        Conv1d(6, 3, activation="relu"),
        TDNN(5, context=3, dilation=2),
        Residual(Sequential([LayerNorm(), Dense(5, activation=O.tanh)])),
        BatchNorm(),
        Dropout(0.2),
        Dense(3),
    ])
    y = net(x)
    assert y.shape == (None, None, 3)
    assert count_parameters(net) == (3 * 4 * 6 + 6) + (3 * 6 * 5 + 5) + 10 + (25 + 5) + 10 + 18
    data = rng.standard_normal((5, 2, 4))
    check_grads(y, {x: (data, np.array([5, 3]))}, tol=1e-6, train=True)


def test_dense_matches_torch_linear(rng):
    x = input_variable(3, dynamic_axes=("batch",))
    d = Dense(2)
    y = d(x)
    lin = torch.nn.Linear(3, 2)
    d.W.set_value(lin.weight.detach().numpy().T)
    d.b.set_value(lin.bias.detach().numpy())
    data = rng.standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_allclose(y.eval({x: data}), lin(torch.from_numpy(data)).detach().numpy(),
                               rtol=1e-5, atol=1e-6)


def test_layer_reuse_shares_parameters_and_embedding(rng):
    ids = input_variable((), dtype=np.int32)
    emb = Embedding(7, 3)
    d = Dense(3)
    a, b = d(emb(ids)), d(d(emb(ids)))
    assert set(a.parameters) <= set(b.parameters) and len(b.parameters) == 3
    out = a.eval({ids: (np.array([[1, 2], [3, 0]], np.int32), [2, 1])})
    assert out.data.shape == (2, 2, 3)


def test_strided_conv_changes_lengths():
    x = input_variable(2)
    y = Conv1d(2, 3, stride=2)(x)
    out = y.eval({x: (np.ones((7, 2, 2), np.float32), [7, 4])})
    assert out.lengths.tolist() == [4, 2] and out.data.shape[0] == 4


@pytest.mark.parametrize("bidirectional", [False, True])
def test_gru_layer_matches_torch_gru(bidirectional, rng):
    from asrkit.layers import GRU

    I, H = 3, 4
    ref = torch.nn.GRU(I, H, bidirectional=bidirectional)
    x = input_variable(I)
    gru = GRU(H, bidirectional=bidirectional)
    y = gru(x)
    gru.load_torch_state(ref.state_dict())
    data = rng.standard_normal((5, 3, I)).astype(np.float32)
    lengths = np.array([5, 2, 4], np.int32)
    out = y.eval({x: (data, lengths)})
    want = _packed_torch(ref, data, lengths)
    np.testing.assert_allclose(out.data, want.detach().numpy(), rtol=1e-4, atol=1e-5)
    g = grad(O.sum_all(y), wrt=gru.parameters, inputs={x: (data, lengths)})
    want.sum().backward()
    for name, p in ref.named_parameters():
        np.testing.assert_allclose(g[gru._params[name]], p.grad.numpy(), rtol=1e-3, atol=1e-5,
                                   err_msg=name)
