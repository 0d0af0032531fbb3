"""Acoustic models (``asrkit.models.Model``) as ONNX graphs for deployment.

The graph has two inputs and two outputs, with dynamic time and batch dimensions:

- ``feats`` float32 ``[T, B, input_dim]``: padded features (what ``Model.__call__`` takes);
- ``lengths`` int32 (or int64, ``lengths_dtype``) ``[B]``: frames per sequence, each ``<= T``
  (onnxruntime rejects a longer one in the LSTM op);
- ``log_probs`` float32 ``[T', B, num_classes]``: log-softmax over the tokens;
- ``out_lengths`` int32 ``[B]``: output frames per sequence (after stacking/subsampling).

On every valid frame the outputs equal asrkit's own (to float32 rounding, ~1e-6). Frames past a
sequence's length are zeros in ``log_probs``, as asrkit leaves them; nothing past a length (the
values of padded input frames) ever changes a valid output frame.

Each layer lowers itself (``Layer.onnx``, on the helpers of :mod:`asrkit.layers.onnx`):
blstm/lstm -> ONNX ``LSTM`` (gates reordered to i, o, f, c; ``sequence_lens``), one node per
stacked layer; LSTMP (``proj > 0``) -> a ``Scan`` over time with the projection in the step
(ONNX's LSTM has no projection); tdnn -> ``Conv`` with asrkit's centred padding; dense ->
``MatMul`` + ``Add``; frame stacking/subsampling -> ``Pad``/``Slice``/``Concat``; dropout is
omitted (inference). The backward LSTM direction relies on the runtime honouring
``sequence_lens`` (each sequence reversed within its own length), as onnxruntime does; the
LSTMP Scan reverses explicitly with ``ReverseSequence``. The model's tokens, blank, frame
shift, feature config and network description are stored in ``metadata_props`` (see
:func:`metadata`; :func:`read_metadata` decodes them).
"""

from __future__ import annotations

import json
import os

from asrkit.export.onnx_graph import GraphBuilder
from asrkit.layers import NETWORK_LAYERS, ConfigError, Layer, network_layers
from asrkit.layers import subsampling_factor as _subsampling
from asrkit.layers.onnx import ExportError, Stream, masks

DEFAULT_OPSET = 17
MIN_OPSET = 17
METADATA_FORMAT = "asrkit-acoustic-model"
TRANSDUCER_FORMAT = "asrkit-transducer"  # each of a transducer's encoder, decoder and joiner
KALDI_FRAME_SHIFT_MS = 10.0
_PROTOBUF_LIMIT = 2**31 - 1


def subsampling_factor(network: dict) -> int:
    """Input frames per output frame of a parsed ``[network]`` description (frame
    subsampling times every layer's own)."""
    return _subsampling(network_layers(network, 1))


def metadata(model, feature_config=None, frame_shift: float | None = None,
             extra: dict | None = None) -> dict[str, str]:
    """The ``metadata_props`` of an exported model, all values strings.

    Keys: ``format``, ``asrkit_version``, ``tokens`` (JSON list, by id), ``blank``,
    ``input_dim``, ``num_classes``, ``subsampling``, ``frame_shift`` (seconds per output frame),
    ``network`` (JSON description), ``feature_type`` and ``feature_config`` (TOML text, as
    ``asrkit compute-features`` reads it) when a feature config is given, plus ``extra``.
    ``frame_shift`` defaults to the feature config's ``frame_shift`` (Kaldi's 10 ms without one)
    times :func:`subsampling_factor`.
    """
    import asrkit

    factor = subsampling_factor(model.network)
    if frame_shift is None:
        shift_ms = KALDI_FRAME_SHIFT_MS
        if feature_config is not None:
            shift_ms = float(feature_config.options.get("frame_shift", KALDI_FRAME_SHIFT_MS))
        frame_shift = shift_ms / 1000.0 * factor
    meta = {
        "format": METADATA_FORMAT,
        "asrkit_version": str(getattr(asrkit, "__version__", "")),
        "tokens": json.dumps(list(model.tokens), ensure_ascii=False),
        "blank": str(model.blank),
        "input_dim": str(model.input_dim),
        "num_classes": str(model.num_classes),
        "subsampling": str(factor),
        "frame_shift": repr(float(frame_shift)),
        "network": json.dumps(model.network, sort_keys=True),
    }
    if feature_config is not None:
        meta["feature_type"] = feature_config.kind
        meta["feature_config"] = feature_config.to_toml()
    for k, v in (extra or {}).items():
        meta[str(k)] = v if isinstance(v, str) else json.dumps(v)
    return meta


