"""Model files and PyTorch weight exchange (checked against torch.nn.LSTM / Linear / Conv1d)."""

import numpy as np
import pytest

from asrkit.models import (
    ArchiveError,
    Model,
    from_torch_state_dict,
    load,
    save,
    save_archive,
    to_torch_state_dict,
)

torch = pytest.importorskip("torch")


def _batch(rng, T=9, B=3, D=5):
    x = rng.standard_normal((T, B, D)).astype(np.float32)
    return x, np.array([T, T - 3, 2], np.int32)[:B]


class TorchNet(torch.nn.Module):
    """The torch module a PyTorch user writes for the same [network] description."""

    def __init__(self, layers, out_dim, classes, kinds):
        super().__init__()
        self.layers = torch.nn.ModuleList(layers)
        self.kinds = kinds
        self.output = torch.nn.Linear(out_dim, classes)

    def forward(self, x, lengths):
        T = len(x)
        for layer, kind in zip(self.layers, self.kinds):
            if kind == "lstm":
                p = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)
                x, _ = layer(p)
                x, _ = torch.nn.utils.rnn.pad_packed_sequence(x, total_length=T)
            elif kind == "tdnn":
                mask = (torch.arange(T)[:, None] < lengths[None]).float()[..., None]
                x = torch.relu(layer((x * mask).permute(1, 2, 0)).permute(2, 0, 1))
            else:
                x = torch.tanh(layer(x))
        return torch.log_softmax(self.output(x), -1)


def _compare(model, tnet, x, L):
    ours, out_len = model(x, L)
    tnet.load_state_dict({k: torch.from_numpy(v) for k, v in to_torch_state_dict(model).items()})
    with torch.no_grad():
        ref = tnet(torch.from_numpy(x), torch.from_numpy(L)).numpy()
    valid = np.arange(len(x))[:, None] < out_len[None]
    np.testing.assert_allclose(ours[valid], ref[valid], rtol=1e-4, atol=1e-5)
    assert not ours[~valid].any()


def test_blstm_dense_model_matches_torch(rng):
    net = {"layers": [{"type": "blstm", "hidden": 6, "num_layers": 2},
                      {"type": "dense", "dim": 7, "activation": "tanh"}]}
    model = Model(net, 5, ["<blk>", "a", "b", "c"])
    tnet = TorchNet([torch.nn.LSTM(5, 6, 2, bidirectional=True), torch.nn.Linear(12, 7)], 7, 4,
                    ["lstm", "dense"])
    _compare(model, tnet, *_batch(rng))


def test_projected_lstm_and_tdnn_match_torch(rng):
    net = {"layers": [{"type": "tdnn", "dim": 6, "context": 3},
                      {"type": "lstm", "hidden": 8, "proj": 4}]}
    model = Model(net, 5, ["<blk>", "a", "b"])
    tnet = TorchNet([torch.nn.Conv1d(5, 6, 3, padding=1), torch.nn.LSTM(6, 8, proj_size=4)],
                    4, 3, ["tdnn", "lstm"])
    _compare(model, tnet, *_batch(rng))


def test_import_from_torch_state_dict(rng):
    net = {"layers": [{"type": "blstm", "hidden": 4}]}
    model = Model(net, 3, ["<blk>", "a"])
    tnet = TorchNet([torch.nn.LSTM(3, 4, bidirectional=True)], 8, 2, ["lstm"])
    from_torch_state_dict(model, tnet.state_dict())
    x, L = _batch(rng, D=3)
    ours, _ = model(x, L)
    with torch.no_grad():
        ref = tnet(torch.from_numpy(x), torch.from_numpy(L)).numpy()
    np.testing.assert_allclose(ours[:2], ref[:2], rtol=1e-4, atol=1e-5)
    with pytest.raises(KeyError, match="missing"):
        from_torch_state_dict(model, {})


def test_model_file_round_trip_and_errors(tmp_path, rng):
    net = {"stack_frames": 2, "subsample_frames": 2,
           "layers": [{"type": "blstm", "hidden": 4}, {"type": "dropout", "rate": 0.2}]}
    model = Model(net, 5, ["<blk>", "x", "y"])
    path = tmp_path / "m.mdl"
    save(path, model)
    again = load(path)
    x, L = _batch(rng)
    a, la = model(x, L)
    b, lb = again(x, L)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(la, (L + 1) // 2)
    np.testing.assert_array_equal(la, lb)
    assert again.tokens == ["<blk>", "x", "y"] and again.network == model.network
    single, n = again(x[: L[1], 1])
    np.testing.assert_allclose(single, a[: la[1], 1], rtol=1e-5, atol=1e-6)
    save_archive(tmp_path / "other.npz", {"format": "something"}, {})
    with pytest.raises(ArchiveError, match="not an asrkit model"):
        load(tmp_path / "other.npz")
    (tmp_path / "junk.mdl").write_text("junk")
    with pytest.raises(ArchiveError, match="junk.mdl: not an npz archive"):
        load(tmp_path / "junk.mdl")
