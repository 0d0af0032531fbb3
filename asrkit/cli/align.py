"""CTC forced alignment of audio to its transcript: word times as a CTM file.

Each word is turned into the model's tokens (through the model folder's lexicon, or spelled
token by token when the words are themselves tokens or strings of them), the Viterbi path through
the CTC lattice is found, and each word spans the frames of its tokens. The log-probability of
the path per frame is printed as a quality score. An utterance that cannot be aligned (unreadable
audio, empty transcript, unknown word, transcript too long) is reported and skipped; the exit
status is 1 if any failed. The Python API is `asrkit.Recognizer.align`.

Inputs: one AUDIO file with --text "the words", or --data DATA_DIR (wav.scp + text).

Examples:
  asrkit align --model-dir exp/final call.wav --text "one two three"
  asrkit align --model-dir exp/final --data data/test --out exp/align.ctm
"""

from __future__ import annotations

import os
import sys

COMMAND = "align"
HELP = "forced alignment of audio to transcripts with a CTC model (CTM out)"


def add_arguments(parser) -> None:
    """Options: --model-dir, AUDIO + --text, or --data DATA_DIR; --out CTM."""
    parser.add_argument("audio", nargs="?", metavar="AUDIO", help="one audio file")
    parser.add_argument("--text", help="the transcript of AUDIO")
    parser.add_argument("--data", metavar="DATA_DIR", help="Kaldi data dir (wav.scp + text)")
    parser.add_argument("--model-dir", required=True, help="model folder (exp/final)")
    parser.add_argument("--out", default="-", help="CTM file to write ('-': stdout)")


def _items(args, sample_rate: int):
    """(utt, audio path or float samples or the error reading them, transcript)."""
    from asrkit.io import DataDir

    if args.audio:
        yield os.path.splitext(os.path.basename(args.audio))[0], args.audio, args.text
        return
    d = DataDir.read(args.data)
    text = d.text()
    for u in d.audio(sample_rate=sample_rate, scale="float"):
        audio = u.waveform if u.error is None else ValueError(u.error)
        yield u.utt_id, audio, text.get(u.utt_id, "")


def run(args) -> int:
    """Align and write CTM lines; exit 1 if any utterance failed."""
    from asrkit.cli.main import CommandError
    from asrkit.recognizer import Recognizer, RecognizerError

    if (args.audio is None) == (args.data is None):
        raise CommandError("give either AUDIO with --text, or --data DATA_DIR")
    if args.audio and args.text is None:
        raise CommandError("AUDIO needs --text")
    try:
        rec = Recognizer.from_dir(args.model_dir)
    except RecognizerError as e:
        raise CommandError(str(e)) from e
    lines, failed, total = [], 0, 0
    try:
        for utt, audio, text in _items(args, rec.sample_rate):
            total += 1
            try:
                if isinstance(audio, Exception):
                    raise RecognizerError(str(audio))
                if isinstance(audio, str):
                    aligned = rec.align(audio, text)
                else:  # samples at the model's rate, read through wav.scp
                    aligned = rec.align(audio, text, rec.sample_rate, name=utt)
            except RecognizerError as e:  # report the utterance, keep going
                print(f"asrkit align: {e}" if utt in str(e) else f"asrkit align: {utt}: {e}",
                      file=sys.stderr)
                failed += 1
                continue
            lines += aligned.ctm_lines(utt)
    except (OSError, ValueError) as e:  # the data dir itself
        raise CommandError(str(e)) from e
    text = "".join(line + "\n" for line in lines)
    if args.out == "-":
        sys.stdout.write(text)
    else:
        from asrkit.utils import atomic_write_text

        atomic_write_text(args.out, text)
    if failed:
        print(f"asrkit align: {failed} of {total} utterances failed", file=sys.stderr)
    return 1 if failed else 0
