"""Run an exported model with onnxruntime and compare it with asrkit's own outputs."""

from __future__ import annotations

import os

import numpy as np


class OnnxModel:
    """An exported acoustic model in an onnxruntime CPU session, called like an
    ``asrkit.models.Model``: ``model(feats [T, B, D] or [T, D], lengths=None)`` ->
    ``(log_probs float32 [T', B, C] or [T', C], out_lengths int32 [B])``.

    ``input_dim``, ``num_classes``, ``tokens`` and ``blank`` come from the export's metadata;
    ``seconds`` adds up the time spent in the session (for speed figures). ``threads``: the
    session's intra-op threads.
    """

    def __init__(self, path_or_proto, threads: int = 1):
        import onnxruntime as ort

        from asrkit.export.onnx_export import read_metadata

        if isinstance(path_or_proto, (str, os.PathLike)):
            src = os.fspath(path_or_proto)
        else:
            src = path_or_proto.SerializeToString()
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        self.session = ort.InferenceSession(src, opts, providers=["CPUExecutionProvider"])
        self.lengths_type = {"tensor(int32)": np.int32, "tensor(int64)": np.int64}[
            next(i.type for i in self.session.get_inputs() if i.name == "lengths")]
        meta = read_metadata(path_or_proto)
        self.input_dim, self.num_classes = meta["input_dim"], meta["num_classes"]
        self.tokens, self.blank = meta["tokens"], meta["blank"]
        self.seconds = 0.0

    def __call__(self, feats: np.ndarray, lengths: np.ndarray | None = None):
        import time

        feats, lengths, single = padded_batch(feats, lengths)
        t0 = time.perf_counter()
        logp, out_len = self.session.run(["log_probs", "out_lengths"], {
            "feats": feats, "lengths": np.asarray(lengths, self.lengths_type)})
        self.seconds += time.perf_counter() - t0
        out_len = np.asarray(out_len, np.int32)
        return (logp[:, 0], out_len) if single else (logp, out_len)


def padded_batch(feats: np.ndarray, lengths: np.ndarray | None):
    """``(feats float32 [T, B, D], lengths [B], single)`` of a model call's arguments: a single
    ``[T, D]`` utterance gains a batch axis (``single`` True); lengths default to all T."""
    feats = np.ascontiguousarray(feats, np.float32)
    single = feats.ndim == 2
    if single:
        feats = feats[:, None]
    if lengths is None:
        lengths = np.full(feats.shape[1], feats.shape[0])
    return feats, lengths, single


def run_onnx(path_or_proto, feats: np.ndarray, lengths: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """Run an exported acoustic model with onnxruntime on the CPU (one thread).

    path_or_proto: a file path or a ``ModelProto``; feats float32 ``[T, B, D]``; lengths int
    ``[B]`` (cast to the model's lengths type). Returns ``(log_probs float32 [T', B, C],
    out_lengths int32 [B])``.
    """
    return OnnxModel(path_or_proto)(feats, lengths)


def compare_with_model(model, path_or_proto, feats: np.ndarray, lengths: np.ndarray) -> dict:
    """Run both asrkit and onnxruntime on one padded batch; returns the differences.

    Returns ``{"max_abs_diff": float (valid frames only), "lengths_equal": bool,
    "padding_max_abs": float (|log_probs| on padded frames of the ONNX output)}``.
    """
    ref, ref_len = model(feats, lengths)
    got, got_len = run_onnx(path_or_proto, feats, lengths)
    lengths_equal = ref_len.shape == got_len.shape and bool(np.all(ref_len == got_len))
    if not lengths_equal or ref.shape != got.shape:
        return {"max_abs_diff": float("inf"), "lengths_equal": lengths_equal,
                "padding_max_abs": float("nan")}
    valid = np.arange(ref.shape[0])[:, None] < np.asarray(ref_len)[None, :]
    diff = np.abs(ref - got)[valid]
    pad = np.abs(got)[~valid]
    return {"max_abs_diff": float(diff.max()) if diff.size else 0.0, "lengths_equal": True,
            "padding_max_abs": float(pad.max()) if pad.size else 0.0}
