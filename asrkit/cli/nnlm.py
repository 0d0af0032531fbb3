"""Neural (LSTM) language models: train, ppl (perplexity), rescore (n-best lists).

Examples:
  asrkit nnlm train --text train.txt --valid dev.txt --output lm.npz \\
      --embed 128 --hidden 256 --layers 1 --epochs 10 --checkpoint state.npz --resume
  asrkit nnlm ppl --lm lm.npz --text test.txt --json
  asrkit nnlm rescore --nbest nbest.txt --lm lm.npz --ngram-lm lm.arpa --nn-weight 0.5 \\
      --lm-weight 10 --output rescored.txt --best-text text

Text files hold one sentence per line. The model file (.npz) holds the config, the vocabulary
and the parameters. N-best files have one hypothesis per line:
  utt1-1 <acoustic cost> <graph/LM cost> word word ...
(costs are -ln p, as Kaldi's lattice-to-nbest | nbest-to-linear give them); the output is the
same format, reranked by acoustic_scale * ac + lm_weight * new LM cost, with the new LM cost.
"""

from __future__ import annotations

import json
import os
import sys
import time

from asrkit.cli.main import CommandError

COMMAND = "nnlm"
HELP = "neural (LSTM) language models: train, ppl, rescore n-best lists"


def add_arguments(parser) -> None:
    """Add the ``train``, ``ppl`` and ``rescore`` actions."""
    sub = parser.add_subparsers(dest="nnlm_action", metavar="ACTION", required=True)

    t = sub.add_parser("train", help="train an LSTM LM on text (one sentence a line)")
    t.add_argument("--text", required=True, help="training text")
    t.add_argument("--valid", help="validation text for the per-epoch CV perplexity (default: "
                   "hold out --valid-fraction of the training text)")
    t.add_argument("--output", required=True, help="model file to write (best epoch; .npz)")
    t.add_argument("--vocab", metavar="FILE", help="closed vocabulary (first field of each "
                   "line); other words become <unk>")
    t.add_argument("--vocab-size", type=int, metavar="K",
                   help="keep the K most frequent words; others become <unk>")
    t.add_argument("--embed", type=int, default=128, help="embedding size (default 128)")
    t.add_argument("--hidden", type=int, default=256, help="LSTM cell size (default 256)")
    t.add_argument("--layers", type=int, default=1, help="stacked LSTM layers (default 1)")
    t.add_argument("--tie", action="store_true", help="tie input and output embeddings (an "
                   "LSTM projection to --embed is added when --embed != --hidden)")
    t.add_argument("--dropout", type=float, default=0.0, help="dropout rate (default 0)")
    t.add_argument("--epochs", type=int, default=10, help="most epochs (default 10)")
    t.add_argument("--batch-size", type=int, default=32, help="sentences per minibatch")
    t.add_argument("--max-tokens", type=int, default=0,
                   help="cap padded tokens per minibatch (default 0: no cap)")
    t.add_argument("--optimizer", choices=("adam", "sgd"), default="adam")
    t.add_argument("--lr", type=float, help="initial learning rate (default 1e-3 Adam, 1.0 SGD)")
    t.add_argument("--momentum", type=float, default=0.0, help="SGD momentum")
    t.add_argument("--clip-norm", type=float, default=5.0,
                   help="global gradient norm limit (0: off; default 5)")
    t.add_argument("--weight-decay", type=float, default=0.0)
    t.add_argument("--lr-decay", type=float, default=0.5,
                   help="newbob factor once CV stops improving (default 0.5)")
    t.add_argument("--start-halving", type=float, default=0.01,
                   help="newbob: start decaying below this relative CV gain (default 0.01)")
    t.add_argument("--stop-threshold", type=float, default=0.001,
                   help="newbob: stop below this relative CV gain while decaying")
    t.add_argument("--valid-fraction", type=float, default=0.05)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where the graph engine trains (default cpu)")
    t.add_argument("--checkpoint", metavar="FILE",
                   help="training state written after every epoch (model + optimizer + "
                   "schedule + RNG), to continue an interrupted run with --resume")
    t.add_argument("--resume", action="store_true",
                   help="continue from --checkpoint when it exists (same text and options; "
                   "--epochs may be raised); the result equals an uninterrupted run's")
    t.add_argument("--json", action="store_true", help="print the training history as JSON")

    p = sub.add_parser("ppl", help="perplexity of a model on text (SRILM conventions)")
    p.add_argument("--lm", required=True, help="LSTM LM model file")
    p.add_argument("--text", required=True, help="text, one sentence per line ('-': stdin)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")

    r = sub.add_parser("rescore", help="rescore and rerank n-best lists")
    r.add_argument("--nbest", required=True, help="n-best file: 'utt-N ac_cost lm_cost words'")
    r.add_argument("--lm", required=True, help="new LM: LSTM LM file (or an ARPA/binary n-gram)")
    r.add_argument("--ngram-lm", metavar="FILE",
                   help="old n-gram LM (ARPA or binary) whose scores replace the n-best's lm_cost")
    r.add_argument("--interpolation", choices=("loglinear", "linear"), default="loglinear",
                   help="how the new LM combines with the old (default loglinear)")
    r.add_argument("--nn-weight", type=float, default=0.5,
                   help="weight of the new LM in the interpolation (1: it alone; default 0.5)")
    r.add_argument("--lm-weight", type=float, default=1.0,
                   help="LM scale against the acoustic cost (default 1)")
    r.add_argument("--acoustic-scale", type=float, default=1.0, help="acoustic cost scale")
    r.add_argument("--output", help="reranked n-best file to write (default: stdout)")
    r.add_argument("--best-text", metavar="FILE",
                   help="also write the best hypothesis per utterance (Kaldi 'text')")
    r.add_argument("--json", action="store_true",
                   help="print the reranked lists with every cost as JSON instead")


