"""Make a self-contained model folder for asrkit transcribe / align / export.

The folder holds the model, its feature config, a decoding graph, tokens, lexicon and a
manifest (CMVN settings, frame shift, default search options), and needs nothing else to
transcribe audio. Only files inside the graph folder are copied from it: a lexicon that its
graph.json names outside the folder is refused (give it with --lexicon).

Example:
  asrkit package --model exp/blstm/final.mdl --features conf/fbank.toml --graph exp/graph_tg \
      --out exp/final
"""

from __future__ import annotations

import json

COMMAND = "package"
HELP = "bundle model, feature config, graph and lexicon into one model folder"


def add_arguments(parser) -> None:
    """Options: --model, --features, --graph, --lexicon, --cmvn, search defaults, --out."""
    parser.add_argument("--model", required=True, help="model file (asrkit train's final.mdl)")
    parser.add_argument("--features", required=True, help="feature config TOML used in training")
    parser.add_argument("--graph", default=None, help="graph folder from asrkit graph build")
    parser.add_argument("--lexicon", default=None,
                        help="lexicon.txt (default: the one the graph was built from)")
    parser.add_argument("--cmvn", choices=["speaker", "utterance", "sliding", "none"],
                        default=None,
                        help="feature normalisation (default: as the model was trained)")
    parser.add_argument("--word-insertion-penalty", type=float, default=None,
                        help="default penalty for asrkit transcribe (e.g. tuned on dev)")
    parser.add_argument("--acoustic-scale", type=float, default=None,
                        help="default acoustic scale for asrkit transcribe")
    parser.add_argument("--word-bonus", type=float, default=None,
                        help="a transducer's default word bonus (nats per word, e.g. tuned on "
                             "dev)")
    parser.add_argument("--vtln-warps", default=None, metavar="W,W,...",
                        help="VTLN warp factors (e.g. 0.84,0.92,1,1.08,1.16): asrkit transcribe "
                             "computes each recording's features under each and averages the "
                             "model's log-probabilities (default: one pass, unwarped)")
    parser.add_argument("--out", required=True, help="model folder to write")


def run(args) -> int:
    """Write the folder and print its manifest."""
    from asrkit.cli.main import CommandError
    from asrkit.recognizer import RecognizerError, package_model_folder

    decode = {k: v for k, v in (("word_insertion_penalty", args.word_insertion_penalty),
                                ("acoustic_scale", args.acoustic_scale),
                                ("word_bonus", args.word_bonus)) if v is not None}
    try:
        manifest = package_model_folder(args.out, args.model, args.features, args.graph,
                                        args.lexicon, cmvn=args.cmvn, decode=decode,
                                        vtln_warps=args.vtln_warps)
    except RecognizerError as e:
        raise CommandError(str(e)) from e
    except OSError as e:  # writing the folder
        raise CommandError(f"{args.out}: {e}") from e
    print(json.dumps(manifest, indent=2))
    return 0
