"""Transcribe audio files with a model folder (a recipe's exp/final/).

Prints `path<TAB>text` per file; `--json` prints one JSON object per file with the words, their
start times, durations and confidences. Any sample rate and format that soundfile reads (wav, flac,
ogg, ...) works: audio is resampled to the model's rate and mixed to mono. Long files are decoded
in chunks cut at quiet frames (`--max-chunk`, seconds), or with `--vad silero` only the speech
regions a voice-activity detector finds are decoded. A file that cannot be read is reported and
skipped; the exit status is 1 if any file failed. `--nj N` transcribes in N processes (output
stays in input order). The Python API is `asrkit.Recognizer`.

`--stream` decodes as audio arrives (`Recognizer.stream`): AUDIO `-` is raw mono s16le PCM on
standard input at `--rate` Hz, a file is fed in `--chunk`-second pieces (paced at real time with
`--realtime`). Each partial and final result is printed as it comes (`--json`: one object per
event: kind, segment, start, end, text, words); a segment ends at an endpoint (Kaldi's rules,
changed with `--endpoint rule2.min_trailing_silence=0.3`, off with `--no-endpoint`). A
transducer folder streams too (`--method greedy|beam`).
`--hotwords FILE` favours the phrases listed (one per line, optional `:boost` in nats per word),
with or without `--stream`. `--vtln-warps 0.84,0.92,1,1.08,1.16` (or the folder's own, from
`asrkit package --vtln-warps`) runs the model on the features under each VTLN warp factor and
averages its log-probabilities (one network pass per warp; `--vtln-warps 1`: one pass).

Examples:
  asrkit transcribe --model-dir recipes/digits/exp/final call.wav
  asrkit transcribe --model-dir exp/final --json --nj 2 *.flac
  arecord -f S16_LE -r 16000 -c 1 | asrkit transcribe --model-dir exp/final --stream -
  asrkit transcribe --model-dir exp/final --stream --realtime --hotwords hot.txt call.wav
"""

from __future__ import annotations

import json
import sys

COMMAND = "transcribe"
HELP = "transcribe audio files with a trained model folder"


def add_arguments(parser) -> None:
    """Options: --model-dir, AUDIO..., --json, search options, --max-chunk, --nj, --vad."""
    parser.add_argument("audio", nargs="+", metavar="AUDIO", help="audio files")
    parser.add_argument("--model-dir", required=True, help="model folder (exp/final)")
    parser.add_argument("--json", action="store_true",
                        help="JSON lines with word times and confidences")
    parser.add_argument("--beam", type=float, default=None,
                        help="search beam (default: the model folder's, else 16)")
    parser.add_argument("--acoustic-scale", type=float, default=None,
                        help="default: the model folder's (else 1.0)")
    parser.add_argument("--word-insertion-penalty", type=float, default=None,
                        help="default: the model folder's, e.g. tuned on dev (else 0.0)")
    parser.add_argument("--nbest", type=int, default=None,
                        help="n-best size for the word confidences (default 10)")
    parser.add_argument("--max-chunk", type=float, default=30.0,
                        help="longest chunk decoded at once, seconds (>= 1)")
    parser.add_argument("--vtln-warps", default=None, metavar="W,W,...",
                        help="average the log-probabilities of the features under these VTLN "
                             "warp factors (default: the model folder's; 1: one unwarped pass)")
    parser.add_argument("--nj", type=int, default=1, help="worker processes")
    parser.add_argument("--vad", choices=["energy", "silero"], default="energy",
                        help="how long files are cut: at quiet frames (energy) or into the "
                             "speech regions of the Silero VAD (silero; pip install "
                             "'asrkit[vad]')")
    parser.add_argument("--hotwords", metavar="FILE", default=None,
                        help="phrases to favour, one per line ('phrase :boost')")
    rnnt = parser.add_argument_group("transducer models (asrkit.recognizer.transducer)")
    rnnt.add_argument("--method", choices=["beam", "greedy"], default=None,
                      help="modified beam search (default) or greedy search")
    rnnt.add_argument("--max-symbols", type=int, default=None,
                      help="greedy: labels per frame at most (default 3)")
    rnnt.add_argument("--lm", default=None, metavar="ARPA",
                      help="n-gram LM for shallow fusion (beam search)")
    rnnt.add_argument("--lm-weight", type=float, default=None,
                      help="weight of the fused LM (default 0.3)")
    rnnt.add_argument("--word-bonus", type=float, default=None,
                      help="beam search: nats added per word, against a transducer's deletions "
                           "(default 0)")
    stream = parser.add_argument_group("streaming")
    stream.add_argument("--stream", action="store_true",
                        help="decode as the audio arrives; print partial and final results")
    stream.add_argument("--rate", type=int, default=16000,
                        help="sample rate of raw PCM on standard input (AUDIO '-'; s16le mono)")
    stream.add_argument("--realtime", action="store_true",
                        help="feed files no faster than they play")
    stream.add_argument("--chunk", type=float, default=0.1,
                        help="seconds of audio per chunk fed to the stream")
    stream.add_argument("--partial-interval", type=float, default=0.2,
                        help="seconds of audio between partial results (0: every chunk)")
    stream.add_argument("--endpoint", action="append", default=[], metavar="RULE.FIELD=VALUE",
                        help="change an endpoint rule, e.g. rule2.min_trailing_silence=0.3 "
                             "(repeatable)")
    stream.add_argument("--no-endpoint", action="store_true",
                        help="one segment per input: final results only at its end")


