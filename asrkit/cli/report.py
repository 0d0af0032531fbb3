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
import sys

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
    parser.add_argument("--table", action="append", default=[], metavar="TITLE=FILE.tsv",
                        help="a tab-separated table to show (first line: the header), e.g. WER "
                        "per speaker made by a recipe; repeatable")


# train_log.jsonl keys asrkit report reads, and the JSON types each may have
NUMBER_KEYS = ("step", "epoch", "loss", "lr", "frames_per_s", "cv_error", "bytes_per_step",
               "skipped_steps")


def read_train_log(path: str) -> list[dict]:
    """The records of a ``train_log.jsonl``; a line that is not a JSON object whose known keys
    hold numbers (``kind`` a string) raises CommandError naming ``path:line``. A last line
    without its newline (a run killed mid-write) is dropped, as ``asrkit train --resume``
    does."""
    from asrkit.cli.main import CommandError

    records = []
    from asrkit.utils.textfile import os_error_message

    try:
        with open(path, "rb") as f:
            lines = f.read().split(b"\n")
    except OSError as e:
        raise CommandError(os_error_message(path, e)) from None
    torn = lines[-1] != b""
    for lineno, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            rec = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise CommandError(f"{where}: not UTF-8 text ({e.reason} at byte {e.start} of the "
                               "line)") from None
        except (json.JSONDecodeError, RecursionError) as e:
            if torn and lineno == len(lines):  # the torn tail of a killed run
                print(f"asrkit report: warning: {where}: unfinished last line ignored",
                      file=sys.stderr)
                break
            raise CommandError(f"{where}: not a JSON record ({str(e)[:120]})") from None
        if not isinstance(rec, dict):
            raise CommandError(f"{where}: expected a JSON object, got {type(rec).__name__}")
        for key in NUMBER_KEYS:
            v = rec.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise CommandError(f"{where}: '{key}' must be a number, got {v!r}")
        if not isinstance(rec.get("kind", ""), str):
            raise CommandError(f"{where}: 'kind' must be a string, got {rec['kind']!r}")
        records.append(rec)
    return records


def _read_text(path: str) -> str:
    from asrkit.cli.main import CommandError
    from asrkit.utils.textfile import TextFileError, os_error_message, read_text

    try:
        return read_text(path)
    except TextFileError as e:
        raise CommandError(str(e)) from None
    except OSError as e:
        raise CommandError(os_error_message(path, e)) from None


def read_tables(specs: list[str]) -> dict[str, list[list[str]]]:
    """``TITLE=FILE.tsv`` options -> {title: rows}; errors name the option or file."""
    from asrkit.cli.main import CommandError

    tables = {}
    for spec in specs:
        title, sep, path = spec.partition("=")
        if not sep or not title or not path:
            raise CommandError(f"--table {spec!r}: expected TITLE=FILE.tsv")
        rows = [line.rstrip("\r").split("\t") for line in _read_text(path).splitlines()
                if line.strip()]
        if not rows:
            raise CommandError(f"{path}: empty table")
        tables[title] = rows
    return tables


def run(args) -> int:
    """Gather what the experiment folder holds and write the report."""
    from asrkit.cli.main import CommandError
    from asrkit.decoders.scoring import read_text_table, score_texts
    from asrkit.report import write_report
    from asrkit.utils.textfile import os_error_message

    exp = args.exp_dir
    if not os.path.isdir(exp):
        raise CommandError(f"{exp}: no such folder")
    if args.worst < 0:
        raise CommandError(f"--worst must be >= 0, got {args.worst}")
    tables = read_tables(args.table)
    log = []
    log_path = os.path.join(exp, "train_log.jsonl")
    if os.path.exists(log_path):
        log = read_train_log(log_path)
    scores = {}
    for dec in sorted(glob.glob(os.path.join(exp, "decode_*"))):
        hyp = os.path.join(dec, "hyp.txt")
        ref = args.ref
        if ref is None and os.path.exists(os.path.join(dec, "ref_text")):
            ref = _read_text(os.path.join(dec, "ref_text")).strip()
        if os.path.exists(hyp) and ref and os.path.exists(ref):
            texts = []
            for path in (hyp, ref):
                try:
                    texts.append(read_text_table(path))
                except UnicodeDecodeError as e:
                    raise CommandError(f"{path}: not UTF-8 text ({e.reason} at byte "
                                       f"{e.start})") from None
                except ValueError as e:
                    raise CommandError(str(e)) from None
                except OSError as e:
                    raise CommandError(os_error_message(path, e)) from None
            scores[os.path.basename(dec)] = score_texts(texts[1], texts[0])
    summary, dot = {}, None
    model_path = os.path.join(exp, "final.mdl")
    if os.path.exists(model_path):
        from asrkit.models import ArchiveError, load

        try:
            model = load(model_path)
        except ArchiveError as e:
            raise CommandError(str(e)) from None
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
        configs[os.path.basename(path)] = _read_text(path)
    commands = None
    if args.commands and os.path.exists(args.commands):
        commands = _read_text(args.commands).splitlines()
    out = args.out or os.path.join(exp, "report.html")
    if os.path.isdir(out):
        raise CommandError(f"{out}: is a directory; --out takes the file to write")
    try:
        write_report(out, args.title or exp, train_log=log, scores=scores, worst=args.worst,
                     commands=commands, configs=configs, network_dot=dot, summary=summary,
                     tables=tables)
    except OSError as e:  # the error may name the temporary file the write goes through
        raise CommandError(f"{out}: cannot write: {e.strerror or e}") from None
    print(f"wrote {out}")
    return 0