def read_metadata(path_or_proto) -> dict:
    """The asrkit metadata of an exported model (a path or a ``ModelProto``), values decoded.

    Returns ``{"tokens": list[str], "blank": int, "input_dim": int, "num_classes": int,
    "subsampling": int, "frame_shift": float, "network": dict, ...}`` (a transducer's decoder
    and joiner carry ``vocab_size``, ``context_size``, ``joiner_dim``, ``blank`` instead of the
    tokens and network); keys this version does not know stay strings. Raises ExportError
    when the file carries no asrkit metadata.
    """
    import onnx

    where = "<model>"
    if isinstance(path_or_proto, (str, os.PathLike)):
        where = os.fspath(path_or_proto)
        path_or_proto = onnx.load(where, load_external_data=False)
    meta = {p.key: p.value for p in path_or_proto.metadata_props}
    if meta.get("format") not in (METADATA_FORMAT, TRANSDUCER_FORMAT):
        raise ExportError(f"{where}: not an asrkit acoustic model export (metadata format "
                          f"{meta.get('format')!r})")
    for k in ("tokens", "network"):
        if k in meta:
            meta[k] = json.loads(meta[k])
    for k in ("blank", "input_dim", "num_classes", "subsampling", "vocab_size", "context_size",
              "joiner_dim", "predictor_layers", "predictor_dim"):
        if k in meta:
            meta[k] = int(meta[k])
    if "frame_shift" in meta:
        meta["frame_shift"] = float(meta["frame_shift"])
    return meta


def _check_exportable(network: dict) -> None:
    """Raise ExportError naming the layer unless every layer of the description has a valid
    table of a type with an ONNX lowering."""
    exportable = [k for k, cls in NETWORK_LAYERS.items() if cls.onnx is not Layer.onnx]
    for i, spec in enumerate(network["layers"]):
        kind = spec.get("type")
        if kind not in exportable:
            raise ExportError(f"network layer #{i}: layer type {kind!r} has no ONNX export "
                              f"(supported: {', '.join(exportable)})")
        try:
            NETWORK_LAYERS[kind].parse_spec(spec, f"network layer #{i}: layer type {kind!r}")
        except ConfigError as e:
            raise ExportError(str(e)) from None


def build_onnx(model, feature_config=None, frame_shift: float | None = None,
               opset: int = DEFAULT_OPSET, lengths_dtype: str = "int32",
               extra_metadata: dict | None = None):
    """The ONNX ``ModelProto`` of an asrkit acoustic ``model`` (see the module docstring).

    feature_config: an ``asrkit.io.FeatureConfig`` to embed (optional); frame_shift: seconds
    per output frame for the metadata (default: derived); opset: ONNX opset, >= 17;
    lengths_dtype: "int32" or "int64", the type of the ``lengths`` input. Raises ExportError
    for a layer or option without an ONNX mapping.
    """
    from onnx import TensorProto, helper

    check_opset(opset)
    len_types = {"int32": TensorProto.INT32, "int64": TensorProto.INT64}
    if lengths_dtype not in len_types:
        raise ExportError(f"lengths_dtype must be 'int32' or 'int64'; got {lengths_dtype!r}")
    if hasattr(model, "transducer"):
        raise ExportError("a transducer model exports as three files (encoder, decoder, "
                          "joiner): use asrkit.export.transducer_to_onnx")
    g = GraphBuilder()
    lengths = g.op("Cast", ["lengths"], "lengths_i64", to=TensorProto.INT64)
    s = lower_network(g, model, "feats", lengths)
    logp = g.op("LogSoftmax", [s.x], "log_probs_all", axis=-1)
    g.op("Mul", [logp, masks(g, s)[1]], names=["log_probs"])
    g.op("Cast", [s.lengths], names=["out_lengths"], to=TensorProto.INT32)

    D, C = model.input_dim, model.num_classes
    inputs = [helper.make_tensor_value_info("feats", TensorProto.FLOAT, ["T", "B", D]),
              helper.make_tensor_value_info("lengths", len_types[lengths_dtype], ["B"])]
    outputs = [helper.make_tensor_value_info("log_probs", TensorProto.FLOAT, ["T_out", "B", C]),
               helper.make_tensor_value_info("out_lengths", TensorProto.INT32, ["B"])]
    graph = g.make_graph("asrkit_acoustic_model", inputs, outputs)
    return make_model(graph, opset, "asrkit acoustic model: feats [T, B, D], lengths [B] -> "
                                     "log_probs [T', B, C], out_lengths [B]",
                      metadata(model, feature_config, frame_shift, extra_metadata))