def _endpoint(args):
    """The ``endpoint`` stream option from ``--endpoint``/``--no-endpoint``."""
    from asrkit.cli.main import CommandError

    if args.no_endpoint:
        return False
    rules: dict = {}
    for item in args.endpoint:
        key, sep, value = item.partition("=")
        rule, dot, field = key.partition(".")
        if not sep or not dot:
            raise CommandError(f"--endpoint {item}: expected RULE.FIELD=VALUE, e.g. "
                               "rule2.min_trailing_silence=0.3")
        if value.lower() in ("true", "false"):
            number = value.lower() == "true"
        else:
            try:
                number = float(value)
            except ValueError:
                raise CommandError(f"--endpoint {item}: {value!r} is not a number") from None
        rules.setdefault(rule, {})[field] = number
    return rules or None


def _stream(rec, args) -> int:
    """``--stream``: each input through ``rec.stream()``, events printed as they come."""
    from asrkit.recognizer import RecognizerError
    from asrkit.recognizer.stream import file_chunks, pcm_chunks

    options = dict(endpoint=_endpoint(args), partial_interval=args.partial_interval)
    rec.stream(**options)  # a bad option is the command's error, not each input's
    failed = 0
    for path in args.audio:
        try:
            stream = rec.stream(**options)
            if path == "-":
                source = ((c, args.rate) for c in pcm_chunks(sys.stdin.buffer, args.rate,
                                                              args.chunk))
            else:
                source = file_chunks(path, args.chunk, args.realtime)
            for samples, rate in source:
                _print_events(path, stream.accept(samples, rate), args.json)
            _print_events(path, stream.finish(), args.json)
        except RecognizerError as e:
            print(f"asrkit transcribe: {path}: {e}" if path not in str(e) else
                  f"asrkit transcribe: {e}", file=sys.stderr)
            failed += 1
    return failed


def _print_events(path, events, as_json: bool) -> None:
    for e in events:
        if as_json:
            print(json.dumps({"path": path, **e.as_dict()}), flush=True)
        else:
            print(f"{path}\t{e.kind}\t{e.segment}\t{e.start:.2f}-{e.end:.2f}\t{e.text}",
                  flush=True)


def run(args) -> int:
    """Transcribe each file; exit 1 if any failed, 2 on a bad model folder or option."""
    from asrkit.cli.main import CommandError, check_workers
    from asrkit.recognizer import Recognizer, RecognizerError

    check_workers(args.nj, "--nj")
    if args.stream and (args.chunk is None or not 0 < args.chunk <= 60):
        raise CommandError(f"--chunk must be seconds in (0, 60], got {args.chunk}")
    if args.stream and not 1000 <= args.rate <= 1_000_000:
        raise CommandError(f"--rate must be Hz in [1000, 1000000], got {args.rate}")
    try:
        rec = Recognizer.from_dir(args.model_dir, max_chunk=args.max_chunk, vad=args.vad,
                                  beam=args.beam,
                                  acoustic_scale=args.acoustic_scale,
                                  word_insertion_penalty=args.word_insertion_penalty,
                                  nbest=args.nbest, hotwords=args.hotwords,
                                  method=args.method, max_symbols=args.max_symbols,
                                  lm=args.lm, lm_weight=args.lm_weight,
                                  word_bonus=args.word_bonus, vtln_warps=args.vtln_warps)
        rec.check_can_transcribe()
        if args.stream:
            failed = _stream(rec, args)
            if failed:
                print(f"asrkit transcribe: {failed} of {len(args.audio)} inputs failed",
                      file=sys.stderr)
            return 1 if failed else 0
        results = rec.transcribe_iter(args.audio, nj=args.nj)
        failed = 0
        for path, res in zip(args.audio, results):
            if isinstance(res, RecognizerError):
                print(f"asrkit transcribe: {res}", file=sys.stderr)
                failed += 1
            elif args.json:
                print(json.dumps({"path": path, **res.as_dict()}), flush=True)
            else:
                print(f"{path}\t{res.text}", flush=True)
    except RecognizerError as e:
        raise CommandError(str(e)) from e
    if failed:
        print(f"asrkit transcribe: {failed} of {len(args.audio)} files failed", file=sys.stderr)
    return 1 if failed else 0
