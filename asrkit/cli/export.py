"""Export an acoustic model as ONNX for deployment (onnxruntime, TensorRT, ...).

The ONNX graph takes ``feats`` float32 [T, B, D] and ``lengths`` [B] and returns ``log_probs``
float32 [T', B, C] and ``out_lengths`` int32 [B] (time and batch are dynamic). The tokens, blank
id, frame shift, feature config and CMVN settings go into the model's metadata_props.
``--verify`` runs the file with onnxruntime on a random ragged batch and compares it with
asrkit's own outputs.

``--int8`` also writes ``NAME.int8.onnx`` beside it: onnxruntime's dynamic quantization (int8
weights for every MatMul and LSTM, activations quantized at run time; about 4x smaller).
``--test DATA_DIR`` (a Kaldi data dir with wav.scp and text; needs --model-dir with a graph)
transcribes the test set with asrkit, the fp32 export and the int8 export through the same
features and search, and prints each one's WER, network time and size, so the cost of int8
is measured, not assumed.

A transducer model writes sherpa-onnx's split instead: ``--onnx`` names a folder that gets
encoder.onnx, decoder.onnx, joiner.onnx and tokens.txt (``asrkit.export.transducer``);
``--verify`` compares each with asrkit and greedy search over the three files with asrkit's;
``--int8`` writes encoder.int8.onnx, ... beside them; ``--test`` decodes the test set with the
three files (fp32, and int8) through asrkit's features and the folder's own search (greedy or
modified beam search, with its word bonus and LM), each network's time being the three sessions'.

Examples:
  asrkit export --model-dir recipes/digits/exp/final --onnx digits.onnx --verify
  asrkit export --model exp/rnnt/final.mdl --features conf/fbank.toml --onnx exp/rnnt/onnx
  asrkit export --model-dir exp/final --onnx am.onnx --int8 --test data/test
  asrkit export --model-dir exp/rnnt/final --onnx exp/rnnt/onnx --int8 --test data/test
  asrkit export --model exp/blstm/final.mdl --features conf/fbank.toml --onnx am.onnx
"""

from __future__ import annotations

import json
import os

COMMAND = "export"
HELP = "export an acoustic model as ONNX"


def add_arguments(parser) -> None:
    """Options: --model-dir | --model (+ --features), --onnx, --opset, --lengths-dtype,
    --verify, --int8, --per-channel, --test, --max-utts, --json."""
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
    parser.add_argument("--int8", action="store_true",
                        help="also write NAME.int8.onnx (onnxruntime dynamic quantization)")
    parser.add_argument("--per-channel", action="store_true",
                        help="with --int8: one weight scale per output channel")
    parser.add_argument("--test", metavar="DATA_DIR", default=None,
                        help="WER of asrkit, the fp32 and the int8 export on this data dir "
                             "(wav.scp + text; needs --model-dir)")
    parser.add_argument("--max-utts", type=int, default=None,
                        help="with --test: use at most this many utterances")
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
    keys = ("cmvn", "norm_vars", "sample_rate") + {
        "sliding": ("cmn_window", "min_cmn_window", "cmn_center"),
        "global": ("global_stats",)}.get(manifest["cmvn"], ())
    extra = {k: manifest[k] for k in keys}
    if manifest.get("vtln_warps"):  # a runtime averages the network over these warps
        extra["vtln_warps"] = list(manifest["vtln_warps"])
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


def _need_onnxruntime(option: str) -> None:
    """CommandError unless onnxruntime imports (``option`` runs the export with it)."""
    from asrkit.cli.main import CommandError

    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        raise CommandError(f"{option} needs onnxruntime: pip install onnxruntime") from None


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


def _test_set(args, networks: dict, sizes: dict[str, int]) -> dict:
    """``asrkit.recognizer.score_exports`` of the networks on --test (CommandError for a
    folder or data dir at fault), with each network's size in bytes added."""
    from asrkit.cli.main import CommandError
    from asrkit.recognizer import RecognizerError, score_exports

    try:
        t = score_exports(args.model_dir, args.test, networks, args.max_utts)
    except (RecognizerError, OSError, ValueError) as e:
        raise CommandError(str(e)) from e
    for name, size in sizes.items():
        t["models"][name]["bytes"] = size
    return t


