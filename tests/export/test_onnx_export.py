"""ONNX export: onnxruntime against asrkit's own outputs on random models of every layer kind,
padded batches with ragged lengths (and garbage in the padding), plus torch as an independent
reference for the LSTM/LSTMP gate and weight layouts."""

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from asrkit.export import (  # noqa: E402
    ExportError,
    build_onnx,
    compare_with_model,
    read_metadata,
    run_onnx,
    subsampling_factor,
    to_onnx,
)
from asrkit.models import Model  # noqa: E402

TOKENS = ["<blk>", "a", "b", "c", "d"]
D = 6

NETWORKS = {
    "lstm": {"layers": [{"type": "lstm", "hidden": 5}]},
    "lstm_2layers": {"layers": [{"type": "lstm", "hidden": 4, "num_layers": 2,
                                 "dropout": 0.3}]},
    "blstm_2layers": {"layers": [{"type": "blstm", "hidden": 5, "num_layers": 2}]},
    "lstmp": {"layers": [{"type": "lstm", "hidden": 6, "proj": 3, "num_layers": 2}]},
    "blstmp": {"layers": [{"type": "blstm", "hidden": 5, "proj": 2, "num_layers": 2}]},
    "dense_activations": {"layers": [
        {"type": "dense", "dim": 7, "activation": "relu"},
        {"type": "dense", "dim": 7, "activation": "tanh"},
        {"type": "dense", "dim": 7, "activation": "sigmoid"},
        {"type": "dense", "dim": 7, "activation": "gelu"},
        {"type": "dense", "dim": 7, "activation": "elu"},
        {"type": "dense", "dim": 7, "activation": "softplus"},
        {"type": "dropout", "rate": 0.5},
        {"type": "dense", "dim": 5, "activation": "none"}]},
    "tdnn": {"layers": [
        {"type": "tdnn", "dim": 5, "context": 3},
        {"type": "tdnn", "dim": 4, "context": 4, "dilation": 2, "activation": "tanh"},
        {"type": "tdnn", "dim": 4, "context": 5, "dilation": 3, "activation": "none"}]},
    "tdnn_strided": {"layers": [
        {"type": "dense", "dim": 5, "activation": "relu"},  # nonzero padding before the conv
        {"type": "tdnn", "dim": 5, "context": 3, "stride": 2},
        {"type": "tdnn", "dim": 4, "context": 2, "dilation": 2, "stride": 3}]},
    "stack3_sub3_blstm": {"stack_frames": 3, "subsample_frames": 3,
                          "layers": [{"type": "blstm", "hidden": 4}]},
    "stack3_sub1": {"stack_frames": 3, "subsample_frames": 1,
                    "layers": [{"type": "tdnn", "dim": 4, "context": 3}]},
    "stack1_sub2": {"stack_frames": 1, "subsample_frames": 2,
                    "layers": [{"type": "dense", "dim": 4}]},
    "stack2_sub3": {"stack_frames": 2, "subsample_frames": 3,
                    "layers": [{"type": "lstm", "hidden": 4, "proj": 2}]},
    "mixed": {"stack_frames": 2, "subsample_frames": 2, "seed": 3, "layers": [
        {"type": "tdnn", "dim": 6, "context": 3, "activation": "gelu"},
        {"type": "blstm", "hidden": 4, "num_layers": 2, "proj": 3, "dropout": 0.1},
        {"type": "dropout", "rate": 0.2},
        {"type": "tdnn", "dim": 5, "context": 3, "stride": 2},
        {"type": "lstm", "hidden": 4},
        {"type": "dense", "dim": 4, "activation": "elu"}]},
    "conformer": {"layers": [
        {"type": "dense", "dim": 8, "activation": "none"},
        {"type": "conformer", "dim": 8, "heads": 2, "ff_dim": 12, "num_layers": 2,
         "kernel_size": 5, "dropout": 0.1}]},
    "conformer_layer_norm": {"layers": [
        {"type": "dense", "dim": 8, "activation": "none"},
        {"type": "conformer", "dim": 8, "heads": 4, "kernel_size": 3, "conv_norm": "layer"}]},
    "conv2d_sub4_conformer": {"layers": [
        {"type": "dense", "dim": 16, "activation": "tanh"},
        {"type": "conv2d_subsampling", "dim": 8, "factor": 4, "channels": 3},
        {"type": "conformer", "dim": 8, "heads": 2, "kernel_size": 3}]},
    "conv2d_sub6": {"layers": [
        {"type": "dense", "dim": 16, "activation": "tanh"},
        {"type": "conv2d_subsampling", "dim": 6, "factor": 6, "channels": 2}]},
    "conv2d_sub8_transformer": {"layers": [
        {"type": "dense", "dim": 16, "activation": "tanh"},
        {"type": "conv2d_subsampling", "dim": 8, "factor": 8, "channels": 2},
        {"type": "transformer", "dim": 8, "heads": 2, "ff_dim": 10, "num_layers": 2,
         "activation": "gelu"}]},
}


