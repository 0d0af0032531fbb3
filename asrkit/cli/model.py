"""Inspect acoustic model files and prepare their token inventories.

  asrkit model info exp/blstm/final.mdl [--json]     network, tokens, parameter shapes
  asrkit model tokens data/train tokens.txt --unit char
                                                    tokens.txt from a data dir's transcripts
  asrkit model torch-state exp/blstm/final.mdl state.npz
                                                    weights under torch module names/layouts
  asrkit model plot exp/blstm/final.mdl -o net.svg [--ops | --layers]
                                                    the op graph (+ CTC criterion) as a picture:
                                                    .svg/.png/.pdf through graphviz, or .dot
  asrkit model package --model final.mdl --features conf/fbank.toml --graph exp/graph_tg \
      --out exp/final                               same as asrkit package (model folder)
  asrkit model average exp/conformer_ctc avg.mdl --avg 5
                                                    the parameters (and batch-norm statistics)
                                                    averaged over the newest 5 checkpoints of a
                                                    training folder, as icefall's --avg
"""

from __future__ import annotations

import json
import os

from asrkit.cli.main import CommandError

COMMAND = "model"
HELP = ("inspect model files, write tokens.txt, export weights in PyTorch layout, plot, package, "
        "average checkpoints")


def add_arguments(parser) -> None:
    """Sub-actions: info, tokens, torch-state, plot, package, average."""
    from asrkit.cli import package

    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    p = sub.add_parser("info", help="describe a model file")
    p.add_argument("model")
    p.add_argument("--json", action="store_true", help="print the description as JSON")
    p = sub.add_parser("tokens", help="write tokens.txt from a data dir's text")
    p.add_argument("data_dir")
    p.add_argument("out")
    p.add_argument("--unit", default="char", choices=("char", "word", "piece"))
    p.add_argument("--blank", default="<blk>", help="blank symbol (id 0)")
    p = sub.add_parser("torch-state", help="write the weights as a torch-named .npz state dict")
    p.add_argument("model")
    p.add_argument("out")
    p = sub.add_parser("plot", help="draw the op graph (graphviz dot; SVG/PNG/PDF when "
                                    "graphviz is installed)")
    p.add_argument("model")
    p.add_argument("-o", "--out", required=True,
                   help="picture to write: .svg, .png, .pdf (rendered by graphviz) or .dot")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--layers", dest="clusters", action="store_true", default=True,
                     help="box each layer's ops together (default)")
    how.add_argument("--ops", dest="clusters", action="store_false",
                     help="every op on its own, no layer boxes")
    p.add_argument("--constants", action="store_true", help="also draw constant nodes")
    p.add_argument("--no-criterion", dest="criterion", action="store_false",
                   help="stop at the logits (default: the CTC loss on top)")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p = sub.add_parser("package", help=package.HELP)
    package.add_arguments(p)
    p = sub.add_parser("average", help="average the newest N checkpoints of a training folder "
                                       "into a model file (icefall's --avg)")
    p.add_argument("exp_dir", help="training output folder (the one holding checkpoints/)")
    p.add_argument("out", help="model file to write")
    p.add_argument("--avg", type=int, default=3, help="how many of the newest checkpoints "
                                                      "(default 3)")


def run(args) -> int:
    """Do the chosen action; exit 2 with a message on unreadable input."""
    import numpy as np

    from asrkit.io import DataDir, DataDirError
    from asrkit.models import ArchiveError, load, save, to_torch_state_dict
    from asrkit.training import make_token_table
    from asrkit.utils import atomic_open

    if args.action == "package":
        from asrkit.cli import package

        return package.run(args)
    try:
        if args.action == "average":
            _writable(args.out)
            model, paths = average_checkpoints(args.exp_dir, args.avg)
            save(args.out, model)
            print(f"wrote {args.out}: the average of {len(paths)} checkpoints "
                  f"({', '.join(os.path.basename(p) for p in paths)})")
            return 0
        if args.action == "tokens":
            table = make_token_table(DataDir.read(args.data_dir).text().values(), args.unit,
                                     args.blank)
            _writable(args.out)
            table.write(args.out)
            print(f"wrote {len(table)} tokens to {args.out}")
            return 0
        model = load(args.model)
    except OSError as e:
        raise CommandError(f"{e.filename or args.out}: {e.strerror or e}") from None
    except (ArchiveError, DataDirError, ValueError) as e:
        raise CommandError(str(e)) from None
    if args.action == "plot":
        return _plot(args, model)
    if args.action == "torch-state":
        _writable(args.out)
        try:
            with atomic_open(args.out, "wb") as f:
                np.savez(f, **to_torch_state_dict(model))
        except OSError as e:
            raise CommandError(f"{args.out}: cannot write: {e.strerror or e}") from None
        print(f"wrote {len(model.params)} weights to {args.out}")
        return 0
    info = {"network": model.network, "input_dim": model.input_dim,
            "num_classes": model.num_classes, "blank": model.blank, "tokens": model.tokens,
            "parameters": {k: list(p.shape) for k, p in model.params.items()},
            "num_parameters": int(sum(p.value.size for p in model.params.values()))}
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        print(f"{args.model}: {info['num_parameters']} parameters, input {model.input_dim} "
              f"dims, {model.num_classes} tokens (blank {model.tokens[model.blank]!r})")
        for k, shape in info["parameters"].items():
            print(f"  {k:40s} {shape}")
    return 0