def _print_test(t: dict) -> None:
    print(f"test set {t['data_dir']}: {t['utterances']} utterances, {t['audio_seconds']} s of "
          f"audio" + (f" ({t['unreadable']} unreadable, left out)" if t["unreadable"] else ""))
    print("  search: " + ", ".join(f"{k} {v}" for k, v in t["search"].items()))
    for name, row in t["models"].items():
        extra = ""
        if "network_seconds" in row:
            extra = (f"; network {row['network_seconds']:.2f} s (RTF {row['network_rtf']:.4f})"
                     f", {row['bytes']} bytes, same text as asrkit on "
                     f"{row['same_text_as_asrkit']}/{t['utterances']}")
        print(f"  {name:6s} WER {row['wer']:6.2f}%  total {row['seconds']:.2f} s{extra}")
    rows = t["models"]
    if "int8" in rows and "fp32" in rows:
        speed = rows["int8"]["network_seconds"] / max(rows["fp32"]["network_seconds"], 1e-9)
        print(f"  int8 vs fp32: WER {rows['int8']['wer'] - rows['fp32']['wer']:+.2f} points, "
              f"size x{rows['int8']['bytes'] / rows['fp32']['bytes']:.2f}, network time "
              f"x{speed:.2f}")


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
    if args.test and not args.model_dir:
        raise CommandError("--test needs --model-dir (its features, graph and search)")
    if args.test and not os.path.isdir(args.test):
        raise CommandError(f"{args.test}: no such data directory")
    if args.max_utts is not None and args.max_utts < 1:
        raise CommandError(f"--max-utts must be >= 1, got {args.max_utts}")
    if args.per_channel and not args.int8:
        raise CommandError("--per-channel goes with --int8")
    try:
        model, fconf, frame_shift, extra = _load(args)
    except (OSError, ValueError, KeyError) as e:
        raise CommandError(f"{e}") from e
    if hasattr(model, "transducer"):
        return _run_transducer(args, model, fconf, frame_shift, extra)
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
        _need_onnxruntime("--verify")
        summary["verify"] = _verify(model, args.onnx, args.tolerance)
        status = 0 if summary["verify"]["ok"] else 1
    exports, sizes = {"fp32": args.onnx}, {"fp32": summary["bytes"]}
    if args.int8:
        from asrkit.export import int8_path, quantize_int8

        path = int8_path(args.onnx)
        try:
            q = quantize_int8(args.onnx, path, per_channel=args.per_channel)
            diff = _verify(model, path, float("inf"))["max_abs_diff"]
        except ExportError as e:
            raise CommandError(str(e)) from e
        except OSError as e:
            raise CommandError(f"{path}: {e.strerror or e}") from e
        summary["int8"] = {"onnx": path, "bytes": q["int8_bytes"],
                           "quantized_ops": q["quantized_ops"], "max_abs_diff": diff}
        exports["int8"], sizes["int8"] = path, q["int8_bytes"]
    if args.test:
        from asrkit.export import OnnxModel

        _need_onnxruntime("--test")
        summary["test"] = _test_set(args, {k: OnnxModel(p) for k, p in exports.items()}, sizes)
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
        if args.int8:
            q = summary["int8"]
            ops = ", ".join(f"{n} {op}" for op, n in sorted(q["quantized_ops"].items()))
            print(f"wrote {q['onnx']} ({q['bytes']} bytes, x{q['bytes'] / summary['bytes']:.2f}"
                  f"; quantized: {ops or 'nothing'}); max |log_probs diff| from asrkit on a "
                  f"random batch {q['max_abs_diff']:.3g}")
        if args.test:
            _print_test(summary["test"])
    return status


