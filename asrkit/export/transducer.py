"""Transducer models as three ONNX files, the split of icefall's ``export-onnx.py`` that
sherpa-onnx loads (``--encoder``, ``--decoder``, ``--joiner``, ``--tokens``):

- ``encoder.onnx``: ``x`` float32 ``[N, T, input_dim]``, ``x_lens`` int64 ``[N]`` ->
  ``encoder_out`` float32 ``[N, T', H]`` (the network with its projection to the joiner
  dimension; zeros past each length), ``encoder_out_lens`` int64 ``[N]``;
- ``decoder.onnx`` (the prediction network with its projection): stateless, ``y`` int64
  ``[N, context_size]`` (the last labels, oldest first; the blank stands for "none yet") ->
  ``decoder_out`` float32 ``[N, H]``; LSTM, ``y`` int64 ``[N, 1]``, ``h``, ``c`` float32
  ``[layers, N, predictor_dim]`` -> ``decoder_out``, ``next_h``, ``next_c``;
- ``joiner.onnx``: ``encoder_out``, ``decoder_out`` float32 ``[N, H]`` -> ``logit`` float32
  ``[N, V]`` (``tanh(enc + pred) @ W.T + b``, unnormalised);
- ``tokens.txt``: ``symbol id`` per line.

Each layer lowers itself (the network's layers as for a CTC export, ``Predictor.onnx``,
``Joiner.onnx``). Every file's metadata has ``format = "asrkit-transducer"``, ``component``,
and sherpa-onnx's keys ``vocab_size``, ``context_size`` (1 for an LSTM predictor),
``joiner_dim``, ``blank``; the encoder's also has the tokens, network, feature config and frame
shift of a CTC export (:func:`asrkit.export.metadata`) and the reader's ``unit`` (how the
tokens spell words: ``word``, ``char``, ``piece``).
"""

from __future__ import annotations

import os

import numpy as np

from asrkit.export.onnx_export import (
    DEFAULT_OPSET,
    TRANSDUCER_FORMAT,
    check_opset,
    lower_network,
    make_model,
    masks,
    metadata,
    write_proto,
)
from asrkit.export.onnx_graph import GraphBuilder
from asrkit.layers.onnx import ExportError

FILES = {"encoder": "encoder.onnx", "decoder": "decoder.onnx", "joiner": "joiner.onnx"}
TOKENS_FILE = "tokens.txt"


def _common_metadata(model, component: str) -> dict[str, str]:
    spec = model.transducer
    meta = {"format": TRANSDUCER_FORMAT, "component": component,
            "vocab_size": str(model.num_classes), "blank": str(model.blank),
            "context_size": str(spec["context_size"] if spec["predictor"] == "stateless" else 1),
            "joiner_dim": str(spec["joiner_dim"]), "predictor": spec["predictor"],
            "predictor_dim": str(spec["predictor_dim"]), "model_author": "asrkit"}
    if spec["predictor"] == "lstm":
        meta["predictor_layers"] = str(spec["predictor_layers"])
    return meta