def _batch(rng, T=13, lengths=(13, 8, 1, 5)):
    """A padded batch whose padding holds large garbage (it must never reach valid frames)."""
    lengths = np.array(lengths, np.int32)
    feats = rng.standard_normal((T, len(lengths), D)).astype(np.float32)
    for b, n in enumerate(lengths):
        feats[n:, b] = rng.uniform(-100, 100, (T - n, D))
    return feats, lengths


def _model(net, seed=0):
    model = Model(net, D, TOKENS, blank=0)
    # random (not freshly initialised: biases are zero there) parameters of a healthy scale
    rng = np.random.default_rng(seed)
    state = {k: rng.uniform(-0.6, 0.6, v.shape).astype(np.float32)
             for k, v in model.state_dict().items()}
    for k in state:
        if k.endswith("running_var"):  # a variance: positive
            state[k] = np.abs(state[k]) + 0.5
    model.load_state_dict(state)
    return model


@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_onnxruntime_matches_asrkit_on_ragged_batches(name, rng):
    model = _model(NETWORKS[name])
    proto = build_onnx(model)
    onnx.checker.check_model(proto, full_check=True)
    assert proto.opset_import[0].version >= 17
    # dynamic T and B; an empty sequence and a one-frame batch too
    for T, lengths in [(13, (13, 8, 1, 5)), (7, (7, 0)), (1, (1,)), (10, (4, 10))]:
        feats, lengths = _batch(rng, T, lengths)
        ref, ref_len = model(feats, lengths)
        got, got_len = run_onnx(proto, feats, lengths)
        assert got_len.dtype == np.int32
        np.testing.assert_array_equal(got_len, ref_len)
        assert got.shape == ref.shape
        valid = np.arange(ref.shape[0])[:, None] < ref_len[None, :]
        np.testing.assert_allclose(got[valid], ref[valid], atol=1e-4, rtol=0)
        # padded frames: zeros, as asrkit leaves them
        assert np.all(got[~valid] == 0)


def test_every_layer_kind_and_activation_is_covered():
    from asrkit.config.acoustic_net import ACTIVATIONS, LAYER_KEYS

    layers = [spec for net in NETWORKS.values() for spec in net["layers"]]
    assert {s["type"] for s in layers} == set(LAYER_KEYS)
    assert {s.get("activation", "relu") for s in layers if "dim" in s} == set(ACTIVATIONS)


def test_padding_values_never_change_valid_frames(rng):
    model = _model(NETWORKS["mixed"])
    proto = build_onnx(model)
    feats, lengths = _batch(rng)
    a, _ = run_onnx(proto, feats, lengths)
    feats2 = feats.copy()
    for b, n in enumerate(lengths):
        feats2[n:, b] = 0.0
    b_, _ = run_onnx(proto, feats2, lengths)
    np.testing.assert_array_equal(a, b_)


def test_lstm_layouts_against_torch(rng):
    """torch.nn.LSTM (packed sequences, proj_size) as an independent reference for the gate
    order, the W/R/B layout and the backward direction starting at each sequence's end."""
    torch = pytest.importorskip("torch")
    for proj in (0, 3):
        net = {"layers": [{"type": "blstm", "hidden": 5, "num_layers": 2, "proj": proj}]}
        model = _model(net, seed=proj)
        params = model.state_dict()
        lstm = torch.nn.LSTM(D, 5, num_layers=2, bidirectional=True, proj_size=proj)
        lstm.load_state_dict({k[len("layers.0."):]: torch.from_numpy(v)
                              for k, v in params.items() if k.startswith("layers.0.")})
        feats, lengths = _batch(rng)
        with torch.no_grad():
            packed = torch.nn.utils.rnn.pack_padded_sequence(
                torch.from_numpy(feats), torch.from_numpy(lengths).long(), enforce_sorted=False)
            y, _ = torch.nn.utils.rnn.pad_packed_sequence(lstm(packed)[0],
                                                          total_length=feats.shape[0])
            logits = y.numpy() @ params["output.W"] + params["output.b"]
            ref = torch.log_softmax(torch.from_numpy(logits), -1).numpy()
        got, _ = run_onnx(build_onnx(model), feats, lengths)
        valid = np.arange(feats.shape[0])[:, None] < lengths[None, :]
        np.testing.assert_allclose(got[valid], ref[valid], atol=1e-4, rtol=0)


