#!/usr/bin/env python3
"""Decode a Kaldi data directory with pocketsphinx and a digit-loop JSGF grammar: the peer system
the recipe compares its WER with, on the same audio.

pocketsphinx 5.1.1 (pip) ships CMU's US English continuous acoustic model (16 kHz) and CMUdict.
The grammar allows any sequence of the digit words (``oh`` included), so both systems face the
same task: no LM, a closed vocabulary. Audio of any rate is resampled to 16 kHz. Each recording
is decoded on its own (default settings, from a fresh front end: the results of a new decoder
per recording, without loading the model for each), as ``asrkit transcribe`` does. Writes
``OUT/hyp.txt`` (``utt words...``), scored with ``asrkit score`` by the recipe.

The hypotheses are cached (--cache, default $ASRKIT_CACHE/pocketsphinx or
~/.cache/asrkit/pocketsphinx) under a hash of the pocketsphinx version, the words, the settings
and every recording's samples as decoded: a rerun of the recipe on the same audio takes seconds
instead of minutes, and any change to the audio decodes it again.

Usage: pocketsphinx_decode.py DATA_DIR OUT_DIR [--words zero,oh,one,...] [--jobs N]
           [--cache DIR | --no-cache]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "utils"))
from synth.corpus import default_cache_dir  # noqa: E402

WORDS = ["zero", "oh", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
SAMPLE_RATE = 16000
DECODER_VERSION = 1  # bump when make_decoder or decode_part change, so cached results are remade


def make_decoder(words: list[str]):
    """A pocketsphinx Decoder with the default US English model and a JSGF loop over ``words``."""
    import tempfile

    from pocketsphinx import Decoder, get_model_path

    model = get_model_path()
    with tempfile.TemporaryDirectory() as tmp:
        gram = os.path.join(tmp, "digits.gram")
        with open(gram, "w", encoding="utf-8") as f:
            f.write("#JSGF V1.0;\ngrammar digits;\n"
                    f"public <digits> = ( {' | '.join(words)} )+ ;\n")
        return Decoder(hmm=os.path.join(model, "en-us", "en-us"),
                       dict=os.path.join(model, "en-us", "cmudict-en-us.dict"),
                       jsgf=gram, samprate=SAMPLE_RATE, loglevel="FATAL")


def decode_part(task: tuple[str, list[str], list[str]]) -> tuple[list[str], int]:
    """Decode the utterances ``utts`` of a data dir in one process: (hypothesis lines, failed)."""
    data_dir, utts, words = task
    from asrkit.io import DataDir

    hyps, failed = [], 0
    audio = DataDir.read(data_dir).audio(utts, scale="int16", sample_rate=SAMPLE_RATE)
    dec = make_decoder(words)
    for u in audio:
        try:
            if u.error is not None:
                raise ValueError(u.error)
            pcm = np.clip(np.round(u.waveform), -32768, 32767).astype("<i2").tobytes()
            # pocketsphinx adapts its CMN and noise estimate from one utterance to the next:
            # each recording starts from a fresh front end, so no result depends on the ones
            # before it (the acoustic model stays loaded)
            dec.reinit_feat()
            dec.start_utt()
            dec.process_raw(pcm, full_utt=True)
            dec.end_utt()
            hyp = dec.hyp()
            hyps.append(f"{u.utt_id} {hyp.hypstr if hyp is not None else ''}".rstrip())
        except Exception as e:  # one bad utterance is reported and skipped
            print(f"{u.utt_id}: {e}", file=sys.stderr)
            failed += 1
    return hyps, failed


def cache_key(data_dir: str, utts: list[str], words: list[str], version: str) -> str | None:
    """A hash of what decides the hypotheses: the decoder, ``words`` and each utterance's id and
    16 kHz int16 samples as ``decode_part`` reads them. None when a recording cannot be read
    (nothing is cached then: the failure is reported by decoding)."""
    from asrkit.io import DataDir

    h = hashlib.sha256(json.dumps([DECODER_VERSION, version, words]).encode())
    for u in DataDir.read(data_dir).audio(utts, scale="int16", sample_rate=SAMPLE_RATE):
        if u.error is not None:
            return None
        pcm = np.clip(np.round(u.waveform), -32768, 32767).astype("<i2")
        h.update(u.utt_id.encode() + b"\0" + len(pcm).to_bytes(8, "little") + pcm.tobytes())
    return h.hexdigest()[:24]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data_dir")
    p.add_argument("out_dir")
    p.add_argument("--words", default=",".join(WORDS))
    p.add_argument("--jobs", type=int, default=1, help="decoding processes")
    p.add_argument("--cache", default=None, help="cache folder (default $ASRKIT_CACHE/"
                   "pocketsphinx or ~/.cache/asrkit/pocketsphinx)")
    p.add_argument("--no-cache", action="store_true", help="decode again, cache nothing")
    args = p.parse_args(argv)
    if args.jobs < 1:
        p.error("--jobs must be at least 1")
    try:
        import pocketsphinx  # noqa: F401
    except ImportError:
        print("pocketsphinx_decode.py: pocketsphinx is not installed (pip install "
              "pocketsphinx==5.1.1)", file=sys.stderr)
        return 2
    from importlib.metadata import version

    from asrkit.io import DataDir
    from asrkit.utils import atomic_write_text

    os.makedirs(args.out_dir, exist_ok=True)
    utts = list(DataDir.read(args.data_dir).utt_ids())
    words = args.words.split(",")
    out = os.path.join(args.out_dir, "hyp.txt")
    key = None if args.no_cache else cache_key(args.data_dir, utts, words,
                                                 version("pocketsphinx"))
    cached = key and os.path.join(args.cache or default_cache_dir("pocketsphinx"), key, "hyp.txt")
    if cached and os.path.isfile(cached):
        with open(cached, encoding="utf-8") as f:
            text = f.read()
        atomic_write_text(out, text)
        print(f"pocketsphinx: {len(text.splitlines())} utterances from the cache ({cached})")
        return 0
    parts = [utts[i::args.jobs] for i in range(args.jobs)]
    tasks = [(args.data_dir, part, words) for part in parts if part]
    if len(tasks) > 1:
        import multiprocessing as mp

        with mp.get_context("spawn").Pool(len(tasks)) as pool:
            results = pool.map(decode_part, tasks)
    else:
        results = [decode_part(t) for t in tasks]
    hyps = sorted(h for r in results for h in r[0])
    failed = sum(r[1] for r in results)
    text = "".join(h + "\n" for h in hyps)
    atomic_write_text(out, text)
    print(f"pocketsphinx: decoded {len(hyps)} utterances, {failed} failed")
    if cached and not failed:
        os.makedirs(os.path.dirname(cached), exist_ok=True)
        atomic_write_text(cached, text)
    return 1 if failed and not hyps else 0


if __name__ == "__main__":
    sys.exit(main())
