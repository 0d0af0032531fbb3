"""Inference of an exported acoustic model: asrkit's own graph against onnxruntime.

A random model of the shipped ``data/conf/blstm_ctc.toml`` shape (BLSTM layers over stacked,
subsampled frames; ``--proj`` adds LSTMP projections, which run as an ONNX Scan) is exported with
``asrkit.export.build_onnx`` and both run the same padded batch with ragged lengths drawn from
[T/2, T]. The extras give the export time, the file size and the largest difference of the
log-probs on valid frames. Each side is timed alone in a fresh process (``asrkit.bench.sides``;
the model is rebuilt there from the same seed) with ``--threads`` threads: onnxruntime's intra-op
threads, and the BLAS/OpenMP/numba thread variables of both.
"""

from __future__ import annotations

import os
import time

import numpy as np

from asrkit.bench import Case
from asrkit.bench.sides import run_side, thread_env

NAME = "export"
HELP = "exported ONNX acoustic model in onnxruntime against asrkit's forward pass"


def add_arguments(parser) -> None:
    """Shape options: frames, batch, features, hidden, layers, projection, tokens, threads."""
    parser.add_argument("--frames", type=int, default=300, help="T, input frames per sequence")
    parser.add_argument("--batch", type=int, default=8, help="B, sequences per batch")
    parser.add_argument("--input", type=int, default=80, help="D, features per frame")
    parser.add_argument("--hidden", type=int, default=320, help="cells per direction")
    parser.add_argument("--layers", type=int, default=4, help="stacked BLSTM layers")
    parser.add_argument("--proj", type=int, default=0, help="LSTMP projection (0: none)")
    parser.add_argument("--tokens", type=int, default=32, help="output classes")
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="threads of each side (onnxruntime intra-op, BLAS, numba)")
    parser.add_argument("--seed", type=int, default=0)


_KEYS = ("frames", "batch", "input", "hidden", "layers", "proj", "tokens", "threads", "seed")


def _model_and_batch(p):
    from asrkit.models import Model

    net = {"stack_frames": 3, "subsample_frames": 3, "seed": p["seed"],
           "layers": [{"type": "blstm", "hidden": p["hidden"], "num_layers": p["layers"],
                       "proj": p["proj"]}]}
    tokens = ["<blk>"] + [f"t{i}" for i in range(1, p["tokens"])]
    model = Model(net, p["input"], tokens, blank=0)
    rng = np.random.default_rng(p["seed"])
    T, B = p["frames"], p["batch"]
    lengths = rng.integers(T // 2, T + 1, B).astype(np.int32)
    lengths[0] = T
    feats = rng.standard_normal((T, B, p["input"])).astype(np.float32)
    return model, feats, lengths


def _session(proto, threads):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    return ort.InferenceSession(proto.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])


def measure_side(side: str, p: dict, repeat: int = 5) -> dict:
    """In a fresh process (``run_side``): the timing of one forward pass of the batch."""
    from asrkit.bench.sides import measure_step

    model, feats, lengths = _model_and_batch(p)
    if side == "asrkit":
        step = lambda: model(feats, lengths)  # noqa: E731
    else:
        from asrkit.export import build_onnx

        sess = _session(build_onnx(model), p["threads"])
        feed = {"feats": feats, "lengths": lengths}
        step = lambda: sess.run(None, feed)  # noqa: E731
    return measure_step(step, repeat=repeat, memory=False)


def run(args) -> list:
    """One case: the forward pass of the batch, asrkit vs onnxruntime, each in its own
    process; the export and the agreement measured here."""
    import onnx  # noqa: F401  (imported before the export is timed)

    from asrkit.export import build_onnx

    p = {k: getattr(args, k) for k in _KEYS}
    model, feats, lengths = _model_and_batch(p)
    t0 = time.perf_counter()
    proto = build_onnx(model)
    export_s = time.perf_counter() - t0
    sess = _session(proto, args.threads)
    ref, ref_len = model(feats, lengths)
    got, got_len = sess.run(None, {"feats": feats, "lengths": lengths})
    valid = np.arange(ref.shape[0])[:, None] < ref_len[None, :]
    diff = float(np.abs(ref - got)[valid].max())
    del sess
    ours = run_side(__name__, "asrkit", p, args.repeat, env=thread_env(args.threads))["timing"]
    theirs = run_side(__name__, "onnxruntime", p, args.repeat,
                      env=thread_env(args.threads))["timing"]
    name = f"T={p['frames']} B={p['batch']} {args.layers}x" \
           f"{'blstmp' if args.proj else 'blstm'}{args.hidden}"
    return [Case(name, ours["median"], "onnxruntime", theirs["median"],
                 {"export_s": round(export_s, 3), "onnx_bytes": len(proto.SerializeToString()),
                  "max_abs_diff": diff, "lengths_equal": bool(np.all(ref_len == got_len))},
                 asrkit_spread=(ours["q1"], ours["q3"]),
                 reference_spread=(theirs["q1"], theirs["q3"]))]
