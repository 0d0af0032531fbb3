#!/usr/bin/env python3
"""Decode a Kaldi data directory with pocketsphinx and a digit-loop JSGF grammar: the peer system
the recipe compares its WER with, on the same audio.

pocketsphinx 5.1.1 (pip) ships CMU's US English continuous acoustic model (16 kHz) and CMUdict.
The grammar allows any sequence of the digit words (``oh`` included), so both systems face the
same task: no LM, a closed vocabulary. Audio of any rate is resampled to 16 kHz. Writes
``OUT/hyp.txt`` (``utt words...``), scored with ``asrkit score`` by the recipe.

Usage: pocketsphinx_decode.py DATA_DIR OUT_DIR [--words zero,oh,one,...]
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

WORDS = ["zero", "oh", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def make_decoder(words: list[str], workdir: str):
    """A pocketsphinx Decoder with the default US English model and a JSGF loop over ``words``."""
    from pocketsphinx import Decoder, get_model_path

    model = get_model_path()
    gram = os.path.join(workdir, "digits.gram")
    with open(gram, "w", encoding="utf-8") as f:
        f.write("#JSGF V1.0;\ngrammar digits;\n"
                f"public <digits> = ( {' | '.join(words)} )+ ;\n")
    return Decoder(hmm=os.path.join(model, "en-us", "en-us"),
                   dict=os.path.join(model, "en-us", "cmudict-en-us.dict"),
                   jsgf=gram, samprate=16000, loglevel="FATAL")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data_dir")
    p.add_argument("out_dir")
    p.add_argument("--words", default=",".join(WORDS))
    args = p.parse_args(argv)
    try:
        import pocketsphinx  # noqa: F401
    except ImportError:
        print("pocketsphinx_decode.py: pocketsphinx is not installed (pip install "
              "pocketsphinx==5.1.1)", file=sys.stderr)
        return 2
    from asrkit.io import DataDir
    from asrkit.utils import atomic_write_text

    os.makedirs(args.out_dir, exist_ok=True)
    dec = make_decoder(args.words.split(","), args.out_dir)
    hyps, failed = [], 0
    for utt, wave, sr in DataDir.read(args.data_dir).utterances(scale="int16", sample_rate=16000):
        try:
            pcm = np.clip(np.round(wave), -32768, 32767).astype("<i2").tobytes()
            dec.start_utt()
            dec.process_raw(pcm, full_utt=True)
            dec.end_utt()
            hyp = dec.hyp()
            hyps.append(f"{utt} {hyp.hypstr if hyp is not None else ''}".rstrip())
        except Exception as e:  # one bad utterance is reported and skipped
            print(f"{utt}: {e}", file=sys.stderr)
            failed += 1
    atomic_write_text(os.path.join(args.out_dir, "hyp.txt"), "".join(h + "\n" for h in hyps))
    print(f"pocketsphinx: decoded {len(hyps)} utterances, {failed} failed")
    return 1 if failed and not hyps else 0


if __name__ == "__main__":
    sys.exit(main())
