"""Inference of an exported acoustic model: asrkit's own graph against onnxruntime.

A random model of the shipped ``data/conf/blstm_ctc.toml`` shape (BLSTM layers over stacked,
subsampled frames; ``--proj`` adds LSTMP projections, which run as an ONNX Scan) is exported with
``asrkit.export.build_onnx`` and both run the same padded batch with ragged lengths drawn from
[T/2, T]. The extras give the export time, the file size and the largest difference of the
log-probs on valid frames. onnxruntime uses ``--threads`` intra-op threads.
"""

from __future__ import annotations

import os
import time

import numpy as np

from asrkit.bench import Case, median_time

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
                        help="onnxruntime intra-op threads")
    parser.add_argument("--seed", type=int, default=0)


def run(args) -> list:
    """One case: the forward pass of the batch, asrkit vs onnxruntime."""
    import onnx  # noqa: F401  (imported before the export is timed)
    import onnxruntime as ort

    from asrkit.export import build_onnx
    from asrkit.models import Model

    net = {"stack_frames": 3, "subsample_frames": 3, "seed": args.seed,
           "layers": [{"type": "blstm", "hidden": args.hidden, "num_layers": args.layers,
                       "proj": args.proj}]}
    tokens = ["<blk>"] + [f"t{i}" for i in range(1, args.tokens)]
    model = Model(net, args.input, tokens, blank=0)
    t0 = time.perf_counter()
    proto = build_onnx(model)
    export_s = time.perf_counter() - t0
    data = proto.SerializeToString()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])

    rng = np.random.default_rng(args.seed)
    T, B = args.frames, args.batch
    lengths = rng.integers(T // 2, T + 1, B).astype(np.int32)
    lengths[0] = T
    feats = rng.standard_normal((T, B, args.input)).astype(np.float32)
    feed = {"feats": feats, "lengths": lengths}

    ref, ref_len = model(feats, lengths)
    got, got_len = sess.run(None, feed)
    valid = np.arange(ref.shape[0])[:, None] < ref_len[None, :]
    diff = float(np.abs(ref - got)[valid].max())
    asrkit_s = median_time(lambda: model(feats, lengths), repeat=args.repeat)
    ort_s = median_time(lambda: sess.run(None, feed), repeat=args.repeat)
    name = f"T={T} B={B} {args.layers}x{'blstmp' if args.proj else 'blstm'}{args.hidden}"
    return [Case(name, asrkit_s, "onnxruntime", ort_s,
                 {"export_s": round(export_s, 3), "onnx_bytes": len(data),
                  "max_abs_diff": diff, "lengths_equal": bool(np.all(ref_len == got_len))})]
