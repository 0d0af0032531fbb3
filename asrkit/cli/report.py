"""Write an experiment's HTML run report: curves, WER tables, worst utterances, network, commands.

Reads from EXP_DIR what `asrkit train` and `asrkit decode` leave there: train_log.jsonl,
config.json (or any *.toml), final.mdl (the op graph with one box per layer, as `asrkit model
plot` draws it, and the parameter count), and every decode_*/ folder with hyp.txt scored
against its reference (--ref, or the text file named in decode_*/ref_text, or the data dir's
text recorded by the recipe); plus the recipe's commands.txt when given.

Example:
  asrkit report exp/blstm --title "digits: BLSTM-CTC" --ref data/test/text \
      --commands exp/commands.txt --config conf/train.toml --out exp/blstm/report.html
"""

from __future__ import annotations

import glob
import json
import os

COMMAND = "report"
HELP = "write an experiment's HTML report (curves, WER, worst utterances, network, commands)"


def add_arguments(parser) -> None:
    """Options: EXP_DIR, --title, --ref, --commands, --config, --worst, --out."""
    parser.add_argument("exp_dir", metavar="EXP_DIR", help="experiment folder")
    parser.add_argument("--title", default=None, help="page title (default: EXP_DIR)")
    parser.add_argument("--ref", default=None, help="reference text for the decode_* folders")
    parser.add_argument("--commands", default=None, help="file with the commands that were run")
    parser.add_argument("--config", action="append", default=[],
                        help="config file to include (repeatable)")
    parser.add_argument("--worst", type=int, default=10, help="worst utterances shown per set")
    parser.add_argument("--out", default=None, help="output (default: EXP_DIR/report.html)")


def run(args) -> int:
    """Gather what the experiment folder holds and write the report."""
    from asrkit.cli.main import CommandError
    from asrkit.decoders.scoring import read_text_table, score_texts
    from asrkit.report import write_report

    exp = args.exp_dir
    if not os.path.isdir(exp):
        raise CommandError(f"{exp}: no such folder")
    log = []
    log_path = os.path.join(exp, "train_log.jsonl")
    if os.path.exists(log_path):
        with open(log_path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if line.strip():
                    try:
                        log.append(json.loads(line))
                    except json.JSONDecodeError as e:
                        raise CommandError(f"{log_path}:{lineno}: {e}") from e
    scores = {}
    for dec in sorted(glob.glob(os.path.join(exp, "decode_*"))):
        hyp = os.path.join(dec, "hyp.txt")
        ref = args.ref
        if ref is None and os.path.exists(os.path.join(dec, "ref_text")):
            with open(os.path.join(dec, "ref_text"), encoding="utf-8") as f:
                ref = f.read().strip()
        if os.path.exists(hyp) and ref and os.path.exists(ref):
            hyps = read_text_table(hyp)
            refs = read_text_table(ref)
            scores[os.path.basename(dec)] = score_texts(refs, hyps)
    summary, dot = {}, None
    model_path = os.path.join(exp, "final.mdl")
    if os.path.exists(model_path):
        from asrkit.models import load

        model = load(model_path)
        summary["parameters"] = f"{sum(v.size for v in model.state_dict().values()):,}"
        summary["tokens"] = model.num_classes
        from asrkit.cli.model import model_graph_dot

        dot = model_graph_dot(model)
    if log:
        steps = [r for r in log if r.get("kind") == "train"]
        if steps:
            summary["training steps"] = steps[-1].get("step")
    configs = {}
    for path in args.config + sorted(glob.glob(os.path.join(exp, "config.json"))):
        with open(path, encoding="utf-8") as f:
            configs[os.path.basename(path)] = f.read()
    commands = None
    if args.commands and os.path.exists(args.commands):
        with open(args.commands, encoding="utf-8") as f:
            commands = [line.rstrip("\n") for line in f]
    out = args.out or os.path.join(exp, "report.html")
    write_report(out, args.title or exp, train_log=log, scores=scores, worst=args.worst,
                 commands=commands, configs=configs, network_dot=dot, summary=summary)
    print(f"wrote {out}")
    return 0
