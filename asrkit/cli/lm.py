"""N-gram language models: train (count + smooth + optionally prune), ppl, prune.

Examples:
  asrkit lm train --order 3 --text data/lm/test.txt --output lm.arpa
  asrkit lm train --order 4 --text corpus.txt --vocab words.txt --cutoffs 0 0 1 \\
      --output lm.bin --binary
  asrkit lm ppl --lm lm.arpa --text dev.txt --json
  asrkit lm prune --lm lm.arpa --threshold 1e-8 --output small.arpa

Models are written as ARPA text (KenLM and SRILM read it) or, with --binary, as asrkit's
memory-mapped binary form; --lm accepts either (and gzipped ARPA).
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings

from asrkit.cli.main import CommandError

COMMAND = "lm"
HELP = "n-gram language models: train, ppl (perplexity), prune"

DISCOUNT_CHOICES = ("kneser-ney", "witten-bell", "absolute")


def add_arguments(parser) -> None:
    """Add the ``train``, ``ppl`` and ``prune`` actions."""
    sub = parser.add_subparsers(dest="lm_action", metavar="ACTION", required=True)

    t = sub.add_parser("train", help="estimate an n-gram model from text (one sentence a line)")
    t.add_argument("--order", type=int, default=3, help="highest n-gram order (default 3)")
    t.add_argument("--text", required=True, help="training text, one sentence per line ('-': "
                   "stdin)")
    t.add_argument("--output", required=True, help="model file to write (ARPA; .gz compresses)")
    t.add_argument("--discount", choices=DISCOUNT_CHOICES, default="kneser-ney",
                   help="smoothing (default: interpolated modified Kneser-Ney)")
    t.add_argument("--cutoffs", type=int, nargs="+", metavar="T",
                   help="per order, drop n-grams with count <= T (as lmplz --prune; first 0, "
                   "non-decreasing, the last applies to higher orders)")
    t.add_argument("--vocab", metavar="FILE", help="closed vocabulary (first field of each line); "
                   "other words become <unk>")
    t.add_argument("--vocab-size", type=int, metavar="K",
                   help="keep the K most frequent words; others become <unk>")
    t.add_argument("--prune", type=float, metavar="THRESH",
                   help="relative-entropy pruning threshold (as SRILM -prune), e.g. 1e-8")
    t.add_argument("--binary", action="store_true", help="write the binary format, not ARPA")

    p = sub.add_parser("ppl", help="perplexity of a model on text (as SRILM ngram -ppl)")
    p.add_argument("--lm", required=True, help="ARPA or binary model")
    p.add_argument("--text", required=True, help="text, one sentence per line ('-': stdin)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")

    r = sub.add_parser("prune", help="relative-entropy pruning of a model (as SRILM -prune)")
    r.add_argument("--lm", required=True, help="ARPA or binary model")
    r.add_argument("--threshold", type=float, required=True,
                   help="drop n-grams whose removal raises perplexity by less than this "
                   "relative amount")
    r.add_argument("--output", required=True, help="model file to write")
    r.add_argument("--binary", action="store_true", help="write the binary format, not ARPA")


def _os_error(path: str, e: OSError) -> CommandError:
    return CommandError(f"{e.filename or path}: {e.strerror or e}")


def _load(path: str):
    from asrkit.lm import NgramLM

    if not os.path.exists(path):
        raise CommandError(f"{path}: no such file")
    try:
        return NgramLM.load(path)
    except OSError as e:
        raise _os_error(path, e) from None
    except ValueError as e:
        raise CommandError(str(e)) from None
    except MemoryError:
        raise CommandError(f"{path}: not enough memory to load the model") from None


def _check_output(path: str) -> None:
    """Refuse an output path that is a folder, before any work; clear temporaries that killed
    writers of it left behind."""
    from asrkit.utils import remove_stale_temporaries

    if os.path.isdir(path):
        raise CommandError(f"{path}: is a directory (expected a model file name)")
    try:
        removed = remove_stale_temporaries(path)
    except OSError as e:
        raise _os_error(path, e) from None
    for tmp in removed:
        print(f"asrkit lm: removed {tmp}, left by an interrupted run", file=sys.stderr)


def _save(lm, path: str, binary: bool) -> None:
    try:
        if binary:
            lm.save_binary(path)
        else:
            lm.write_arpa(path)
    except OSError as e:
        raise CommandError(f"{path}: cannot write: {e.strerror}") from None


def _input_lines(path: str):
    """The lines of a text file (stdin for '-') read as UTF-8, one at a time; a line that is
    not UTF-8 raises TextFileError naming the file (``<stdin>``) and line."""
    from asrkit.utils.textfile import decode_lines, read_lines

    if path == "-":
        return decode_lines(sys.stdin.buffer, "<stdin>")
    if not os.path.exists(path):
        raise CommandError(f"{path}: no such file")
    return read_lines(path)


def _train(args) -> int:
    from asrkit.lm import count_ngrams, estimate, prune_entropy
    from asrkit.lm.binary import MAX_ORDER
    from asrkit.lm.prune import check_threshold

    if args.text != "-" and not os.path.isfile(args.text):
        raise CommandError(f"{args.text}: no such file" if not os.path.exists(args.text) else
                           f"{args.text}: is not a file")
    if args.vocab and not os.path.isfile(args.vocab):
        raise CommandError(f"{args.vocab}: no such file" if not os.path.exists(args.vocab) else
                           f"{args.vocab}: is not a file")
    if not 1 <= args.order <= MAX_ORDER:
        raise CommandError(f"--order must be in 1..{MAX_ORDER}, got {args.order}")
    if args.vocab_size is not None and args.vocab_size < 1:
        raise CommandError(f"--vocab-size must be at least 1, got {args.vocab_size}")
    if args.prune is not None:
        try:
            check_threshold(args.prune)
        except ValueError as e:
            raise CommandError(f"--prune: {e}") from None
    _check_output(args.output)
    t0 = time.perf_counter()
    source = _input_lines("-") if args.text == "-" else args.text
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", RuntimeWarning)
            counts = count_ngrams(source, args.order, vocab_file=args.vocab,
                                  vocab_size=args.vocab_size, name=args.text)
            lm = estimate(counts, discount=args.discount, cutoffs=args.cutoffs)
            if args.prune:
                lm = prune_entropy(lm, args.prune)
    except OSError as e:
        raise _os_error(args.text, e) from None
    except ValueError as e:
        raise CommandError(str(e)) from None
    for w in caught:
        print(f"asrkit lm train: warning: {w.message}", file=sys.stderr)
    _save(lm, args.output, args.binary)
    dt = time.perf_counter() - t0
    counts_text = " ".join(f"{n}-grams={c}" for n, c in enumerate(lm.counts, 1))
    print(f"asrkit lm train: {counts.sentences} sentences, {counts.tokens} words, vocabulary "
          f"{len(lm.vocab)}; {counts_text}; {dt:.2f}s -> {args.output}", file=sys.stderr)
    return 0


def _ppl(args) -> int:
    from asrkit.lm import evaluate

    lm = _load(args.lm)
    from asrkit.utils.textfile import TextFileError

    lines = _input_lines(args.text)
    try:
        stats = evaluate(lm, lines)
    except OSError as e:
        raise _os_error(args.text, e) from None
    except TextFileError as e:
        raise CommandError(str(e)) from None
    except ValueError as e:  # e.g. a model without </s>
        raise CommandError(f"{e} (scoring {args.text})") from None
    if args.json:
        print(json.dumps({"lm": args.lm, "text": args.text, **stats.as_dict()}, indent=2))
    else:
        print(stats.summary(args.text))
    return 0


def _prune(args) -> int:
    from asrkit.lm import prune_entropy
    from asrkit.lm.prune import check_threshold

    try:
        check_threshold(args.threshold)
    except ValueError as e:
        raise CommandError(f"--threshold: {e}") from None
    _check_output(args.output)
    lm = _load(args.lm)
    try:
        pruned = prune_entropy(lm, args.threshold)
    except ValueError as e:
        raise CommandError(f"{args.lm}: {e}") from None
    _save(pruned, args.output, args.binary)
    before = " ".join(str(c) for c in lm.counts)
    after = " ".join(str(c) for c in pruned.counts)
    print(f"asrkit lm prune: n-grams {before} -> {after} -> {args.output}", file=sys.stderr)
    return 0


def run(args) -> int:
    """Dispatch to the chosen action; returns the exit status."""
    return {"train": _train, "ppl": _ppl, "prune": _prune}[args.lm_action](args)
