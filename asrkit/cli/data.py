"""Check, repair, subset and combine Kaldi data directories (Kaldi's
utils/validate_data_dir.sh, utils/fix_data_dir.sh, utils/subset_data_dir.sh,
utils/split_data.sh and utils/combine_data.sh).

    asrkit data validate data/train [--no-text] [--no-wav] [--no-feats] [--json]
    asrkit data fix data/train
    asrkit data subset data/train --first 100 data/train_100
    asrkit data subset data/train --utt-list keep.txt data/train_keep
    asrkit data split data/train 4          # data/train/split4/{1..4}, by speaker
    asrkit data combine data/train_all data/train_a data/train_b ...

validate exits 1 when it finds errors and prints each as FILE:LINE: message.
"""

from __future__ import annotations

import json
import os
import sys

from asrkit.cli.main import CommandError

COMMAND = "data"
HELP = "validate, fix, subset, split or combine Kaldi data directories"


def add_arguments(parser) -> None:
    """Add the ``validate``, ``fix``, ``subset``, ``split`` and ``combine`` subcommands."""
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    p = sub.add_parser("validate", help="check a data directory (validate_data_dir.sh)")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--no-text", action="store_true", help="do not require or check text")
    p.add_argument("--no-wav", action="store_true", help="do not require or check wav.scp")
    p.add_argument("--no-feats", action="store_true", help="do not check feats.scp")
    p.add_argument("--json", action="store_true", help="print the problems as JSON")

    p = sub.add_parser("fix", help="sort, drop inconsistent utterances (fix_data_dir.sh)")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--no-backup", action="store_true", help="do not keep DIR/.backup")
    p.add_argument("--json", action="store_true", help="print what was dropped as JSON")

    p = sub.add_parser("subset", help="copy part of a data directory (subset_data_dir.sh)")
    p.add_argument("src", metavar="SRC")
    p.add_argument("dest", metavar="DEST")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--num", type=int, metavar="N",
                     help="N utterances spread evenly over SRC (Kaldi's default)")
    how.add_argument("--first", type=int, metavar="N", help="the first N utterances")
    how.add_argument("--last", type=int, metavar="N", help="the last N utterances")
    how.add_argument("--shortest", type=int, metavar="N",
                     help="the N shortest utterances (by utt2num_frames or utt2dur)")
    how.add_argument("--random", type=int, metavar="N", help="N utterances drawn at random")
    how.add_argument("--speakers", type=int, metavar="N",
                     help="whole speakers, spread evenly, until about N utterances")
    how.add_argument("--per-spk", type=int, metavar="N", help="the first N utterances of each "
                                                              "speaker")
    how.add_argument("--utt-list", metavar="FILE", help="utterances listed in FILE (first field)")
    how.add_argument("--spk-list", metavar="FILE", help="speakers listed in FILE (first field)")
    p.add_argument("--seed", type=int, default=0, help="seed of --random (default 0)")

    p = sub.add_parser("split", help="split into N parts DIR/splitN/1..N (split_data.sh)")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("num_parts", type=int, metavar="N")
    p.add_argument("--per-utt", action="store_true",
                   help="split by utterance (default: keep each speaker in one part)")

    p = sub.add_parser("combine", help="the union of data directories (combine_data.sh)")
    p.add_argument("dest", metavar="DEST")
    p.add_argument("srcs", nargs="+", metavar="SRC")


def _read(path: str):
    from asrkit.io import DataDir, DataDirError

    try:
        return DataDir.read(path)
    except DataDirError as e:
        raise CommandError(str(e)) from None


