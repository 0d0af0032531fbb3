"""Transcribe audio files with a model folder (a recipe's exp/final/).

Prints `path<TAB>text` per file; `--json` prints one JSON object per file with the words, their
start times, durations and confidences. Any sample rate and format that soundfile reads (wav, flac,
ogg, ...) works: audio is resampled to the model's rate and mixed to mono. Long files are decoded
in chunks cut at quiet frames (`--max-chunk`, seconds). A file that cannot be read is reported and
skipped; the exit status is 1 if any file failed.

Examples:
  asrkit transcribe --model-dir recipes/digits/exp/final call.wav
  asrkit transcribe --model-dir exp/final --json *.flac
"""

from __future__ import annotations

import json
import sys

COMMAND = "transcribe"
HELP = "transcribe audio files with a trained model folder"


def add_arguments(parser) -> None:
    """Options: --model-dir, AUDIO..., --json, search options, --max-chunk."""
    parser.add_argument("audio", nargs="+", metavar="AUDIO", help="audio files")
    parser.add_argument("--model-dir", required=True, help="model folder (exp/final)")
    parser.add_argument("--json", action="store_true",
                        help="JSON lines with word times and confidences")
    parser.add_argument("--beam", type=float, default=16.0)
    parser.add_argument("--acoustic-scale", type=float, default=None,
                        help="default: the model folder's (else 1.0)")
    parser.add_argument("--word-insertion-penalty", type=float, default=None,
                        help="default: the model folder's, e.g. tuned on dev (else 0.0)")
    parser.add_argument("--nbest", type=int, default=10,
                        help="n-best size for the word confidences")
    parser.add_argument("--max-chunk", type=float, default=30.0,
                        help="longest chunk decoded at once, seconds")


def transcribe_file(md, path: str, opts, max_chunk: float) -> dict:
    """Decode one file with a loaded ``ModelDir``; returns {"path", "text", "words"}."""
    from asrkit.cli._model_dir import quiet_cuts
    from asrkit.decoders.decode import decode_utterance
    from asrkit.io import load_audio

    wave, sr = load_audio(path, sample_rate=int(md.manifest["sample_rate"]), scale="int16")
    cuts = quiet_cuts(wave, sr, max_chunk)
    feats = md.normalise([md.features(wave[a:b]) for a, b in cuts])
    words, timings = [], []
    for (a, _), f in zip(cuts, feats):
        if f.shape[0] == 0:
            continue
        res = decode_utterance(md.graph, md.log_probs(f), opts)
        for t in res.timings:
            t.start += a / sr
            timings.append(t)
        words += res.words
    return {"path": path, "text": " ".join(words), "words": [t.as_dict() for t in timings]}


def run(args) -> int:
    """Transcribe each file; exit 1 if any failed, 2 on a bad model folder."""
    from asrkit.cli._model_dir import load_model_dir
    from asrkit.cli.main import CommandError
    from asrkit.decoders.decode import DecodeOptions

    try:
        md = load_model_dir(args.model_dir)
    except (OSError, ValueError, KeyError) as e:
        raise CommandError(str(e)) from e
    defaults = md.manifest.get("decode") or {}

    def option(name, fallback):
        value = getattr(args, name)
        return float(defaults.get(name, fallback)) if value is None else value

    opts = DecodeOptions(beam=args.beam, acoustic_scale=option("acoustic_scale", 1.0),
                         word_insertion_penalty=option("word_insertion_penalty", 0.0),
                         nbest=max(args.nbest, 1), frame_shift=md.frame_shift)
    failed = 0
    for path in args.audio:
        try:
            out = transcribe_file(md, path, opts, args.max_chunk)
        except Exception as e:  # one unreadable file must not stop the others
            print(f"asrkit transcribe: {path}: {e}", file=sys.stderr)
            failed += 1
            continue
        if args.json:
            print(json.dumps(out), flush=True)
        else:
            print(f"{path}\t{out['text']}", flush=True)
    return 1 if failed else 0