def _require_file(path: str) -> None:
    if path != "-" and not os.path.exists(path):
        raise CommandError(f"{path}: no such file")
    if path != "-" and os.path.isdir(path):
        raise CommandError(f"{path}: is a directory, not a file")


def _load_nnlm(path: str):
    from asrkit.nnlm import LstmLM, ModelFileError

    _require_file(path)
    try:
        return LstmLM.load(path)
    except ModelFileError as e:
        raise CommandError(str(e)) from None


def _load_any_lm(path: str):
    """An LstmLM file (zip/npz), else an n-gram model."""
    _require_file(path)
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic == b"PK\x03\x04":
        return _load_nnlm(path)
    from asrkit.lm import NgramLM

    try:
        return NgramLM.load(path)
    except ValueError as e:
        raise CommandError(str(e)) from None


def _train(args) -> int:
    from asrkit.kernels import DeviceUnavailableError
    from asrkit.nnlm import LstmLM, TrainOptions, Vocabulary, read_sentences

    for path in (args.text, args.valid, args.vocab):
        if path:
            _require_file(path)
    if args.resume and not args.checkpoint:
        raise CommandError("--resume needs --checkpoint FILE")
    try:
        opts = TrainOptions(epochs=args.epochs, batch_size=args.batch_size,
                            max_tokens=args.max_tokens, optimizer=args.optimizer, lr=args.lr,
                            momentum=args.momentum, clip_norm=args.clip_norm,
                            weight_decay=args.weight_decay, lr_decay=args.lr_decay,
                            start_halving=args.start_halving,
                            stop_threshold=args.stop_threshold,
                            valid_fraction=args.valid_fraction, seed=args.seed,
                            device=args.device)
        train = read_sentences(args.text)
        if not train:
            raise CommandError(f"{args.text}: no sentences")
        valid = read_sentences(args.valid) if args.valid else None
        if args.valid and not valid:
            raise CommandError(f"{args.valid}: no sentences")
        vocab = Vocabulary.from_sentences(train, args.vocab, args.vocab_size)
        t0 = time.perf_counter()

        def log(msg):
            print(f"asrkit nnlm train: {msg}", file=sys.stderr, flush=True)

        log(f"vocabulary {len(vocab)} words (specials included)")
        lm = LstmLM.train(train, valid, vocabulary=vocab, embed_dim=args.embed,
                          hidden_dim=args.hidden, num_layers=args.layers,
                          tie_embeddings=args.tie, dropout=args.dropout, options=opts,
                          output=args.output, log=log, checkpoint=args.checkpoint,
                          resume=args.resume)
    except ValueError as e:
        raise CommandError(str(e)) from None
    except OSError as e:
        raise CommandError(f"{e.filename or args.output}: {e.strerror}") from None
    except DeviceUnavailableError as e:
        raise CommandError(str(e)) from None
    except FloatingPointError as e:
        raise CommandError(f"{args.text}: training diverged ({e}); try a smaller --lr or "
                           "--clip-norm") from None
    best = min((h for h in lm.history if h["accepted"]), key=lambda h: h["valid_ppl"],
               default=None)
    log(f"{len(lm.history)} epochs in {time.perf_counter() - t0:.1f}s; best valid ppl "
        f"{best['valid_ppl']:.3f} (epoch {best['epoch']}) -> {args.output}" if best else
        f"no epoch improved the validation perplexity -> {args.output}")
    if args.json:
        print(json.dumps({"model": args.output, "history": lm.history}, indent=2))
    return 0


