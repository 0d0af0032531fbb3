#!/usr/bin/env python3
"""Write a WER table (tab-separated, for ``asrkit report --table``) from scored decodes.

Each ``--system NAME=PATTERN`` says where a system's hypotheses for a test set are:
``PATTERN/hyp.txt`` with ``{set}`` replaced by the set's name (``exp/loso/decode/{set}``; a
pattern without ``{set}`` means ``PATTERN/{set}``); each ``--set NAME=DATA_DIR`` is a test set
whose ``text`` is the reference. Utterances are grouped into rows by ``--group REGEX=LABEL``
rules on the utterance id (first match wins; by default one row per set), so one set gives rows
such as "lucas, isolated" and "lucas, strings". Every row has each system's WER with its error
count, and the number of reference words; a last row sums all sets. ``--top-errors NAME``
adds a column of that system's three most frequent errors in each row ("six -> eight x82",
"+ one x7" inserted, "- two x4" deleted). Also prints the table.

Usage: wer_table.py OUT.tsv --set lucas=data/fsdd/lucas/test --system asrkit=exp/loso/{set}
           [--system pocketsphinx=exp/pocketsphinx] [--group '-iso-=isolated' ...]
           [--top-errors asrkit]
"""

from __future__ import annotations

import argparse
import os
import re
import sys

from asrkit.decoders.scoring import read_text_table, score_texts, split_report


def _pairs(values: list[str], what: str) -> list[tuple[str, str]]:
    out = []
    for v in values:
        name, sep, rest = v.partition("=")
        if not sep or not name or not rest:
            raise SystemExit(f"wer_table.py: {what} {v!r}: expected NAME=VALUE")
        out.append((name, rest))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--set", action="append", default=[], dest="sets", metavar="NAME=DATA_DIR")
    p.add_argument("--system", action="append", default=[], metavar="NAME=DIR",
                   help="DIR/<set>/hyp.txt holds the system's hypotheses for each set")
    p.add_argument("--group", action="append", default=[], metavar="REGEX=LABEL")
    p.add_argument("--group-file", default=None, metavar="FILE",
                   help="'utt label' lines (e.g. utt2spk): rows by label instead of --group")
    p.add_argument("--top-errors", default=None, metavar="NAME",
                   help="add a column of system NAME's three most frequent errors per row")
    args = p.parse_args(argv)
    sets, systems = _pairs(args.sets, "--set"), _pairs(args.system, "--system")
    if args.top_errors is not None and args.top_errors not in dict(systems):
        p.error(f"--top-errors {args.top_errors}: not one of the --system names")
    groups = [(re.compile(rx), label) for rx, label in _pairs(args.group, "--group")]
    labels_file = read_text_table(args.group_file) if args.group_file else None
    header = ["test set", "words"] + [f"{name} WER % (errors)" for name, _ in systems]
    if args.top_errors:
        header.append(f"{args.top_errors}: most frequent errors")
    rows, totals = [header], {name: [0, 0] for name, _ in systems}
    for set_name, data_dir in sets:
        refs = read_text_table(os.path.join(data_dir, "text"))
        if labels_file is not None:
            label_of = {u: labels_file.get(u, "other") for u in refs}
        else:
            label_of = {u: next((lab for rx, lab in groups if rx.search(u)), "") for u in refs}
        grouped = bool(groups) or labels_file is not None
        per_system = {}
        for name, folder in systems:
            pattern = folder if "{set}" in folder else os.path.join(folder, "{set}")
            hyp_path = os.path.join(pattern.replace("{set}", set_name), "hyp.txt")
            if not os.path.exists(hyp_path):
                print(f"wer_table.py: {hyp_path} is missing; {name} left out of {set_name}",
                      file=sys.stderr)
                continue
            rep = score_texts(refs, read_text_table(hyp_path))
            per_system[name] = split_report(rep, label_of) if grouped else {"": rep}
            totals[name][0] += rep.errors
            totals[name][1] += rep.num_ref
        labels = sorted(set(label_of.values())) if grouped else [""]
        for lab in labels:
            words = next((r[lab].num_ref for r in per_system.values() if lab in r), 0)
            row = [f"{set_name}, {lab}" if lab else set_name, str(words)]
            for name, _ in systems:
                r = per_system.get(name, {}).get(lab)
                row.append("-" if r is None else f"{r.error_rate:.2f} ({r.errors})")
            if args.top_errors:
                r = per_system.get(args.top_errors, {}).get(lab)
                row.append("-" if r is None else r.top_errors_text(3) or "none")
            rows.append(row)
    if len(sets) > 1:
        words = max((n for _, n in totals.values()), default=0)
        rows.append(["all", str(words)] + [
            f"{100.0 * e / n:.2f} ({e})" if n else "-" for e, n in totals.values()]
            + ([""] if args.top_errors else []))
    text = "".join("\t".join(r) + "\n" for r in rows)
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, args.out)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