def build_transducer_onnx(model, feature_config=None, frame_shift: float | None = None,
                          opset: int = DEFAULT_OPSET, extra_metadata: dict | None = None
                          ) -> dict[str, object]:
    """The ``ModelProto`` of each piece of a ``TransducerModel`` (see the module docstring):
    ``{"encoder": ..., "decoder": ..., "joiner": ...}``.

    feature_config, frame_shift, extra_metadata: as :func:`asrkit.export.build_onnx` (they go
    into the encoder's metadata); opset: >= 17. Raises ExportError for a model that is not a
    transducer or a layer without an ONNX lowering.
    """
    from onnx import TensorProto, helper

    if not hasattr(model, "transducer"):
        raise ExportError("not a transducer model (a CTC model exports as one file: "
                          "asrkit.export.to_onnx)")
    check_opset(opset)
    F, I64 = TensorProto.FLOAT, TensorProto.INT64
    spec, V, H = model.transducer, model.num_classes, model.transducer["joiner_dim"]

    g = GraphBuilder()
    s = lower_network(g, model, g.op("Transpose", ["x"], "feats", perm=[1, 0, 2]), "x_lens")
    enc = g.op("Mul", [s.x, masks(g, s)[1]], "encoder_out_tbd")
    g.op("Transpose", [enc], names=["encoder_out"], perm=[1, 0, 2])
    g.op("Identity", [s.lengths], names=["encoder_out_lens"])
    graph = g.make_graph("asrkit_transducer_encoder", [
        helper.make_tensor_value_info("x", F, ["N", "T", model.input_dim]),
        helper.make_tensor_value_info("x_lens", I64, ["N"])], [
        helper.make_tensor_value_info("encoder_out", F, ["N", "T_out", H]),
        helper.make_tensor_value_info("encoder_out_lens", I64, ["N"])])
    meta = metadata(model, feature_config, frame_shift,
                    {**(extra_metadata or {}), **_common_metadata(model, "encoder"),
                     "unit": str(model.reader.get("unit", "word"))})
    protos = {"encoder": make_model(graph, opset, "asrkit transducer encoder: x [N, T, D], "
                                    "x_lens [N] -> encoder_out [N, T', H], encoder_out_lens [N]",
                                    meta)}

    g = GraphBuilder()
    lstm = spec["predictor"] == "lstm"
    K = 1 if lstm else spec["context_size"]
    inputs = [helper.make_tensor_value_info("y", I64, ["N", K])]
    outputs = [helper.make_tensor_value_info("decoder_out", F, ["N", H])]
    if lstm:
        L, D = spec["predictor_layers"], spec["predictor_dim"]
        inputs += [helper.make_tensor_value_info(n, F, [L, "N", D]) for n in ("h", "c")]
        outputs += [helper.make_tensor_value_info(n, F, [L, "N", D])
                    for n in ("next_h", "next_c")]
    out, nxt = model.predictor.onnx(g, "y", model.blank, ("h", "c") if lstm else None)
    g.op("Identity", [out], names=["decoder_out"])
    for name, value in zip(("next_h", "next_c"), nxt or ()):
        g.op("Identity", [value], names=[name])
    protos["decoder"] = make_model(g.make_graph("asrkit_transducer_decoder", inputs, outputs),
                                   opset, "asrkit transducer prediction network: y [N, K] -> "
                                   "decoder_out [N, H]", _common_metadata(model, "decoder"))

    g = GraphBuilder()
    g.op("Identity", [model.joiner.onnx(g, "encoder_out", "decoder_out")], names=["logit"])
    graph = g.make_graph("asrkit_transducer_joiner", [
        helper.make_tensor_value_info("encoder_out", F, ["N", H]),
        helper.make_tensor_value_info("decoder_out", F, ["N", H])],
        [helper.make_tensor_value_info("logit", F, ["N", V])])
    protos["joiner"] = make_model(graph, opset, "asrkit transducer joiner: encoder_out [N, H], "
                                  "decoder_out [N, H] -> logit [N, V]",
                                  _common_metadata(model, "joiner"))
    return protos


def transducer_to_onnx(model, out_dir: str | os.PathLike, feature_config=None,
                       frame_shift: float | None = None, opset: int = DEFAULT_OPSET,
                       extra_metadata: dict | None = None, check: bool = True
                       ) -> dict[str, str]:
    """Write a ``TransducerModel`` (or a transducer model file's path) into the folder
    ``out_dir`` (created) as ``encoder.onnx``, ``decoder.onnx``, ``joiner.onnx`` and
    ``tokens.txt``; returns ``{"encoder": path, "decoder": path, "joiner": path, "tokens":
    path}``. Arguments as :func:`build_transducer_onnx`; check: ``onnx.checker`` each file.
    Raises ExportError (nothing half-written is left as a file: each is written atomically)."""
    from asrkit.utils import atomic_write_bytes

    if isinstance(model, (str, os.PathLike)):
        from asrkit.models import load

        model = load(model)
    out_dir = os.fspath(out_dir)
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise ExportError(f"{out_dir}: a transducer exports a folder (encoder.onnx, "
                          "decoder.onnx, joiner.onnx, tokens.txt), and this is a file")
    protos = build_transducer_onnx(model, feature_config, frame_shift, opset, extra_metadata)
    os.makedirs(out_dir, exist_ok=True)
    paths = {}
    for part, proto in protos.items():
        paths[part] = os.path.join(out_dir, FILES[part])
        write_proto(proto, paths[part], check)
    paths["tokens"] = os.path.join(out_dir, TOKENS_FILE)
    text = "".join(f"{tok} {i}\n" for i, tok in enumerate(model.tokens))
    atomic_write_bytes(paths["tokens"], text.encode("utf-8"))
    return paths