def average_checkpoints(exp_dir: str, n: int):
    """``(model, paths)``: a Model whose parameters (float32) are the means over the newest
    ``n`` checkpoints of ``exp_dir/checkpoints`` (by step), each read and checked in full, as
    icefall's ``average_checkpoints``; batch-norm running statistics are averaged too. Raises
    CommandError naming the folder when it holds fewer than ``n``, ArchiveError for a damaged
    checkpoint or checkpoints of different networks."""
    import glob

    import numpy as np

    from asrkit.models import ArchiveError
    from asrkit.models.model import model_from_archive
    from asrkit.training.checkpoint import NAME, checkpoint_dir, read_checkpoint

    if n < 1:
        raise CommandError(f"--avg must be >= 1, got {n}")
    folder = checkpoint_dir(exp_dir)
    found = [p for p in glob.glob(os.path.join(folder, "ckpt-*.npz"))
             if NAME.fullmatch(os.path.basename(p))]
    found.sort(key=lambda p: int(NAME.fullmatch(os.path.basename(p)).group(1)))
    if len(found) < n:
        raise CommandError(f"{folder}: {len(found)} checkpoints, --avg {n} needs {n} (raise "
                           "[train] keep_checkpoints to keep more)")
    paths = found[-n:]
    model_header, sums = None, {}
    for path in paths:
        header, arrays = read_checkpoint(path)
        if model_header is None:
            model_header = header["model"]
        elif header["model"]["network"] != model_header["network"] or \
                header["model"]["tokens"] != model_header["tokens"]:
            raise ArchiveError(f"{path}: a different network or token inventory than "
                               f"{paths[0]}: checkpoints of one run only")
        for key, value in arrays.items():
            if key.startswith("param/"):
                name = key[len("param/"):]
                sums[name] = sums.get(name, 0.0) + value.astype(np.float64)
    values = {k: (v / n).astype(np.float32) for k, v in sums.items()}
    return model_from_archive(model_header, values, paths[-1]), paths


def _writable(path: str) -> None:
    """An output path must not be a folder (checked before any work is written)."""
    if os.path.isdir(path):
        raise CommandError(f"{path}: is a directory; give a file name to write")


def model_graph_dot(model, clusters: bool = True, criterion: bool = True,
                    constants: bool = False, title: str = "") -> str:
    """Graphviz dot source of an acoustic ``model``'s op graph: features to logits, with the
    CTC loss against a ``labels`` input on top when ``criterion``; see ``asrkit.graph.to_dot``
    for ``clusters``/``constants``/``title``."""
    import numpy as np

    from asrkit import ops
    from asrkit.graph import input_variable, to_dot

    root = model.logits
    if criterion:
        labels = input_variable((), dtype=np.int32, dynamic_axes=("labels", "batch"),
                                name="labels")
        root = ops.ctc_loss(model.logits, labels, blank=model.blank)
    return to_dot(root, clusters=clusters, constants=constants, title=title)


def _plot(args, model) -> int:
    from asrkit.graph import write_picture

    source = model_graph_dot(model, args.clusters, args.criterion, args.constants,
                             title=args.model)
    try:
        path = write_picture(source, args.out)
    except (OSError, ValueError) as e:
        raise CommandError(str(e)) from e
    if args.json:
        print(json.dumps({"path": path, "rendered": not path.endswith((".dot", ".gv"))}))
    elif path != args.out:
        fmt = args.out.rsplit(".", 1)[-1]
        print(f"graphviz's dot is not installed (apt-get install graphviz): wrote {path}; "
              f"render it with: dot -T{fmt} {path} -o {args.out}")
    else:
        print(f"wrote {path}")
    return 0
