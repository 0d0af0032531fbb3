#!/usr/bin/env python3
"""Make the sentence corpus: synthetic read speech of grammar sentences, split by voice, plus
a larger, disjoint LM training text.

Sentences come from the stochastic grammar in ``grammar.py`` (commands, questions, statements
over ~500 words). Every utterance has its own sentence; test sentences never occur in training,
and the LM text (``--lm-sentences`` more sentences) contains none of the synthesised ones, so
the test measures both unheard voices and unseen sentences.

Speech is made as in the digits recipe (``recipes/digits/local/make_corpus.py``, reused here):
each speaker is an eSpeak NG accent x voice variant with its own pitch, range and rate; each
utterance gets jitter, speed perturbation, reverberation, additive noise (white, pink, brown,
babble at 0-30 dB SNR), gain and silence padding via ``asrkit.features``. Voice variants are
split between train and test, so test voices are unheard in training.

A dev split (``--dev-speakers``: new speakers, training voice variants, unseen sentences) is the
held-out set for the per-epoch CV loss, so the test set is not used for model selection.

Writes Kaldi data directories OUT/train, OUT/dev and OUT/test (wav.scp, text, utt2spk, spk2utt,
utt2dur, speakers.txt) with 16 kHz 16-bit wavs under OUT/wav/, and OUT/local/lm_text.txt. Each
split's text.ipa holds the phonemes eSpeak NG spoke (IPA, in the speaker's accent), from which
the lang stage picks each word's pronunciation (see pronunciations.py).

Usage: make_corpus.py OUT [--train-speakers N] [--dev-speakers N] [--test-speakers N]
                          [--utts-per-speaker N] [--test-utts-per-speaker N]
                          [--lm-sentences N] [--seed S]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import zlib

import numpy as np
import soundfile as sf

from asrkit.utils import atomic_write_text

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from grammar import Grammar  # noqa: E402
from pronunciations import espeak_ipa  # noqa: E402

DIGITS_LOCAL = os.path.join(HERE, "..", "..", "digits", "local")


def _load_digits_corpus():
    """The digits recipe's corpus module (speakers, eSpeak synthesis, degradation)."""
    path = os.path.join(DIGITS_LOCAL, "make_corpus.py")
    if not os.path.exists(path):
        raise SystemExit(f"error: {path} is missing (this recipe reuses the digits recipe's "
                         "speech synthesis)")
    spec = importlib.util.spec_from_file_location("digits_make_corpus", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


digits = _load_digits_corpus()
SAMPLE_RATE = digits.SAMPLE_RATE


def write_split(out: str, name: str, speakers: list[dict], sentences: list[str], seed: int,
                engine) -> int:
    """Synthesise one split into OUT/NAME (Kaldi data dir) and OUT/wav/NAME, speaker by speaker,
    ``len(sentences) // len(speakers)`` sentences each; returns the number of utterances."""
    data_dir = os.path.join(out, name)
    wav_dir = os.path.abspath(os.path.join(out, "wav", name))
    os.makedirs(data_dir, exist_ok=True)
    os.makedirs(wav_dir, exist_ok=True)
    per_speaker = len(sentences) // max(len(speakers), 1)
    wav_scp, text, text_ipa, utt2spk, utt2dur, spk2utt = [], [], [], [], [], {}
    for s, spk in enumerate(speakers):
        spk_seed = seed * 100003 + zlib.crc32(spk["id"].encode())
        rng = np.random.default_rng(spk_seed)
        for j, sentence in enumerate(sentences[s * per_speaker:(s + 1) * per_speaker]):
            utt = f"{spk['id']}-{j:04d}"
            audio, sr = digits.synthesize(engine, spk, sentence.split(), rng)
            if len(audio) == 0:
                print(f"warning: {utt}: synthesiser returned no audio; skipped", file=sys.stderr)
                continue
            audio = digits.degrade(audio, sr, rng, seed=spk_seed + j)
            path = os.path.join(wav_dir, f"{utt}.wav")
            sf.write(path, audio, SAMPLE_RATE, subtype="PCM_16")
            wav_scp.append(f"{utt} {path}")
            text.append(f"{utt} {sentence}")
            text_ipa.append(f"{utt} {espeak_ipa(engine, sentence, spk['voice'])}")
            utt2spk.append(f"{utt} {spk['id']}")
            utt2dur.append(f"{utt} {len(audio) / SAMPLE_RATE:.3f}")
            spk2utt.setdefault(spk["id"], []).append(utt)
    for fname, lines in (("wav.scp", wav_scp), ("text", text), ("text.ipa", text_ipa),
                         ("utt2spk", utt2spk), ("utt2dur", utt2dur),
                         ("spk2utt", [f"{s} {' '.join(u)}" for s, u in sorted(spk2utt.items())])):
        atomic_write_text(os.path.join(data_dir, fname),
                          "".join(line + "\n" for line in sorted(lines)))
    atomic_write_text(os.path.join(data_dir, "speakers.txt"),
                      "".join(" ".join(f"{k}={v}" for k, v in spk.items()) + "\n"
                              for spk in speakers))
    return len(text)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="output folder (gets train/, test/, wav/ and local/lm_text.txt)")
    p.add_argument("--train-speakers", type=int, default=200)
    p.add_argument("--dev-speakers", type=int, default=10)
    p.add_argument("--test-speakers", type=int, default=40)
    p.add_argument("--utts-per-speaker", type=int, default=30)
    p.add_argument("--test-utts-per-speaker", type=int, default=10)
    p.add_argument("--lm-sentences", type=int, default=50000,
                   help="sentences of LM training text (disjoint from the synthesised ones)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    for opt in ("train_speakers", "dev_speakers", "test_speakers", "utts_per_speaker",
                "test_utts_per_speaker"):
        if getattr(args, opt) < 1:
            p.error(f"--{opt.replace('_', '-')} must be at least 1")

    grammar = Grammar()
    rng = np.random.default_rng(args.seed)
    train_sents = grammar.unique_sentences(args.train_speakers * args.utts_per_speaker, rng)
    held_out = grammar.unique_sentences(
        (args.dev_speakers + args.test_speakers) * args.test_utts_per_speaker, rng,
        exclude=set(train_sents))
    dev_sents = held_out[: args.dev_speakers * args.test_utts_per_speaker]
    test_sents = held_out[len(dev_sents):]
    lm_sents = grammar.unique_sentences(args.lm_sentences, rng,
                                        exclude=set(train_sents) | set(held_out))
    os.makedirs(os.path.join(args.out, "local"), exist_ok=True)
    atomic_write_text(os.path.join(args.out, "local", "lm_text.txt"),
                      "".join(s + "\n" for s in lm_sents))

    engine = digits.ESpeak()
    train_variants, test_variants = digits.split_variants(engine.variants())
    train = digits.make_speakers(rng, train_variants, args.train_speakers, "tr")
    dev = digits.make_speakers(rng, train_variants, args.dev_speakers, "dv")
    test = digits.make_speakers(rng, test_variants, args.test_speakers, "te")
    n_train = write_split(args.out, "train", train, train_sents, args.seed, engine)
    n_dev = write_split(args.out, "dev", dev, dev_sents, args.seed + 2, engine)
    n_test = write_split(args.out, "test", test, test_sents, args.seed + 1, engine)
    print(f"made {n_train} training, {n_dev} dev and {n_test} test utterances "
          f"({len(train)} / {len(dev)} / {len(test)} speakers) and {len(lm_sents)} LM sentences "
          f"in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