def check_opset(opset: int) -> None:
    """Raise ExportError unless ``opset`` is one asrkit writes and the installed onnx knows."""
    import onnx

    if opset < MIN_OPSET:
        raise ExportError(f"opset {opset} is too old: asrkit exports opset {MIN_OPSET} or newer")
    if opset > onnx.defs.onnx_opset_version():
        raise ExportError(f"opset {opset} is newer than the installed onnx supports "
                          f"({onnx.defs.onnx_opset_version()})")


def lower_network(g, model, feats: str, lengths: str) -> Stream:
    """Emit every layer of ``model``'s network (its output layer included) on builder ``g``
    over ``feats`` float32 ``[T, B, input_dim]`` with int64 ``lengths`` ``[B]``; returns the
    output stream. Raises ExportError naming a layer without a lowering."""
    _check_exportable(model.network)
    s = Stream(feats, lengths, model.input_dim)
    for layer in model.net.layers:
        s = layer.onnx(g, s)
    return s


def make_model(graph, opset: int, doc: str, meta: dict[str, str]):
    """The ``ModelProto`` of ``graph`` at ``opset`` with asrkit as producer and ``meta`` as its
    ``metadata_props``."""
    from onnx import helper

    import asrkit

    opsets = [helper.make_opsetid("", opset)]
    proto = helper.make_model(graph, opset_imports=opsets, producer_name="asrkit",
                              producer_version=str(getattr(asrkit, "__version__", "")),
                              doc_string=doc)
    # the oldest IR version that carries this opset, so older runtimes load the file too
    proto.ir_version = helper.find_min_ir_version_for(opsets)
    helper.set_model_props(proto, meta)
    return proto


def to_onnx(model, path: str | os.PathLike, feature_config=None, frame_shift: float | None = None,
            opset: int = DEFAULT_OPSET, lengths_dtype: str = "int32",
            extra_metadata: dict | None = None, check: bool = True):
    """Write ``model`` as an ONNX file at ``path`` (atomically); returns the ``ModelProto``.

    ``model``: an ``asrkit.models.Model`` or the path of a model file. Other arguments as
    :func:`build_onnx`; ``check``: run ``onnx.checker.check_model`` (full check,
    with shape inference) before writing. Raises ExportError for an unsupported layer or a model
    over protobuf's 2 GiB limit.
    """
    if isinstance(model, (str, os.PathLike)):
        from asrkit.models import load

        model = load(model)
    proto = build_onnx(model, feature_config, frame_shift, opset, lengths_dtype, extra_metadata)
    write_proto(proto, path, check)
    return proto


def write_proto(proto, path: str | os.PathLike, check: bool = True) -> None:
    """Write a ``ModelProto`` at ``path`` atomically, after ``onnx.checker`` (full check) when
    ``check``; ExportError when it is over protobuf's 2 GiB limit."""
    import onnx

    from asrkit.utils import atomic_write_bytes

    data = proto.SerializeToString()
    if len(data) > _PROTOBUF_LIMIT:
        raise ExportError(f"{os.fspath(path)}: the model is {len(data)} bytes, over ONNX's 2 GiB "
                          "single-file limit")
    if check:
        onnx.checker.check_model(proto, full_check=True)
    atomic_write_bytes(path, data)