def _run_transducer(args, model, fconf, frame_shift, extra) -> int:
    """``asrkit export`` of a transducer: the folder of three files (see the module docstring);
    with --verify, exit 1 if onnxruntime disagrees with asrkit."""
    import numpy as np

    from asrkit.cli.main import CommandError
    from asrkit.export import ExportError, compare_transducer, transducer_to_onnx

    src = args.model_dir or args.model
    if args.onnx.endswith(".onnx"):
        raise CommandError(f"--onnx {args.onnx}: a transducer exports a folder (encoder.onnx, "
                           "decoder.onnx, joiner.onnx, tokens.txt): name a folder, e.g. "
                           "exp/onnx")
    try:
        paths = transducer_to_onnx(model, args.onnx, feature_config=fconf,
                                   frame_shift=frame_shift, opset=args.opset,
                                   extra_metadata=extra)
    except ExportError as e:
        raise CommandError(f"{src}: {e}") from e
    except OSError as e:
        raise CommandError(f"{args.onnx}: {e.strerror or e}") from e
    summary = {"onnx": args.onnx, "opset": args.opset, "files": paths,
               "bytes": {k: os.path.getsize(p) for k, p in paths.items()},
               "input_dim": model.input_dim, "vocab_size": model.num_classes}
    status = 0
    if args.verify:
        _need_onnxruntime("--verify")
        rng = np.random.default_rng(0)
        lengths = np.array([37, 23, 9], np.int32)
        feats = rng.standard_normal((37, 3, model.input_dim)).astype(np.float32)
        v = compare_transducer(model, args.onnx, feats, lengths)
        v["tolerance"] = args.tolerance
        v["ok"] = (v["lengths_equal"] and v["greedy_equal"] == v["utterances"] and max(
            v[f"{k}_max_abs_diff"] for k in ("encoder", "decoder", "joiner")) <= args.tolerance)
        summary["verify"] = v
        status = 0 if v["ok"] else 1
    if args.int8:
        from asrkit.export import int8_path, quantize_int8

        summary["int8"] = {}
        for part in ("encoder", "decoder", "joiner"):
            path = int8_path(paths[part])
            try:
                q = quantize_int8(paths[part], path, per_channel=args.per_channel)
            except ExportError as e:
                raise CommandError(str(e)) from e
            except OSError as e:
                raise CommandError(f"{path}: {e.strerror or e}") from e
            summary["int8"][part] = {"onnx": path, "bytes": q["int8_bytes"]}
    if args.test:
        from asrkit.export import OnnxTransducer

        _need_onnxruntime("--test")
        parts = ("encoder", "decoder", "joiner")
        nets = {"fp32": OnnxTransducer(args.onnx)}
        sizes = {"fp32": sum(summary["bytes"][p] for p in parts)}
        if args.int8:
            nets["int8"] = OnnxTransducer(args.onnx, int8=True)
            sizes["int8"] = sum(summary["int8"][p]["bytes"] for p in parts)
        summary["test"] = _test_set(args, nets, sizes)
    if args.json:
        print(json.dumps(summary))
        return status
    sizes = ", ".join(f"{os.path.basename(p)} {summary['bytes'][k]} bytes"
                      for k, p in paths.items())
    print(f"wrote {args.onnx}: {sizes} (opset {args.opset}, transducer, "
          f"{model.num_classes} tokens)")
    if args.verify:
        v = summary["verify"]
        print(f"verify: max |diff| encoder {v['encoder_max_abs_diff']:.3g}, decoder "
              f"{v['decoder_max_abs_diff']:.3g}, joiner {v['joiner_max_abs_diff']:.3g} "
              f"(tolerance {args.tolerance:g}); greedy search equal on {v['greedy_equal']}/"
              f"{v['utterances']}: {'OK' if v['ok'] else 'MISMATCH'}")
    for q in summary.get("int8", {}).values():
        print(f"wrote {q['onnx']} ({q['bytes']} bytes)")
    if args.test:
        _print_test(summary["test"])
    return status
