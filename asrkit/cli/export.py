"""Export an acoustic model as ONNX for deployment (onnxruntime, TensorRT, ...).

The ONNX graph takes ``feats`` float32 [T, B, D] and ``lengths`` [B] and returns ``log_probs``
float32 [T', B, C] and ``out_lengths`` int32 [B] (time and batch are dynamic). The tokens, blank
id, frame shift, feature config and CMVN settings go into the model's metadata_props.
``--verify`` runs the file with onnxruntime on a random ragged batch and compares it with
asrkit's own outputs.

Examples:
  asrkit export --model-dir recipes/digits/exp/final --onnx digits.onnx --verify
  asrkit export --model exp/blstm/final.mdl --features conf/fbank.toml --onnx am.onnx
"""

from __future__ import annotations

import json
import os

COMMAND = "export"
HELP = "export an acoustic model as ONNX"


def add_arguments(parser) -> None:
    """Options: --model-dir | --model (+ --features), --onnx, --opset, --lengths-dtype,
    --verify, --json."""
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--model-dir", help="model folder from asrkit package (exp/final)")
    src.add_argument("--model", help="model file (asrkit train's final.mdl)")
    parser.add_argument("--features", default=None,
                        help="feature config TOML to embed (with --model; a model folder has one)")
    parser.add_argument("--onnx", required=True, help="ONNX file to write")
    parser.add_argument("--opset", type=int, default=17, help="ONNX opset (>= 17)")
    parser.add_argument("--lengths-dtype", choices=["int32", "int64"], default="int32",
                        help="element type of the 'lengths' input")
    parser.add_argument("--verify", action="store_true",
                        help="compare onnxruntime with asrkit on a random batch (needs "
                             "onnxruntime)")
    parser.add_argument("--tolerance", type=float, default=1e-4,
                        help="largest |difference| of log-probs --verify accepts")
    parser.add_argument("--json", action="store_true", help="print a JSON summary")


def _load_model_folder(path: str):
    """The model, feature config, frame shift and manifest settings of a model folder.

    Reads only what export needs (manifest, model, features), never the decoding graph; the
    manifest is checked and confined to the folder as ``asrkit.recognizer`` does.
    """
    from asrkit.io import load_feature_config
    from asrkit.models import load
    from asrkit.recognizer.model_folder import FILES, checked_load, inside, read_manifest

    manifest = read_manifest(path)
    where = os.path.join(path, "manifest.json")

    def file(key):
        return inside(path, manifest.get(key) or FILES[key], f"{where}: {key}")

    model = checked_load("model", file("model"), load)
    fconf = checked_load("feature config", file("features"), load_feature_config)
    keys = ("cmvn", "norm_vars", "sample_rate") + (
        ("cmn_window", "min_cmn_window", "cmn_center") if manifest["cmvn"] == "sliding" else ())
    extra = {k: manifest[k] for k in keys}
    return model, fconf, float(manifest["frame_shift"]), extra


def _load(args):
    """Return ``(model, feature_config, frame_shift, extra_metadata)`` for the arguments."""
    from asrkit.cli.main import CommandError

    if args.model_dir:
        if args.features:
            raise CommandError("--features goes with --model; a model folder has its own "
                               "features.toml")
        return _load_model_folder(args.model_dir)
    from asrkit.models import load

    model = load(args.model)
    fconf = None
    extra = {}
    if args.features:
        from asrkit.io import load_feature_config

        fconf = load_feature_config(args.features)
        extra = {"cmvn": fconf.cmvn, "sample_rate": fconf.sample_frequency}
    return model, fconf, None, extra


def _verify(model, path: str, tolerance: float) -> dict:
    """Random ragged batch through asrkit and onnxruntime; the comparison dict."""
    import numpy as np

    from asrkit.export import compare_with_model

    rng = np.random.default_rng(0)
    T = 37
    lengths = np.array([T, 23, 9, 1], np.int32)
    feats = rng.standard_normal((T, len(lengths), model.input_dim)).astype(np.float32)
    res = compare_with_model(model, path, feats, lengths)
    res["tolerance"] = tolerance
    res["ok"] = res["lengths_equal"] and res["max_abs_diff"] <= tolerance
    return res


def run(args) -> int:
    """Write the ONNX file; with --verify, exit 1 if onnxruntime disagrees with asrkit."""
    from asrkit.cli.main import CommandError

    try:
        import onnx  # noqa: F401
    except ImportError:
        raise CommandError("the 'onnx' package is needed for export: pip install onnx") from None
    from asrkit.export import ExportError, subsampling_factor, to_onnx

    src = args.model_dir or args.model
    if not (args.tolerance >= 0 and args.tolerance != float("inf")):  # NaN fails both
        raise CommandError(f"--tolerance must be a finite number >= 0, got {args.tolerance}")
    try:
        model, fconf, frame_shift, extra = _load(args)
    except (OSError, ValueError, KeyError) as e:
        raise CommandError(f"{e}") from e
    try:
        proto = to_onnx(model, args.onnx, feature_config=fconf, frame_shift=frame_shift,
                        opset=args.opset, lengths_dtype=args.lengths_dtype,
                        extra_metadata=extra)
    except ExportError as e:
        raise CommandError(f"{src}: {e}") from e
    except OSError as e:
        raise CommandError(f"{args.onnx}: {e}") from e
    meta = {p.key: p.value for p in proto.metadata_props}
    summary = {"onnx": args.onnx, "bytes": os.path.getsize(args.onnx), "opset": args.opset,
               "input_dim": model.input_dim, "num_classes": model.num_classes,
               "subsampling": subsampling_factor(model.network),
               "frame_shift": float(meta["frame_shift"])}
    status = 0
    if args.verify:
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            raise CommandError("--verify needs onnxruntime: pip install onnxruntime") from None
        summary["verify"] = _verify(model, args.onnx, args.tolerance)
        status = 0 if summary["verify"]["ok"] else 1
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"wrote {args.onnx} ({summary['bytes']} bytes, opset {args.opset}, "
              f"{model.input_dim} -> {model.num_classes} classes, subsampling "
              f"{summary['subsampling']})")
        if args.verify:
            v = summary["verify"]
            print(f"verify: max |log_probs diff| on valid frames {v['max_abs_diff']:.3g} "
                  f"(tolerance {args.tolerance:g}), lengths equal: {v['lengths_equal']}: "
                  f"{'OK' if v['ok'] else 'MISMATCH'}")
    return status
