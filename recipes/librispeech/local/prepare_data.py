#!/usr/bin/env python3
"""Kaldi data directories from the standard LibriSpeech layout.

Reads ``LibriSpeech/SUBSET/SPEAKER/CHAPTER/SPEAKER-CHAPTER.trans.txt`` and the ``.flac`` files
beside it (and ``SPEAKERS.TXT`` for spk2gender when present) and writes OUT/SUBSET_NAME with
wav.scp (flac paths: soundfile reads them directly), text, utt2spk, spk2utt, spk2gender, utt2dur.
Speakers are SPEAKER-CHAPTER, as in Kaldi's recipe, so per-speaker CMVN follows the recording.
A transcript line without its audio file (or the reverse) is reported and left out.

Usage: prepare_data.py LIBRISPEECH_ROOT SUBSET OUT_DIR
"""

from __future__ import annotations

import os
import sys

import soundfile as sf


def read_genders(root: str) -> dict[str, str]:
    """speaker id -> 'm'/'f' from SPEAKERS.TXT (``ID | SEX | SUBSET | MINUTES | NAME``)."""
    path = os.path.join(root, "SPEAKERS.TXT")
    genders: dict[str, str] = {}
    if not os.path.exists(path):
        return genders
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith(";") or "|" not in line:
                continue
            fields = [x.strip() for x in line.split("|")]
            genders[fields[0]] = fields[1].lower()
    return genders


def prepare(root: str, subset: str, out: str) -> tuple[int, int]:
    """Write the data directory; returns (utterances written, problems reported)."""
    src = os.path.join(root, subset)
    if not os.path.isdir(src):
        raise SystemExit(f"error: {src} does not exist (expected LibriSpeech/{subset}/)")
    genders = read_genders(root)
    wav, text, utt2spk, utt2dur, spk2gender = {}, {}, {}, {}, {}
    problems = 0
    for spk in sorted(os.listdir(src)):
        for chapter in sorted(os.listdir(os.path.join(src, spk))):
            folder = os.path.join(src, spk, chapter)
            trans = os.path.join(folder, f"{spk}-{chapter}.trans.txt")
            if not os.path.exists(trans):
                print(f"warning: {folder}: no transcript file; skipped", file=sys.stderr)
                problems += 1
                continue
            speaker = f"{spk}-{chapter}"
            with open(trans, encoding="utf-8") as f:
                for lineno, line in enumerate(f, 1):
                    utt, _, words = line.strip().partition(" ")
                    if not utt:
                        continue
                    audio = os.path.abspath(os.path.join(folder, f"{utt}.flac"))
                    if not os.path.exists(audio):
                        print(f"warning: {trans}:{lineno}: {audio} is missing; skipped",
                              file=sys.stderr)
                        problems += 1
                        continue
                    wav[utt] = audio
                    text[utt] = words.strip()
                    utt2spk[utt] = speaker
                    utt2dur[utt] = sf.info(audio).duration
                    if spk in genders:
                        spk2gender[speaker] = genders[spk]
    os.makedirs(out, exist_ok=True)

    def write(name, table, fmt=str):
        with open(os.path.join(out, name), "w", encoding="utf-8") as f:
            for key in sorted(table):
                f.write(f"{key} {fmt(table[key])}\n")

    write("wav.scp", wav)
    write("text", text)
    write("utt2spk", utt2spk)
    write("utt2dur", utt2dur, lambda d: f"{d:.3f}")
    spk2utt: dict[str, list[str]] = {}
    for utt in sorted(utt2spk):
        spk2utt.setdefault(utt2spk[utt], []).append(utt)
    write("spk2utt", spk2utt, " ".join)
    if spk2gender:
        write("spk2gender", spk2gender)
    return len(wav), problems


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    n, problems = prepare(*argv)
    print(f"{argv[2]}: {n} utterances ({problems} problems reported)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
