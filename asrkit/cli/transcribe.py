"""Transcribe audio files with a model folder (a recipe's exp/final/).

Prints `path<TAB>text` per file; `--json` prints one JSON object per file with the words, their
start times, durations and confidences. Any sample rate and format that soundfile reads (wav, flac,
ogg, ...) works: audio is resampled to the model's rate and mixed to mono. Long files are decoded
in chunks cut at quiet frames (`--max-chunk`, seconds), or with `--vad silero` only the speech
regions a voice-activity detector finds are decoded. A file that cannot be read is reported and
skipped; the exit status is 1 if any file failed. `--nj N` transcribes in N processes (output
stays in input order). The Python API is `asrkit.Recognizer`.

Examples:
  asrkit transcribe --model-dir recipes/digits/exp/final call.wav
  asrkit transcribe --model-dir exp/final --json --nj 2 *.flac
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
    parser.add_argument("--nj", type=int, default=1, help="worker processes")
    parser.add_argument("--vad", choices=["energy", "silero"], default="energy",
                        help="how long files are cut: at quiet frames (energy) or into the "
                             "speech regions of the Silero VAD (silero; pip install "
                             "'asrkit[vad]')")


def run(args) -> int:
    """Transcribe each file; exit 1 if any failed, 2 on a bad model folder or option."""
    from asrkit.cli.main import CommandError
    from asrkit.recognizer import Recognizer, RecognizerError

    try:
        rec = Recognizer.from_dir(args.model_dir, max_chunk=args.max_chunk, vad=args.vad,
                                  beam=args.beam,
                                  acoustic_scale=args.acoustic_scale,
                                  word_insertion_penalty=args.word_insertion_penalty,
                                  nbest=args.nbest)
        rec.check_can_transcribe()
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