def _ppl(args) -> int:
    lm = _load_nnlm(args.lm)
    if args.text == "-":
        stats = lm.evaluate(sys.stdin)
    else:
        _require_file(args.text)
        try:
            with open(args.text, encoding="utf-8") as f:
                stats = lm.evaluate(f)
        except UnicodeDecodeError as e:
            raise CommandError(f"{args.text}: not UTF-8: {e}") from None
    if args.json:
        print(json.dumps({"lm": args.lm, "text": args.text, **stats.as_dict()}, indent=2))
    else:
        print(stats.summary(args.text))
    return 0


def _rescore(args) -> int:
    from asrkit.nnlm import NbestFormatError, format_nbest, read_nbest, rescore_nbest
    from asrkit.utils import atomic_write_text

    _require_file(args.nbest)
    try:
        nbest = read_nbest(args.nbest)
    except NbestFormatError as e:
        raise CommandError(str(e)) from None
    lm = _load_any_lm(args.lm)
    ngram = _load_any_lm(args.ngram_lm) if args.ngram_lm else None
    try:
        ranked = rescore_nbest(nbest, lm, args.lm_weight, ngram, args.interpolation,
                               args.nn_weight, args.acoustic_scale)
    except ValueError as e:
        raise CommandError(str(e)) from None
    try:
        if args.best_text:
            atomic_write_text(args.best_text, "".join(
                " ".join([utt, *hyps[0].words]) + "\n" for utt, hyps in ranked.items() if hyps))
        if args.json:
            text = json.dumps({utt: [h.as_dict() for h in hyps] for utt, hyps in ranked.items()},
                              indent=2) + "\n"
        else:
            text = format_nbest(ranked)
        if args.output:
            atomic_write_text(args.output, text)
        else:
            sys.stdout.write(text)
    except OSError as e:
        raise CommandError(f"{e.filename}: cannot write: {e.strerror}") from None
    changed = sum(1 for hyps in ranked.values() if hyps and hyps[0].rank != 0)
    print(f"asrkit nnlm rescore: {len(ranked)} utterances, "
          f"{sum(len(h) for h in ranked.values())} hypotheses; best changed in {changed}",
          file=sys.stderr)
    return 0


def run(args) -> int:
    """Dispatch to the chosen action."""
    return {"train": _train, "ppl": _ppl, "rescore": _rescore}[args.nnlm_action](args)
