"""Score hypotheses against references: WER or CER with an sclite-style alignment report.

REF and HYP are Kaldi `text` files (`utt-id word word ...`). Prints each utterance's alignment
(REF/HYP/Eval lines), then Kaldi's `%WER ... [ errors / words, ins, del, sub ]` line, then
sclite's confusion pairs, insertions and deletions (the --confusions N most frequent of each).
With --utt2spk, each speaker's line ends with its three most frequent errors.

Examples:
  asrkit score data/test/text exp/decode/hyp.txt
  asrkit score --cer --worst 10 ref.txt hyp.txt
  asrkit score --json ref.txt hyp.txt
  asrkit score --utt2spk data/test/utt2spk --summary-only data/test/text hyp.txt
  asrkit score --confusions 0 ref.txt hyp.txt      # without the confusion pairs
"""

from __future__ import annotations

import json

COMMAND = "score"
HELP = "compute WER/CER of hypotheses against references, with per-utterance alignments"


def add_arguments(parser) -> None:
    """Arguments: REF HYP, --cer, --worst N, --confusions N, --summary-only, --json,
    --report FILE, --utt2spk FILE."""
    parser.add_argument("ref", help="reference Kaldi text file")
    parser.add_argument("hyp", help="hypothesis Kaldi text file")
    parser.add_argument("--cer", action="store_true", help="character error rate instead of WER")
    parser.add_argument("--keep-spaces", action="store_true",
                        help="with --cer, count spaces between words as characters")
    parser.add_argument("--worst", type=int, default=None,
                        help="show only the N utterances with most errors")
    parser.add_argument("--confusions", type=int, default=10, metavar="N",
                        help="list the N most frequent substitutions, insertions and deletions "
                             "after the totals (default 10; 0: none)")
    parser.add_argument("--summary-only", action="store_true", help="print only the totals")
    parser.add_argument("--report", default=None, help="also write the full report to FILE")
    parser.add_argument("--json", action="store_true", help="print totals and counts as JSON")
    parser.add_argument("--utt2spk", default=None,
                        help="also score each speaker (or any grouping: utt group per line)")


def run(args) -> int:
    """Score and print; exit 0 on success, 2 on unreadable or inconsistent input."""
    from asrkit.cli.main import CommandError
    from asrkit.decoders.scoring import read_text_table, score_texts, split_report
    from asrkit.utils import atomic_write_text

    for opt in ("worst", "confusions"):
        if getattr(args, opt) is not None and getattr(args, opt) < 0:
            raise CommandError(f"--{opt} must be at least 0, got {getattr(args, opt)}")
    try:
        ref = read_text_table(args.ref)
        hyp = read_text_table(args.hyp)
        rep = score_texts(ref, hyp, unit="char" if args.cer else "word",
                          keep_spaces=args.keep_spaces)
        groups = read_text_table(args.utt2spk) if args.utt2spk else None
    except (OSError, ValueError) as e:
        raise CommandError(str(e)) from e
    per_group = split_report(rep, groups) if groups is not None else {}
    if args.report:
        atomic_write_text(args.report, rep.report(confusions=args.confusions) + "\n")
    if args.json:
        d = rep.as_dict()
        if groups is not None:
            d["groups"] = {g: {k: v for k, v in r.as_dict().items() if k != "utterances"}
                           for g, r in per_group.items()}
        print(json.dumps(d, indent=2))
        return 0
    print(rep.summary_line() if args.summary_only
          else rep.report(worst=args.worst, confusions=args.confusions))
    for g, r in per_group.items():
        top = r.top_errors_text(3)
        print(f"{g}: {r.summary_line()}" + (f"  most frequent: {top}" if top else ""))
    return 0