def test_metadata_and_lengths_dtype(tmp_path):
    from asrkit.io import load_feature_config

    conf = tmp_path / "fbank.toml"
    conf.write_text('[features]\ntype = "fbank"\nnum_mel_bins = 6\nframe_shift = 12.5\n'
                    '[cmvn]\nmode = "utterance"\n')
    fconf = load_feature_config(conf)
    model = _model(NETWORKS["tdnn_strided"] | {"stack_frames": 2, "subsample_frames": 2})
    path = tmp_path / "am.onnx"
    to_onnx(model, path, feature_config=fconf, lengths_dtype="int64",
            extra_metadata={"cmvn": "utterance", "norm_vars": False})
    proto = onnx.load(str(path))
    meta = {p.key: p.value for p in proto.metadata_props}
    assert json.loads(meta["tokens"]) == TOKENS and meta["blank"] == "0"
    assert meta["subsampling"] == "12" == str(subsampling_factor(model.network))
    assert float(meta["frame_shift"]) == pytest.approx(0.0125 * 12)
    assert meta["feature_type"] == "fbank" and meta["cmvn"] == "utterance"
    assert meta["norm_vars"] == "false"
    back = tmp_path / "back.toml"
    back.write_text(meta["feature_config"])
    assert load_feature_config(back).options == fconf.options
    assert json.loads(meta["network"]) == model.network
    decoded = read_metadata(path)
    assert decoded["tokens"] == TOKENS and decoded["blank"] == 0 and decoded["subsampling"] == 12
    assert decoded["frame_shift"] == pytest.approx(0.15) and decoded["input_dim"] == D
    lengths_input = next(i for i in proto.graph.input if i.name == "lengths")
    assert lengths_input.type.tensor_type.elem_type == onnx.TensorProto.INT64
    feats, lengths = _batch(np.random.default_rng(1), T=30, lengths=(30, 17))
    res = compare_with_model(model, path, feats, lengths)
    assert res["lengths_equal"] and res["max_abs_diff"] < 1e-4
    # without a feature config: Kaldi's 10 ms shift
    meta = {p.key: p.value for p in build_onnx(model).metadata_props}
    assert float(meta["frame_shift"]) == pytest.approx(0.12) and "feature_config" not in meta


def test_to_onnx_takes_a_model_file(tmp_path, rng):
    from asrkit.models import save

    model = _model(NETWORKS["blstmp"])
    save(str(tmp_path / "final.mdl"), model)
    to_onnx(str(tmp_path / "final.mdl"), tmp_path / "am.onnx")
    res = compare_with_model(model, tmp_path / "am.onnx", *_batch(rng))
    assert res["lengths_equal"] and res["max_abs_diff"] < 1e-4


def test_newer_opsets(rng):
    model = _model(NETWORKS["mixed"])
    for opset in (18, 20):
        proto = build_onnx(model, opset=opset)
        onnx.checker.check_model(proto, full_check=True)
        res = compare_with_model(model, proto, *_batch(rng))
        assert res["max_abs_diff"] < 1e-4


def test_errors_name_the_problem(tmp_path):
    model = _model(NETWORKS["lstm"])
    with pytest.raises(ExportError, match="opset 16"):
        build_onnx(model, opset=16)
    with pytest.raises(ExportError, match="lengths_dtype"):
        build_onnx(model, lengths_dtype="float32")
    model.network = dict(model.network, layers=[{"type": "conformer"}])
    path = tmp_path / "am.onnx"
    path.write_bytes(b"old")
    with pytest.raises(ExportError, match="layer #0.*'conformer'"):
        to_onnx(model, path)
    assert path.read_bytes() == b"old"  # atomic: the old file is untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["am.onnx"]
    with pytest.raises(ExportError, match="not an asrkit"):
        read_metadata(onnx.helper.make_model(onnx.helper.make_graph([], "g", [], [])))


def test_bench_export_runs_on_tiny_shapes():
    import argparse

    from asrkit.bench import export as bench

    args = argparse.Namespace(frames=12, batch=3, input=5, hidden=4, layers=1, proj=2, tokens=4,
                              threads=1, seed=0, repeat=1)
    (case,) = bench.run(args)
    assert case.extra["lengths_equal"] and case.extra["max_abs_diff"] < 1e-4
    assert case.asrkit_s > 0 and case.reference_s > 0


def test_long_sequences_realistic_sizes(rng):
    """Hundreds of frames through stacked (B)LSTMs: no drift beyond 1e-4 on valid frames."""
    net = {"stack_frames": 3, "subsample_frames": 3, "layers": [
        {"type": "blstm", "hidden": 64, "num_layers": 3},
        {"type": "blstm", "hidden": 48, "proj": 32},
        {"type": "tdnn", "dim": 40, "context": 3, "stride": 2}]}
    model = Model(net, D, TOKENS, blank=0)
    res = compare_with_model(model, build_onnx(model), *_batch(rng, 900, (900, 611, 37, 2)))
    assert res["lengths_equal"] and res["max_abs_diff"] < 1e-4
