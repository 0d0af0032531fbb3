#!/usr/bin/env python3
"""A copy of a Kaldi data directory whose ``text`` is in phones, for phone-level CTC training.

Each word becomes one of its pronunciations in LANG/lexicon.txt. With ``--ipa FILE`` (the
``text.ipa`` the data stage wrote: what eSpeak NG or Piper said, in the speaker's accent) and
``--phones FILE`` (``text.phones``: the segments flite or festival said; by default the
``text.phones`` beside the ``--ipa`` file) the pronunciations are the ones nearest to what was
said (``pronunciations.py``); for an utterance without either, each word's first pronunciation
(CMUdict's first, its most common reading). The decoding graph allows every pronunciation.

The other files of SRC (feats.scp, cmvn.scp, utt2spk, spk2utt, utt2num_frames, ...) are copied
unchanged; their archive paths are absolute, so the archives are shared, not copied. The word
transcripts are kept as DST/text.words. A word without a pronunciation is an error naming the
file, line and utterance.

Usage: phone_transcripts.py LEXICON SRC_DIR DST_DIR [--ipa TEXT_IPA] [--phones TEXT_PHONES]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pronunciations import (  # noqa: E402
    choose_pronunciations,
    cmu_phones_to_arpabet,
    ipa_to_arpabet,
)


def read_lexicon(path: str) -> dict[str, list[list[str]]]:
    """word -> its pronunciations (lists of phones, in file order) from ``word ph ph ...``."""
    lexicon: dict[str, list[list[str]]] = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) < 2:
                raise ValueError(f"{path}:{lineno}: word {fields[0]!r} has no phones")
            lexicon.setdefault(fields[0], []).append(fields[1:])
    return lexicon


def read_ipa(path: str) -> dict[str, str]:
    """utterance -> the rest of its line (IPA, or phones) from ``utt ...`` lines."""
    table = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            utt, _, ipa = line.strip().partition(" ")
            if utt:
                table[utt] = ipa
    return table


def phone_text(text_path: str, lexicon: dict[str, list[list[str]]],
               ipa: dict[str, str] | None = None,
               phones: dict[str, str] | None = None) -> tuple[list[str], dict]:
    """Kaldi text lines ``utt ph ph ...`` for the word transcripts in ``text_path``, and
    statistics: utterances aligned to what was said (``ipa``: utt -> eSpeak IPA; ``phones``:
    utt -> flite/festival segments), words given a non-first pronunciation, the edit distance
    and reference phones of those alignments."""
    out = []
    stats = {"aligned": 0, "alternative_words": 0, "edits": 0.0, "ref_phones": 0}
    with open(text_path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            fields = line.split()
            if not fields:
                continue
            utt, words = fields[0], fields[1:]
            for w in words:
                if w not in lexicon:
                    raise ValueError(f"{text_path}:{lineno}: utterance {utt}: word {w!r} "
                                     "is not in the lexicon")
            ref = None
            if ipa is not None and utt in ipa:
                ref = ipa_to_arpabet(ipa[utt])
            elif phones is not None and utt in phones:
                ref = cmu_phones_to_arpabet(phones[utt].split())
            if ref is not None:
                prons, dist = choose_pronunciations(words, lexicon, ref)
                stats["aligned"] += 1
                stats["edits"] += dist
                stats["ref_phones"] += len(ref)
                stats["alternative_words"] += sum(p != lexicon[w][0] for w, p in zip(words, prons))
            else:
                prons = [lexicon[w][0] for w in words]
            out.append(f"{utt} {' '.join(ph for p in prons for ph in p)}\n")
    return out, stats


def main(argv=None) -> int:
    from asrkit.utils import atomic_write_text

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("lexicon")
    p.add_argument("src", help="data dir (its text is in words)")
    p.add_argument("dst", help="output data dir (text in phones)")
    p.add_argument("--ipa", help="text.ipa of the data stage: what the synthesiser said")
    p.add_argument("--phones", help="text.phones of the data stage: flite's and festival's "
                                    "segments (default: text.phones beside --ipa)")
    args = p.parse_args(argv)
    if args.phones is None and args.ipa:
        beside = os.path.join(os.path.dirname(args.ipa), "text.phones")
        args.phones = beside if os.path.exists(beside) else None
    try:
        ipa = read_ipa(args.ipa) if args.ipa and os.path.exists(args.ipa) else None
        phones = read_ipa(args.phones) if args.phones else None
        lines, stats = phone_text(os.path.join(args.src, "text"), read_lexicon(args.lexicon),
                                  ipa, phones)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    os.makedirs(args.dst, exist_ok=True)
    for name in sorted(os.listdir(args.src)):
        path = os.path.join(args.src, name)
        if name != "text" and os.path.isfile(path) and not name.endswith(".ark"):
            shutil.copyfile(path, os.path.join(args.dst, name))
    shutil.copyfile(os.path.join(args.src, "text"), os.path.join(args.dst, "text.words"))
    atomic_write_text(os.path.join(args.dst, "text"), "".join(lines))
    msg = f"{args.dst}: {len(lines)} phone transcripts"
    if stats["aligned"]:
        msg += (f"; {stats['aligned']} aligned to the phonemes the synthesiser said: "
                f"{stats['alternative_words']} words took a non-first pronunciation, "
                f"{stats['edits'] / max(stats['ref_phones'], 1):.1%} phone mismatch remains")
    print(msg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