class OnnxTransducer:
    """An exported transducer folder (:func:`transducer_to_onnx`) in onnxruntime CPU sessions.

    ``encode(feats [T, B, D] or [T, D], lengths=None)`` -> ``(enc float32 [T', B, H] or [T',
    H], out_lengths int32 [B])`` (asrkit's layout, as ``TransducerModel.encode``);
    ``decoder(y int64 [N, K], h=None, c=None)`` -> ``decoder_out [N, H]`` (and the next LSTM
    state); ``joiner(enc [N, H], dec [N, H])`` -> ``logit [N, V]``; ``predictor()``: a step
    object over the decoder for ``asrkit.kernels.transducer.greedy_search``; ``greedy(feats)``
    decodes one utterance with the three files (``asrkit.decoders.transducer.words_of`` spells
    its tokens). ``tokens``, ``blank``, ``context_size``,
    ``predictor_kind`` come from the metadata.

    It also stands in for the ``TransducerModel`` in asrkit's Recognizer
    (``dataclasses.replace(folder, model=OnnxTransducer(...))``: its encoder, searched by
    asrkit's searches over the exported decoder and joiner, :meth:`search_parts`):
    ``transducer`` (the description's keys the metadata carries), ``reader`` (``unit``),
    ``num_classes`` and ``input_dim`` are the model's. ``seconds`` adds up the time spent in
    the three sessions (for speed figures). ``int8``: load ``encoder.int8.onnx``, ... (``asrkit
    export --int8``) instead; ``threads``: each session's intra-op threads.
    """

    def __init__(self, folder: str | os.PathLike, threads: int = 1, int8: bool = False):
        import onnxruntime as ort

        from asrkit.export.onnx_export import read_metadata
        from asrkit.export.quantize import int8_path

        folder = os.fspath(folder)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        self.sessions, paths = {}, {}
        for part, name in FILES.items():
            path = os.path.join(folder, name)
            paths[part] = int8_path(path) if int8 else path
            if not os.path.isfile(paths[part]):
                raise ExportError(f"{paths[part]}: missing: not a transducer export folder"
                                  + (" with int8 files (asrkit export --int8)" if int8 else ""))
            self.sessions[part] = ort.InferenceSession(paths[part], opts,
                                                       providers=["CPUExecutionProvider"])
        meta = read_metadata(paths["encoder"])
        if meta.get("component") != "encoder":
            raise ExportError(f"{paths['encoder']} is not a transducer encoder export")
        self.tokens, self.blank = meta["tokens"], meta["blank"]
        self.input_dim, self.context_size = meta["input_dim"], meta["context_size"]
        self.num_classes = meta["vocab_size"]
        self.predictor_kind = meta["predictor"]
        self.layers = meta.get("predictor_layers", 1)
        self.predictor_dim = meta["predictor_dim"]
        self.transducer = {"predictor": self.predictor_kind, "predictor_dim": self.predictor_dim,
                           "joiner_dim": meta["joiner_dim"], "context_size": self.context_size}
        if self.predictor_kind == "lstm":
            self.transducer["predictor_layers"] = self.layers
        self.reader = {"unit": meta.get("unit", "word")}
        self.seconds = 0.0

    def _run(self, part: str, names, feed: dict) -> list:
        """``sessions[part].run(names, feed)``, its time added to ``seconds``."""
        import time

        t0 = time.perf_counter()
        out = self.sessions[part].run(names, feed)
        self.seconds += time.perf_counter() - t0
        return out

    def encode(self, feats: np.ndarray, lengths: np.ndarray | None = None):
        """The encoder output of a padded batch (see the class docstring)."""
        from asrkit.export.verify import padded_batch

        feats, lengths, single = padded_batch(feats, lengths)
        enc, lens = self._run("encoder", None, {
            "x": np.ascontiguousarray(feats.transpose(1, 0, 2)),
            "x_lens": np.asarray(lengths, np.int64)})
        enc, lens = enc.transpose(1, 0, 2), lens.astype(np.int32)
        return (enc[:, 0], lens) if single else (enc, lens)

    def decoder(self, y: np.ndarray, h: np.ndarray | None = None, c: np.ndarray | None = None):
        """``decoder_out`` float32 ``[N, H]`` for labels ``y`` int64 ``[N, K]``; for an LSTM
        predictor ``(decoder_out, next_h, next_c)`` from the state ``h``, ``c`` ``[layers, N,
        D]`` (zeros when None)."""
        y = np.asarray(y, np.int64)
        if self.predictor_kind != "lstm":
            return self._run("decoder", ["decoder_out"], {"y": y})[0]
        shape = (self.layers, y.shape[0], self.predictor_dim)
        zeros = np.zeros(shape, np.float32)
        return tuple(self._run("decoder", None, {
            "y": y, "h": zeros if h is None else h, "c": zeros if c is None else c}))

    def joiner(self, enc: np.ndarray, dec: np.ndarray) -> np.ndarray:
        """``logit`` float32 ``[N, V]`` of ``enc``, ``dec`` float32 ``[N, H]``."""
        return self._run("joiner", ["logit"], {
            "encoder_out": np.asarray(enc, np.float32), "decoder_out": np.asarray(dec, np.float32)
        })[0]

    def predictor(self):
        """A step object (``start() -> (state, out)``, ``step(state, label) -> (state, out)``,
        ``out`` float32 ``[H]``) running the exported decoder."""
        return _OnnxPredictorStep(self)

    def search_parts(self):
        """``TransducerModel.search_parts``'s ``(predictor, weight, bias, joiner)`` over the
        exported files: :meth:`predictor`, None, None and :meth:`joiner` (the joiner's weights
        stay in joiner.onnx, int8 ones too)."""
        return self.predictor(), None, None, self.joiner

    def greedy(self, feats: np.ndarray, max_symbols: int = 3):
        """Greedy search (``asrkit.kernels.transducer.greedy_search``) over one utterance
        ``feats`` float32 ``[T, D]`` with the three exported files only; returns ``(tokens,
        frames, log_prob)``: the emitted ids, their frames, the path's log-probability."""
        from asrkit.kernels.transducer import greedy_search

        enc, _ = self.encode(feats)
        return greedy_search(enc, self.predictor(), None, None, self.blank, max_symbols,
                             joiner=lambda e, o: self.joiner(e[None], o[None])[0])


