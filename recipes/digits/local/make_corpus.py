#!/usr/bin/env python3
"""Make the connected-digits corpus: real speech (four FSDD speakers) and synthetic speech
(every installed English TTS voice), with speaker perturbation and channel simulation.

Synthetic (OUT/synth/{train,dev,test,test_clean}): each speaker is a voice (eSpeak NG, flite,
festival, Piper: see recipes/utils/synth/voices.py) with its own rate and pitch, spoken digit
strings of 1-7 words ("zero" and "oh" both for 0). Voices are balanced (no engine or voice
dominates); training speakers are changed (pitch, formants, tempo) and recorded through random
channels (rooms, microphones, telephone lines, codecs, noise, levels). Whole talkers are held
out: the test set is spoken by voices never heard in training (--test-talkers, and a fifth of
eSpeak NG's variants), recorded through channels but with their own voices unchanged; test_clean
is the same test utterances without channels. Dev speakers use training voices.

Real (OUT/fsdd/SPEAKER/{train,dev,test}), for each of jackson, nicolas, yweweler and lucas:
  test   clean: all 500 isolated takes + --fsdd-test-strings (150) strings joined from them
  dev    clean: takes 0-4 of each digit (FSDD's own test split) + --fsdd-dev-strings (30)
  train  augmented: takes 5-49, isolated and joined into --fsdd-train-strings (250) strings, spread
         over --fsdd-virtual-speakers voices (changed by --fsdd-perturbation), each with its
         own channel; each take and string is rendered --fsdd-copies times, by as many of them;
         --fsdd-trim of the changed voices' take ends are cut at the speech with a random
         threshold, quiet consonants and all, as FSDD's own trimming cut some speakers' /s/
so a leave-one-speaker-out fold "test on S" trains on the other three's train parts (and the
synthetic train) and tests on S's test part. FSDD says "zero", never "oh".

The default fold (--test-speaker, default lucas; "none" keeps all four in training) is
assembled into OUT/{train,dev,test,test_real}: train = synth/train + three speakers' train,
dev = synth/dev + their dev, test = synth/test (unheard voices), test_real = the held-out
speaker's clean test part. Other folds: asrkit data combine (see the recipe's README).

Every part is cached (--cache, default $ASRKIT_CACHE/synth or ~/.cache/asrkit/synth) under a
hash of its utterance specifications and the generator version: a rerun, or another fold,
reuses it. Rendering runs in --jobs processes. OUT/voices.txt lists the voice inventory.

Usage: make_corpus.py OUT [--train-speakers N] [--dev-speakers N] [--test-speakers N]
           [--utts-per-speaker N] [--fsdd DIR] [--test-speaker S|none] [--jobs N] [--seed S]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "utils"))
from synth import augment, corpus, fsdd, voices  # noqa: E402
from synth.speakers import (  # noqa: E402
    TEST_TALKERS,
    seed_of,
    split_voices,
    tts_specs,
    voice_groups,
    without_channels,
)

DIGITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def log(message: str) -> None:
    print(message, flush=True)


def digit_string(rng: np.random.Generator) -> list[int]:
    """1-7 digits."""
    return [int(d) for d in rng.integers(0, 10, size=int(rng.integers(1, 8)))]


def words_of(digits: list[int], rng: np.random.Generator, allow_oh: bool = True) -> list[str]:
    """Digit words; a zero is said "oh" 40% of the time when ``allow_oh``."""
    return ["oh" if d == 0 and allow_oh and rng.random() < 0.4 else DIGITS[d] for d in digits]


# ----------------------------------------------------------------------------- FSDD

def fsdd_specs(speaker: str, part: str, takes: list[fsdd.Take], num_strings: int, seed: int,
               banks: dict, virtual: int = 1, copies: int = 1,
               strength: float = 0.5, trim: float = 0.0) -> list[dict]:
    """Isolated takes and joined strings of one FSDD speaker; ``part`` train is augmented and
    spread over ``virtual`` speakers perturbed with ``strength`` (``augment.draw_speaker``),
    each item rendered ``copies`` times by as many different ones; dev and test are clean."""
    rng = np.random.default_rng(seed_of(seed, speaker, part))
    by_digit = collections.defaultdict(list)
    for t in takes:
        by_digit[t.digit].append(t)
    rel = {t: os.path.relpath(t.path, os.path.dirname(os.path.dirname(t.path))) for t in takes}
    if part == "train":
        voices_ = [(f"fsdd-{speaker}-v{k}", augment.draw_speaker(rng, strength=strength)
                    if k else None, augment.draw_channel(rng, banks["rirs"]))
                   for k in range(virtual)]
    else:
        voices_ = [(f"fsdd-{speaker}", None, None)]
    items = [([t], f"iso-{t.digit}-{t.take:02d}") for t in takes]
    for k in range(num_strings):
        digits = digit_string(rng)
        items.append(([by_digit[d][int(rng.integers(len(by_digit[d])))] for d in digits],
                      f"str-{k:04d}"))
    specs = []
    for i, (chosen, name) in enumerate(items):
        # copy 0 keeps the one-copy assignment (and so its cached renders); further copies go
        # to other virtual speakers, drawn per item
        first = i % len(voices_)
        chosen_voices = [first]
        if copies > 1:
            others = [k for k in range(len(voices_)) if k != first]
            chosen_voices += [int(k) for k in rng.permutation(others)[:copies - 1]]
        for c, k in enumerate(chosen_voices):
            spk, speaker_change, channel = voices_[k]
            tag = f"{name}-c{c}" if c else name
            specs.append({"utt": f"{spk}-{tag}", "spk": spk,
                          "words": [DIGITS[t.digit] for t in chosen],
                          "seed": seed_of(seed, speaker, part, tag),
                          "source": {"kind": "fsdd", "takes": [rel[t] for t in chosen],
                                     **({"trim": trim} if trim and speaker_change else {})},
                          "speaker": speaker_change, "channel": channel})
    return specs


# ----------------------------------------------------------------------------- main

def write_inventory(path: str, parts: dict[str, list[dict]], train_voices, test_voices) -> str:
    """OUT/voices.txt: utterances per engine and voice in each part (FSDD parts summed over
    the speakers, one row each), and each voice's role; returns the table."""
    counts = collections.Counter()
    columns = ["synth/train", "synth/dev", "synth/test", "fsdd/train", "fsdd/dev", "fsdd/test"]
    for part, specs in parts.items():
        column = part if part.startswith("synth") else f"fsdd/{part.rsplit('/', 1)[1]}"
        for s in specs:
            src = s["source"]
            if src["kind"] == "tts":
                engine, name, _ = src["voice"]
                name = "(variants)" if engine == "espeak" else name
            else:
                engine, name = "fsdd", part.split("/")[1]
            counts[(engine, name, column)] += 1
    role = collections.defaultdict(set)
    for side, pool in (("train", train_voices), ("test", test_voices)):
        for v in pool:
            role[(v.engine, "(variants)" if v.engine == "espeak" else v.name)].add(side)
    lines = [f"{'engine':9} {'voice':22} {'role':11}" + "".join(f"{c:>12}" for c in columns)]
    for e, n in sorted({(e, n) for e, n, _ in counts}):
        r = "+".join(sorted(role[(e, n)], reverse=True)) or "real"
        lines.append(f"{e:9} {n:22} {r:11}" + "".join(f"{counts[(e, n, c)]:12d}"
                                                       for c in columns))
    lines.append(f"{'total':9} {'':22} {'':11}" + "".join(
        f"{sum(v for (e, n, c), v in counts.items() if c == col):12d}" for col in columns))
    text = "\n".join(lines) + "\n"
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return text


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="output folder")
    p.add_argument("--train-speakers", type=int, default=120, help="synthetic training speakers")
    p.add_argument("--dev-speakers", type=int, default=10, help="synthetic dev speakers")
    p.add_argument("--test-speakers", type=int, default=30,
                   help="synthetic test speakers (unheard voices)")
    p.add_argument("--utts-per-speaker", type=int, default=20)
    p.add_argument("--test-talkers", default=",".join(TEST_TALKERS),
                   help="talkers (voices of flite/festival/Piper) held out for the test set")
    p.add_argument("--fsdd", default=None, metavar="DIR",
                   help="a local FSDD copy (default: $ASRKIT_CORPORA/fsdd-4spk, the shared "
                        "corpora folder, else download)")
    p.add_argument("--no-download", action="store_true", help="never download FSDD")
    p.add_argument("--fsdd-speakers", default=",".join(fsdd.SPEAKERS))
    p.add_argument("--fsdd-takes", type=int, default=50,
                   help="use takes 0..N-1 of each digit (FSDD has 50); the first tenth is "
                        "dev, the rest train (for a test speaker: all of them)")
    p.add_argument("--fsdd-train-strings", type=int, default=None,
                   help="joined strings per speaker in train (default 5 x --fsdd-takes)")
    p.add_argument("--fsdd-dev-strings", type=int, default=None,
                   help="... in dev (default 0.6 x --fsdd-takes)")
    p.add_argument("--fsdd-test-strings", type=int, default=None,
                   help="... in test (default 3 x --fsdd-takes)")
    p.add_argument("--fsdd-virtual-speakers", type=int, default=6)
    p.add_argument("--fsdd-perturbation", type=float, default=0.5,
                   help="strength of the virtual speakers' voice change (pitch, formants, "
                        "tempo; 0: none, 1: as the synthetic speakers')")
    p.add_argument("--fsdd-trim", type=float, default=0.5, metavar="P",
                   help="share of the perturbed training takes' ends cut at the speech (quiet "
                        "consonants and all), as an isolated-word corpus trims its takes")
    p.add_argument("--fsdd-copies", type=int, default=1,
                   help="renderings of each training take and string, by different virtual "
                        "speakers (at most --fsdd-virtual-speakers)")
    p.add_argument("--test-speaker", default="lucas",
                   help="FSDD speaker held out in the default fold, or 'none'")
    p.add_argument("--jobs", type=int, default=2, help="rendering processes")
    p.add_argument("--cache", default=None, help="cache folder (default $ASRKIT_CACHE/synth or "
                                                 "~/.cache/asrkit/synth)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    for opt in ("train_speakers", "dev_speakers", "test_speakers", "utts_per_speaker", "jobs",
                "fsdd_virtual_speakers", "fsdd_copies", "fsdd_takes"):
        if getattr(args, opt) < 1:
            p.error(f"--{opt.replace('_', '-')} must be at least 1")
    speakers = [s for s in args.fsdd_speakers.split(",") if s]
    bad = [s for s in speakers if s not in fsdd.SPEAKERS]
    if bad:
        p.error(f"--fsdd-speakers: {', '.join(bad)} not used (only {', '.join(fsdd.SPEAKERS)})")
    if args.test_speaker != "none" and args.test_speaker not in speakers:
        p.error(f"--test-speaker {args.test_speaker}: not among --fsdd-speakers")
    if not 0 <= args.fsdd_perturbation <= 2:  # NaN fails too
        p.error(f"--fsdd-perturbation: from 0 to 2 (got {args.fsdd_perturbation})")
    if not 0 <= args.fsdd_trim <= 1:
        p.error(f"--fsdd-trim: a share from 0 to 1 (got {args.fsdd_trim})")
    if args.fsdd_copies > args.fsdd_virtual_speakers:
        p.error("--fsdd-copies: at most --fsdd-virtual-speakers")
    if args.fsdd_takes > 50:
        p.error("--fsdd-takes: FSDD has 50 takes of each digit")
    for opt, per_take in (("train", 5.0), ("dev", 0.6), ("test", 3.0)):
        if getattr(args, f"fsdd_{opt}_strings") is None:
            setattr(args, f"fsdd_{opt}_strings", int(round(per_take * args.fsdd_takes)))
    cache = args.cache or corpus.default_cache_dir()
    os.makedirs(cache, exist_ok=True)

    inventory = voices.inventory(log)
    train_voices, test_voices = split_voices(inventory, set(args.test_talkers.split(",")))
    if not train_voices or not test_voices:
        log("error: no voices for training or for the test (install eSpeak NG: pip install "
            "espeakng-loader; see recipes/utils/prepare_recipe.sh)")
        return 1
    log(f"voices: {len(train_voices)} for training, {len(test_voices)} held out "
        f"({', '.join(sorted({v.id for v in test_voices if v.engine != 'espeak'}))} and "
        f"{sum(v.engine == 'espeak' for v in test_voices)} eSpeak NG voices)")
    try:
        root, source = fsdd.locate(args.fsdd, download=not args.no_download, log=log)
    except fsdd.FsddError as e:
        log(f"error: {e}")
        return 1
    log(f"fsdd: reading {source}")
    banks = corpus.make_banks(cache, train_voices, args.seed, log=log)

    train_groups = voice_groups(train_voices, espeak_groups=3)
    test_groups = voice_groups(test_voices, espeak_groups=1)
    parts: dict[str, list[dict]] = {}
    info: dict[str, list[str]] = {}
    def digits(rng, i, j):
        return words_of(digit_string(rng), rng)

    for part, prefix, groups, n, seed, perturb in (
            ("train", "tr", train_groups, args.train_speakers, args.seed, True),
            ("dev", "dv", train_groups, args.dev_speakers, args.seed + 2, True),
            ("test", "te", test_groups, args.test_speakers, args.seed + 1, False)):
        parts[f"synth/{part}"], info[f"synth/{part}"] = tts_specs(
            prefix, groups, n, args.utts_per_speaker, seed, banks, perturb, digits)
    # the test voices as they spoke, no channel: what the unheard voices cost apart from the
    # rooms, lines and noise
    parts["synth/test_clean"], info["synth/test_clean"] = without_channels(
        parts["synth/test"], info["synth/test"])
    all_takes = [t for t in fsdd.takes(root, speakers) if t.take < args.fsdd_takes]
    dev_takes = max(1, args.fsdd_takes // 10)  # 5 of 50: FSDD's own test split, takes 0-4
    for spk in speakers:
        mine = [t for t in all_takes if t.speaker == spk]
        held = [t for t in mine if t.take < dev_takes]
        rest = [t for t in mine if t.take >= dev_takes]
        parts[f"fsdd/{spk}/test"] = fsdd_specs(spk, "test", mine, args.fsdd_test_strings,
                                               args.seed, banks)
        parts[f"fsdd/{spk}/dev"] = fsdd_specs(spk, "dev", held, args.fsdd_dev_strings,
                                              args.seed, banks)
        parts[f"fsdd/{spk}/train"] = fsdd_specs(spk, "train", rest, args.fsdd_train_strings,
                                                args.seed, banks, args.fsdd_virtual_speakers,
                                                args.fsdd_copies, args.fsdd_perturbation,
                                                args.fsdd_trim)
    with corpus.Renderer(cache, banks, jobs=args.jobs, fsdd_root=root, log=log) as renderer:
        for name, specs in parts.items():
            folder = renderer.part(name.replace("/", "_"), specs)
            extra = {"speakers.txt": info[name]} if name in info else None
            corpus.copy_part(folder, os.path.join(args.out, name), extra)
    table = write_inventory(os.path.join(args.out, "voices.txt"), parts, train_voices,
                            test_voices)
    log("voice inventory (utterances per part), also in " + os.path.join(args.out, "voices.txt"))
    log(table.rstrip())
    with open(os.path.join(args.out, "fold.txt"), "w", encoding="utf-8") as f:
        f.write(f"test_speaker {args.test_speaker}\nspeakers {' '.join(speakers)}\n"
                f"fsdd_source {source}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
