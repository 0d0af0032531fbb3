"""CTC forced alignment of audio to its transcript: word times as a CTM file.

Each word is turned into the model's tokens (through the model folder's lexicon, or spelled
token by token when the words are themselves tokens or strings of them), the Viterbi path through
the CTC lattice is found (asrkit.kernels.ctc_align), and each word spans the frames of its tokens.
The log-probability of the path per frame is printed as a quality score.

Inputs: one AUDIO file with --text "the words", or --data DATA_DIR (wav.scp + text).

Examples:
  asrkit align --model-dir exp/final call.wav --text "one two three"
  asrkit align --model-dir exp/final --data data/test --out exp/align.ctm
"""

from __future__ import annotations

import os
import sys

import numpy as np

COMMAND = "align"
HELP = "forced alignment of audio to transcripts with a CTC model (CTM out)"


def add_arguments(parser) -> None:
    """Options: --model-dir, AUDIO + --text, or --data DATA_DIR; --out CTM."""
    parser.add_argument("audio", nargs="?", metavar="AUDIO", help="one audio file")
    parser.add_argument("--text", help="the transcript of AUDIO")
    parser.add_argument("--data", metavar="DATA_DIR", help="Kaldi data dir (wav.scp + text)")
    parser.add_argument("--model-dir", required=True, help="model folder (exp/final)")
    parser.add_argument("--out", default="-", help="CTM file to write ('-': stdout)")


def word_tokens(md, word: str) -> list[int]:
    """Token ids of ``word``: lexicon first, then the word itself as a token, then its letters."""
    index = {t: i for i, t in enumerate(md.model.tokens)}
    if word in md.lexicon:
        seq = md.lexicon[word]
    elif word in index:
        seq = (word,)
    else:
        seq = tuple(word)
    missing = [t for t in seq if t not in index]
    if missing:
        raise ValueError(f"word {word!r}: no tokens for {missing} in the model")
    return [index[t] for t in seq]


def align_words(md, wave: np.ndarray, words: list[str]) -> tuple[list[tuple], float]:
    """[(word, start_s, duration_s)] and the mean log-probability per frame of the path."""
    from asrkit.kernels import ctc_align, ctc_segments

    feats = md.normalise([md.features(wave)])[0]
    logp = md.log_probs(feats)
    per_word = [word_tokens(md, w) for w in words]
    targets = np.array([[t for seq in per_word for t in seq]], np.int32)
    if targets.size == 0:
        return [], 0.0
    path, scores = ctc_align(logp[:, None, :], targets, np.array([logp.shape[0]], np.int32),
                             np.array([targets.shape[1]], np.int32), blank=md.model.blank,
                             return_scores=True)
    if not np.isfinite(scores[0]):
        raise ValueError(f"the transcript ({targets.shape[1]} tokens) does not fit the audio "
                         f"({logp.shape[0]} frames)")
    segs = ctc_segments(path[:, 0], blank=md.model.blank)
    out, k = [], 0
    for w, seq in zip(words, per_word):
        first, last = segs[k], segs[k + len(seq) - 1]
        k += len(seq)
        start = first[1] * md.frame_shift
        out.append((w, start, (last[2] - first[1]) * md.frame_shift))
    return out, float(scores[0]) / logp.shape[0]


def run(args) -> int:
    """Align and write CTM lines; exit 1 if any utterance failed."""
    from asrkit.cli._model_dir import load_model_dir
    from asrkit.cli.main import CommandError
    from asrkit.io import DataDir, load_audio

    if (args.audio is None) == (args.data is None):
        raise CommandError("give either AUDIO with --text, or --data DATA_DIR")
    if args.audio and args.text is None:
        raise CommandError("AUDIO needs --text")
    md = load_model_dir(args.model_dir, need_graph=False)
    sr = int(md.manifest["sample_rate"])

    def items():
        """(utt, waveform or the error reading it, words)"""
        if args.audio:
            utt = os.path.splitext(os.path.basename(args.audio))[0]
            try:
                yield utt, load_audio(args.audio, sample_rate=sr, scale="int16")[0], \
                    args.text.split()
            except Exception as e:
                yield utt, e, []
            return
        d = DataDir.read(args.data)
        text = d.text()
        for u in d.audio(sample_rate=sr, scale="int16"):
            yield u.utt_id, u.waveform if u.error is None else ValueError(u.error), \
                text.get(u.utt_id, "").split()

    lines, failed = [], 0
    for utt, wave, words in items():
        try:
            if isinstance(wave, Exception):
                raise wave
            aligned, score = align_words(md, wave, words)
        except Exception as e:  # report the utterance, keep going
            print(f"asrkit align: {utt}: {e}", file=sys.stderr)
            failed += 1
            continue
        lines += [f"{utt} 1 {s:.3f} {d:.3f} {w} {score:.4f}" for w, s, d in aligned]
    text = "".join(line + "\n" for line in lines)
    if args.out == "-":
        sys.stdout.write(text)
    else:
        from asrkit.utils import atomic_write_text

        atomic_write_text(args.out, text)
    return 1 if failed else 0