class _OnnxPredictorStep:
    """``asrkit.kernels.transducer``'s step protocol over an exported decoder."""

    def __init__(self, model: OnnxTransducer):
        self.model = model
        self._cache: dict[tuple, np.ndarray] = {}

    def _stateless(self, ctx: tuple):
        if ctx not in self._cache:
            self._cache[ctx] = self.model.decoder(np.array([ctx], np.int64))[0]
        return ctx, self._cache[ctx]

    def start(self):
        m = self.model
        if m.predictor_kind != "lstm":
            return self._stateless((m.blank,) * m.context_size)
        out, h, c = m.decoder(np.array([[m.blank]], np.int64))
        return (h, c), out[0]

    def step(self, state, label: int):
        if self.model.predictor_kind != "lstm":
            return self._stateless(state[1:] + (int(label),))
        out, h, c = self.model.decoder(np.array([[label]], np.int64), *state)
        return (h, c), out[0]


def compare_transducer(model, folder: str | os.PathLike, feats: np.ndarray,
                       lengths: np.ndarray, seed: int = 0, max_symbols: int = 3) -> dict:
    """Check an exported folder against asrkit's ``model`` with onnxruntime.

    feats float32 ``[T, B, D]``, lengths int ``[B]``: a padded batch for the encoder (valid
    frames compared); the decoder is compared on every label context of a random label
    sequence, the joiner on random encoder and decoder rows; greedy search runs over each
    utterance with asrkit and with the exported files (same tokens at the same frames).
    Returns ``{"encoder_max_abs_diff", "decoder_max_abs_diff", "joiner_max_abs_diff": float,
    "lengths_equal": bool, "greedy_equal": int (utterances with the same tokens and frames),
    "utterances": int}``.
    """
    from asrkit.kernels.transducer import greedy_search, joiner_logits

    onx = OnnxTransducer(folder)
    ref, ref_len = model.encode(feats, lengths)
    got, got_len = onx.encode(feats, lengths)
    lengths_equal = bool(np.array_equal(ref_len, got_len)) and ref.shape == got.shape
    valid = np.arange(ref.shape[0])[:, None] < np.asarray(ref_len)[None, :]
    enc_diff = float(np.abs(ref - got)[valid].max()) if lengths_equal and valid.any() else (
        0.0 if lengths_equal else float("inf"))

    rng = np.random.default_rng(seed)
    V = model.num_classes
    step, w, b, _ = model.search_parts()
    ostep = onx.predictor()
    (st, out), (ost, oout) = step.start(), ostep.start()
    dec_diff = float(np.abs(out - oout).max())
    for label in [i for i in rng.integers(0, V, 12) if i != model.blank]:  # (never stepped)
        (st, out), (ost, oout) = step.step(st, int(label)), ostep.step(ost, int(label))
        dec_diff = max(dec_diff, float(np.abs(out - oout).max()))

    H = model.transducer["joiner_dim"]
    e, d = (rng.standard_normal((5, H)).astype(np.float32) for _ in range(2))
    join_diff = float(np.abs(joiner_logits(e, d, w, b) - onx.joiner(e, d)).max())

    same = 0
    for i, n in enumerate(np.asarray(lengths)):
        mine = greedy_search(ref[:ref_len[i], i], step, w, b, model.blank, max_symbols)
        same += mine[:2] == onx.greedy(feats[:n, i], max_symbols)[:2]
    return {"encoder_max_abs_diff": enc_diff, "decoder_max_abs_diff": dec_diff,
            "joiner_max_abs_diff": join_diff, "lengths_equal": lengths_equal,
            "greedy_equal": same, "utterances": len(lengths)}
