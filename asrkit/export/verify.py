"""Run an exported model with onnxruntime and compare it with asrkit's own outputs."""

from __future__ import annotations

import os

import numpy as np


def run_onnx(path_or_proto, feats: np.ndarray, lengths: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """Run an exported acoustic model with onnxruntime on the CPU.

    path_or_proto: a file path or a ``ModelProto``; feats float32 ``[T, B, D]``; lengths int
    ``[B]`` (cast to the model's lengths type). Returns ``(log_probs float32 [T', B, C],
    out_lengths int32 [B])``.
    """
    import onnxruntime as ort

    if isinstance(path_or_proto, (str, os.PathLike)):
        src = os.fspath(path_or_proto)
    else:
        src = path_or_proto.SerializeToString()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(src, opts, providers=["CPUExecutionProvider"])
    len_type = {"tensor(int32)": np.int32, "tensor(int64)": np.int64}[
        next(i.type for i in sess.get_inputs() if i.name == "lengths")]
    logp, out_len = sess.run(["log_probs", "out_lengths"],
                             {"feats": np.ascontiguousarray(feats, np.float32),
                              "lengths": np.asarray(lengths, len_type)})
    return logp, out_len


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
