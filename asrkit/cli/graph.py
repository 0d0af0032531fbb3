"""Build CTC decoding graphs: TLG = T o min(det(L o G)).

Examples:
  asrkit graph build --tokens data/lang/tokens.txt --lexicon data/lang/lexicon.txt \\
      --lm data/lm/3gram.arpa --out exp/graph
  asrkit graph build --tokens tokens.txt --lexicon lexicon.txt --word-loop --out graph_loop
  asrkit graph build --tokens tokens.txt --lexicon lexicon.txt --grammar commands.jsgf --out g

The folder gets TLG.npz (asrkit binary), TLG.fst.txt (OpenFst text; compile with
fstcompile --isymbols=tokens.txt --osymbols=words.txt), tokens.txt (graph input symbols:
network output index + 1, <eps> = 0), words.txt, disambig_tokens.int, disambig_words.int,
L_disambig.npz, G.npz, LG.npz and graph.json (sizes, timings, options).
"""

from __future__ import annotations

import json
import os
import time

COMMAND = "graph"
HELP = "build decoding graphs (TLG from tokens, lexicon and an LM, word loop or grammar)"


def add_arguments(parser) -> None:
    """Add the ``build`` sub-command and its options."""
    sub = parser.add_subparsers(dest="graph_command", metavar="ACTION", required=True)
    b = sub.add_parser("build", help="build TLG into a folder",
                       description="Build TLG = T o min(det(L o G)) for a CTC model.")
    b.add_argument("--tokens", required=True,
                   help="tokens.txt: 'symbol id' per line, id = network output index")
    b.add_argument("--lexicon", required=True,
                   help="lexicon.txt ('word tok1 tok2 ...') or lexiconp.txt ('word prob tok ...')")
    src = b.add_mutually_exclusive_group(required=True)
    src.add_argument("--lm", help="n-gram LM: ARPA (plain or .gz) or asrkit binary")
    src.add_argument("--word-loop", action="store_true",
                     help="uniform loop over the lexicon's words")
    src.add_argument("--word-loop-weights", metavar="FILE",
                     help="weighted word loop: 'word weight' per line")
    src.add_argument("--grammar", metavar="FILE", help="JSGF-like command grammar")
    b.add_argument("--out", required=True, help="output folder")
    b.add_argument("--blank", default=None, help="blank symbol (default <blk> or <blank>)")
    b.add_argument("--sil-token", default=None, help="optional-silence token (default: none)")
    b.add_argument("--sil-prob", type=float, default=0.5, help="optional silence probability")
    probs = b.add_mutually_exclusive_group()
    probs.add_argument("--lexiconp", dest="with_probs", action="store_const", const=True,
                       default=None, help="the lexicon has a probability column")
    probs.add_argument("--no-lexiconp", dest="with_probs", action="store_const", const=False,
                       help="the lexicon has no probability column")
    b.add_argument("--max-states", type=int, default=None,
                   help="stop if determinisation exceeds this many states")
    b.add_argument("--no-text", action="store_true",
                   help="skip TLG.fst.txt (OpenFst text), which is slow to write for big graphs")
    b.add_argument("--json", action="store_true", help="print sizes and timings as JSON")


def run(args) -> int:
    """Build the graph, write the folder, print sizes (states/arcs) and times."""
    from asrkit.cli.main import CommandError
    from asrkit.decoders.graph import GrammarError, make_graph
    from asrkit.utils.textfile import os_error_message

    t0 = time.perf_counter()
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise CommandError(f"{args.out}: exists and is not a folder (--out names the graph "
                           "folder to write)")
    for path in (args.tokens, args.lexicon, args.lm, args.word_loop_weights, args.grammar):
        if path is not None and not os.path.exists(path):
            raise CommandError(f"{path}: no such file")
    try:
        graph = make_graph(args.tokens, args.lexicon, lm=args.lm,
                           word_loop=args.word_loop_weights or args.word_loop or None,
                           grammar_path=args.grammar, blank=args.blank,
                           sil_token=args.sil_token, sil_prob=args.sil_prob,
                           with_probs=args.with_probs, max_states=args.max_states)
    except KeyError as e:
        raise CommandError(str(e.args[0]) if e.args else repr(e)) from None
    except OSError as e:
        raise CommandError(os_error_message(e.filename or "", e)) from None
    except (ValueError, GrammarError) as e:
        raise CommandError(str(e)) from None
    t_build = time.perf_counter() - t0
    try:
        graph.write(args.out, text=not args.no_text)
    except OSError as e:
        raise CommandError(f"cannot write the graph: {os_error_message(args.out, e)}") from None
    total = time.perf_counter() - t0
    sizes = graph.sizes()
    if args.json:
        print(json.dumps({"out": args.out, "sizes": sizes, "timings_s": graph.timings,
                          "build_s": t_build, "total_s": total}, indent=2))
        return 0
    for name, s in sizes.items():
        print(f"{name:4s} {s['states']:10d} states {s['arcs']:12d} arcs")
    steps = ", ".join(f"{k} {v:.2f}s" for k, v in graph.timings.items())
    print(f"built in {t_build:.2f}s ({steps}); written to {args.out} in {total - t_build:.2f}s")
    return 0