def _read_list(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return [line.split()[0] for line in f if line.strip()]
    except OSError as e:
        raise CommandError(f"{path}: {e.strerror}") from None


def _validate(args) -> int:
    from asrkit.io import validate_data_dir

    problems = validate_data_dir(args.dir, no_text=args.no_text, no_wav=args.no_wav,
                                 no_feats=args.no_feats)
    errors = [p for p in problems if p.severity == "error"]
    if args.json:
        print(json.dumps({"dir": args.dir, "valid": not errors,
                          "problems": [{"file": p.path, "line": p.line, "message": p.message,
                                        "severity": p.severity} for p in problems]}, indent=1))
    else:
        for p in problems:
            print(p, file=sys.stderr)
        if not errors:
            print(f"{args.dir}: valid data directory"
                  + (f" ({len(problems)} warning(s))" if problems else ""))
    return 1 if errors else 0


def _fix(args) -> int:
    from asrkit.io import DataDirError, fix_data_dir

    try:
        report = fix_data_dir(args.dir, backup=not args.no_backup)
    except DataDirError as e:
        raise CommandError(str(e)) from None
    if args.json:
        print(json.dumps({"dir": args.dir, "num_utterances": report.num_utterances,
                          "num_speakers": report.num_speakers, "dropped": report.dropped,
                          "malformed": report.malformed, "backup": report.backup}, indent=1))
    else:
        print(report.summary())
    return 0


def _shortest(d, n: int) -> list[str]:
    from asrkit.io import DataDirError

    try:
        if d.has("utt2num_frames"):
            length = d.utt2num_frames()
        elif d.has("utt2dur"):
            length = d.utt2dur()
        else:
            raise CommandError(f"{d.path}: --shortest needs utt2num_frames or utt2dur")
    except DataDirError as e:
        raise CommandError(str(e)) from None
    utts = [u for u in d.utt_ids() if u in length]
    return sorted(utts, key=lambda u: (length[u], u))[:n]


def _select(d, args) -> list[str]:
    from asrkit.io.datadir import evenly_spaced

    utts = d.utt_ids()
    for opt in ("num", "first", "last", "shortest", "random", "speakers", "per_spk"):
        n = getattr(args, opt)
        if n is not None and n < 1:
            raise CommandError(f"--{opt.replace('_', '-')} must be >= 1, got {n}")
    if args.num is not None:
        return evenly_spaced(utts, args.num)
    if args.first is not None:
        return utts[:args.first]
    if args.last is not None:
        return utts[-args.last:]
    if args.shortest is not None:
        return _shortest(d, args.shortest)
    if args.random is not None:
        import numpy as np

        rng = np.random.default_rng(args.seed)
        idx = rng.choice(len(utts), size=min(args.random, len(utts)), replace=False)
        return [utts[i] for i in sorted(idx)]
    spk2utt = d.spk2utt()
    if args.speakers is not None:
        # Kaldi's subset_data_dir.sh --speakers: whole speakers, taken evenly spaced
        speakers = list(spk2utt)
        for k in range(1, len(speakers) + 1):
            chosen = evenly_spaced(speakers, k)
            if sum(len(spk2utt[s]) for s in chosen) >= args.speakers:
                break
        return sorted(u for s in chosen for u in spk2utt[s])
    if args.per_spk is not None:
        return sorted(u for us in spk2utt.values() for u in us[:args.per_spk])
    if args.utt_list is not None:
        return _read_list(args.utt_list)
    speakers = set(_read_list(args.spk_list))
    return [u for u in utts if d.utt2spk[u] in speakers]


def _subset(args) -> int:
    d = _read(args.src)
    if os.path.abspath(args.src) == os.path.abspath(args.dest):
        raise CommandError("DEST must differ from SRC")
    utts = _select(d, args)
    missing = [u for u in utts if u not in d.utt2spk]
    if missing:
        print(f"warning: {len(missing)} listed utterance(s) not in {args.src}, e.g. "
              f"{missing[0]!r}", file=sys.stderr)
    sub = d.subset(utts)
    sub.write(args.dest)
    print(f"{args.dest}: {len(sub.utt2spk)} utterances of {len(sub.speakers())} speakers "
          f"(from {len(d.utt2spk)} in {args.src})")
    return 0


def _split(args) -> int:
    from asrkit.io import split_evenly

    d = _read(args.dir)
    n = args.num_parts
    if n < 1:
        raise CommandError(f"N must be >= 1, got {n}")
    if args.per_utt:
        parts = split_evenly(d.utt_ids(), n)
    else:
        speakers = d.speakers()
        if n > len(speakers):
            raise CommandError(f"{args.dir}: cannot split {len(speakers)} speakers into {n} parts "
                               "(use --per-utt)")
        spk2utt = d.spk2utt()
        parts = [[u for s in group for u in spk2utt[s]]
                 for group in split_by_weight(speakers, [len(spk2utt[s]) for s in speakers], n)]
    folder = os.path.join(args.dir, f"split{n}{'utt' if args.per_utt else ''}")
    for j, part in enumerate(parts, 1):
        d.subset(part).write(os.path.join(folder, str(j)))
    print(f"{folder}: {n} parts of {min(map(len, parts))}-{max(map(len, parts))} utterances")
    return 0


def split_by_weight(items: list, weights: list[int], n: int) -> list[list]:
    """Cut ``items`` into ``n`` contiguous non-empty groups of about equal total weight."""
    total, groups, start, acc = sum(weights), [], 0, 0
    for k in range(n - 1):
        end = start + 1  # at least one item per group
        acc += weights[start]
        while end < len(items) - (n - k - 1) and acc + weights[end] / 2 < total * (k + 1) / n:
            acc += weights[end]
            end += 1
        groups.append(items[start:end])
        start = end
    groups.append(items[start:])
    return groups


def combine_data_dirs(dirs: list) -> tuple:
    """The union of ``DataDir``s, as Kaldi's ``utils/combine_data.sh``: ``(DataDir,
    warnings)``.

    A file present in every source is combined; one present in some only is left out (with a
    warning), except ``segments``: sources without it get whole-recording segments
    (``utt utt 0 -1``). spk2utt is rebuilt. An utterance in two sources, or a speaker or
    recording key with two different values (``cmvn.scp``, ``wav.scp``, ``spk2gender``), is a
    ``DataDirError`` naming both places.
    """
    from asrkit.io import DataDir, DataDirError

    warnings = []
    names = set().union(*(d.tables for d in dirs)) - {"spk2utt"}
    with_segments = [d for d in dirs if d.has("segments")]
    out = DataDir(None)
    for name in sorted(names, key=lambda n: (n != "utt2spk", n)):  # duplicates: utt2spk first
        having = [d for d in dirs if d.has(name)]
        if name == "segments" and with_segments:
            having = dirs
        elif len(having) < len(dirs):
            missing = [d.path for d in dirs if not d.has(name)]
            warnings.append(f"{name}: not in {', '.join(map(str, missing))}: left out")
            continue
        table: dict[str, str] = {}
        seen: dict[str, object] = {}
        for d in having:
            if name == "segments" and not d.has("segments"):
                part = {u: f"{u} 0 -1" for u in d.utt2spk}
            else:
                part = d.table(name)
            for key, value in part.items():
                if key in table and (name in ("utt2spk", "text", "segments", "utt2dur",
                                              "utt2num_frames", "feats.scp", "utt2uniq",
                                              "utt2lang", "vad.scp") or table[key] != value):
                    raise DataDirError(f"{d.where(name, key)}: key {key!r} is also in "
                                       f"{seen[key].where(name, key)}"
                                       + ("" if table[key] == value else " with another value"))
                table[key] = value
                seen[key] = d
        out.tables[name] = table
    return out, warnings


def _combine(args) -> int:
    dest = os.path.abspath(args.dest)
    if any(os.path.abspath(src) == dest for src in args.srcs):
        raise CommandError("DEST must differ from every SRC")
    from asrkit.io import DataDirError

    dirs = [_read(src) for src in args.srcs]
    try:
        combined, warnings = combine_data_dirs(dirs)
    except DataDirError as e:
        raise CommandError(str(e)) from None
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    combined.write(args.dest)
    print(f"{args.dest}: {len(combined.utt2spk)} utterances of {len(combined.speakers())} "
          f"speakers from {len(dirs)} directories")
    return 0


def run(args) -> int:
    """Dispatch to the chosen action; returns its exit status. A file of the data directory
    that cannot be parsed or written is an error naming it (file and line)."""
    from asrkit.io import DataDirError

    action = {"validate": _validate, "fix": _fix, "subset": _subset, "split": _split,
              "combine": _combine}[args.action]
    try:
        return action(args)
    except DataDirError as e:
        raise CommandError(str(e)) from None
    except UnicodeDecodeError as e:
        raise CommandError(f"{args.action}: a file is not UTF-8 text: {e}") from None
    except OSError as e:
        where = e.filename or getattr(args, "dest", None) or getattr(args, "dir", "")
        raise CommandError(f"{where}: {e.strerror or e}") from None
