#!/usr/bin/env python3
"""Make the sentence corpus: read speech of grammar sentences by every installed English voice
(split by voice), perturbed and recorded through simulated channels, plus a larger, disjoint LM
training text.

Sentences come from the stochastic grammar in ``grammar.py`` (commands, questions, statements
over ~500 words). Every utterance has its own sentence; test sentences never occur in training,
and the LM text (``--lm-sentences`` more sentences) contains none of the synthesised ones, so
the test measures both unheard voices and unseen sentences. The dev and test sentences are the
ones drawn after the first ``HELD_OUT_AFTER`` distinct sentences whatever the training size,
so runs with more or fewer training utterances are scored on the same sets.

Speech is made as in the digits recipe, by the shared synthesis in ``recipes/utils/synth``:
voices of eSpeak NG, flite, festival and Piper drawn evenly (no engine dominates), each speaker
with its own rate and pitch; training and dev speakers get a voice change (pitch, formants,
tempo) and a recording channel (room, microphone, telephone line or codec, noise, level,
silences). Whole talkers (flite's awb, festival's ked) and a fifth of eSpeak NG's voice variants
are held out for the test set, which is recorded through channels with unchanged voices.

A dev split (``--dev-speakers``: new speakers, training voices, unseen sentences) is the
held-out set for the per-epoch CV loss, so the test set is not used for model selection.

Writes Kaldi data directories OUT/train, OUT/dev and OUT/test (wav.scp, text, utt2spk, spk2utt,
utt2dur, speakers.txt), and OUT/test_clean: the test utterances as the voices said them, with
no channel (a diagnostic: what the unheard voices cost apart from the channels), with 16 kHz
16-bit wavs in the cache (--cache; reused by a rerun), and
OUT/local/lm_text.txt. What each voice said is kept for the lang stage, which picks the
lexicon pronunciation nearest to it (see pronunciations.py): text.ipa (eSpeak NG and Piper, IPA
in the voice's accent) and text.phones (flite and festival, CMU phones).

Usage: make_corpus.py OUT [--train-speakers N] [--dev-speakers N] [--test-speakers N]
                          [--utts-per-speaker N] [--test-utts-per-speaker N]
                          [--lm-sentences N] [--jobs N] [--cache DIR] [--seed S]
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from asrkit.utils import atomic_write_text

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "utils"))
from grammar import Grammar  # noqa: E402
from synth import corpus, voices  # noqa: E402
from synth.speakers import split_voices, tts_specs, voice_groups, without_channels  # noqa: E402

# Training takes the first 3000 distinct sentences drawn, then the held-out ones are drawn, then
# more training sentences: the recipe trained on 3000 until 2026-12-07, and every figure in its
# README before then is on the test set this gives. Drawn first instead, the held-out sentences
# are the grammar's most frequent ones, which the LM text (distinct sentences, none synthesised)
# then lacks: test perplexity 9.6 against 7.4, and the 3-gram graph's WER on them was twice the
# grammar graph's (13.2% against 6.6% through channels, 6.0% against 1.5% without).
HELD_OUT_AFTER = 3000


def draw_sentences(grammar: Grammar, rng: np.random.Generator, num_train: int,
                   num_held_out: int, num_lm: int) -> tuple[list[str], list[str], list[str]]:
    """Distinct sentences of ``grammar``: ``num_train`` for training, ``num_held_out`` for dev and
    test, ``num_lm`` for the LM text, three disjoint lists of str. The held-out ones are those
    drawn after the first ``HELD_OUT_AFTER``, so they do not depend on ``num_train``."""
    first = grammar.unique_sentences(HELD_OUT_AFTER, rng)
    held_out = grammar.unique_sentences(num_held_out, rng, exclude=set(first))
    more = grammar.unique_sentences(max(0, num_train - len(first)), rng,
                                    exclude=set(first) | set(held_out))
    train = (first + more)[:num_train]
    lm = grammar.unique_sentences(num_lm, rng, exclude=set(train) | set(held_out))
    return train, held_out, lm


def log(message: str) -> None:
    print(message, flush=True)


def sentence_specs(prefix, groups, sentences, num_speakers, seed, banks, perturb):
    """Specs of ``num_speakers`` speakers reading ``sentences`` in turn, and speakers.txt."""
    per_speaker = len(sentences) // num_speakers

    def words(rng, i, j):
        return sentences[i * per_speaker + j].split()

    return tts_specs(prefix, groups, num_speakers, per_speaker, seed, banks, perturb, words,
                     pron=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="output folder (gets train/, dev/, test/ and local/lm_text.txt)")
    p.add_argument("--train-speakers", type=int, default=200)
    p.add_argument("--dev-speakers", type=int, default=10)
    p.add_argument("--test-speakers", type=int, default=40)
    p.add_argument("--utts-per-speaker", type=int, default=15)
    p.add_argument("--test-utts-per-speaker", type=int, default=10)
    p.add_argument("--lm-sentences", type=int, default=50000,
                   help="sentences of LM training text (disjoint from the synthesised ones)")
    p.add_argument("--jobs", type=int, default=2, help="rendering processes")
    p.add_argument("--cache", default=None, help="cache folder (default $ASRKIT_CACHE/synth or "
                                                 "~/.cache/asrkit/synth)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    for opt in ("train_speakers", "dev_speakers", "test_speakers", "utts_per_speaker",
                "test_utts_per_speaker", "jobs"):
        if getattr(args, opt) < 1:
            p.error(f"--{opt.replace('_', '-')} must be at least 1")

    train_sents, held_out, lm_sents = draw_sentences(
        Grammar(), np.random.default_rng(args.seed), args.train_speakers * args.utts_per_speaker,
        (args.dev_speakers + args.test_speakers) * args.test_utts_per_speaker, args.lm_sentences)
    dev_sents = held_out[: args.dev_speakers * args.test_utts_per_speaker]
    test_sents = held_out[len(dev_sents):]
    os.makedirs(os.path.join(args.out, "local"), exist_ok=True)
    atomic_write_text(os.path.join(args.out, "local", "lm_text.txt"),
                      "".join(s + "\n" for s in lm_sents))

    inventory = voices.inventory(log)
    train_voices, test_voices = split_voices(inventory)
    if not train_voices or not test_voices:
        log("error: no voices for training or for the test (install eSpeak NG: pip install "
            "espeakng-loader; see recipes/utils/prepare_recipe.sh)")
        return 1
    log(f"voices: {len(train_voices)} for training, {len(test_voices)} held out "
        f"({', '.join(sorted({v.id for v in test_voices if v.engine != 'espeak'}))} and "
        f"{sum(v.engine == 'espeak' for v in test_voices)} eSpeak NG voices)")
    cache = args.cache or corpus.default_cache_dir()
    banks = corpus.make_banks(cache, train_voices, args.seed, log=log)
    train_groups = voice_groups(train_voices, espeak_groups=3)
    test_groups = voice_groups(test_voices, espeak_groups=1)
    counts, made = {}, {}
    with corpus.Renderer(cache, banks, jobs=args.jobs, log=log) as renderer:
        for part, prefix, groups, sents, n, seed, perturb in (
                ("train", "tr", train_groups, train_sents, args.train_speakers, args.seed, True),
                ("dev", "dv", train_groups, dev_sents, args.dev_speakers, args.seed + 2, True),
                ("test", "te", test_groups, test_sents, args.test_speakers, args.seed + 1,
                 False)):
            specs, lines = made[part] = sentence_specs(prefix, groups, sents, n, seed, banks,
                                                       perturb)
            folder = renderer.part(f"sentences_{part}", specs)
            counts[part] = corpus.copy_part(folder, os.path.join(args.out, part),
                                            {"speakers.txt": lines})
        # the same test utterances as the voices spoke them, no channel: what the unheard
        # voices cost apart from what the rooms, lines and noise cost
        clean, lines = without_channels(*made["test"])
        folder = renderer.part("sentences_test_clean", clean)
        counts["test_clean"] = corpus.copy_part(folder, os.path.join(args.out, "test_clean"),
                                                {"speakers.txt": lines})
    log(f"made {counts['train']} training, {counts['dev']} dev and {counts['test']} test "
        f"utterances ({args.train_speakers} / {args.dev_speakers} / {args.test_speakers} "
        f"speakers; test_clean: the test without channels) and {len(lm_sents)} LM sentences "
        f"in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
