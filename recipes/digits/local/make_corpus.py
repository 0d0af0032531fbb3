#!/usr/bin/env python3
"""Make the connected-digits corpus: synthetic speech, split into train and test by voice.

Each speaker is an eSpeak NG voice (one of 8 English accents with one of ~100 voice variants) with
its own base pitch, pitch range and speaking rate; each utterance is 1-7 digit words ("zero" and
"oh" both for 0) spoken with per-utterance jitter, then varied as a corpus of real recordings would
be: speed perturbation, synthetic room reverberation, additive noise (white, pink, brown, babble)
at 0-30 dB SNR, gain, and silence padding. Where Debian's `flite` is installed its voices are added
as extra speakers. The voice variants of the test speakers never occur in training, so the test set
measures generalisation to unheard voices.

Writes Kaldi data directories OUT/train, OUT/dev (held-out speakers with training voice variants,
for cross-validation during training) and OUT/test (unheard voice variants), each with wav.scp,
text, utt2spk, spk2utt, utt2dur, and 16 kHz 16-bit wavs under OUT/wav/.

Usage: make_corpus.py OUT [--train-speakers N] [--dev-speakers N] [--test-speakers N]
                          [--utts-per-speaker N] [--seed S]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import zlib

import numpy as np
import soundfile as sf

from asrkit.features import add_noise, make_noise, resample, reverberate, speed_perturb

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from espeak import ESpeak  # noqa: E402

SAMPLE_RATE = 16000
DIGITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
ACCENTS = ["en-us", "en", "en-gb-scotland", "en-gb-x-rp", "en-gb-x-gbclan", "en-gb-x-gbcwmd",
           "en-029", "en-us-nyc"]
NOISES = ["white", "pink", "brown", "babble"]


def digit_string(rng: np.random.Generator) -> list[str]:
    """1-7 digit words; a zero is said "oh" 40% of the time, "zero" otherwise."""
    words = []
    for d in rng.integers(0, 10, size=int(rng.integers(1, 8))):
        words.append("oh" if d == 0 and rng.random() < 0.4 else DIGITS[d])
    return words


def split_variants(variants: list[str], test_fraction: float = 0.2) -> tuple[list, list]:
    """Deterministic split of voice variants into (train, test) by a hash of their names."""
    test = [v for v in variants if zlib.crc32(v.encode()) % 100 < test_fraction * 100]
    return [v for v in variants if v not in test], test


def make_speakers(rng, variants: list[str], n: int, prefix: str) -> list[dict]:
    """``n`` speaker descriptions (voice, variant, base pitch/range/rate) with ids PREFIX-NNN."""
    speakers = []
    for i in range(n):
        speakers.append({
            "id": f"{prefix}{i:03d}", "engine": "espeak",
            "voice": ACCENTS[int(rng.integers(len(ACCENTS)))],
            "variant": variants[int(rng.integers(len(variants)))],
            "pitch": int(rng.integers(20, 80)), "range": int(rng.integers(20, 90)),
            "rate": int(rng.integers(130, 230)),
        })
    return speakers


def flite_speakers(prefix: str) -> list[dict]:
    """Extra speakers from Debian's flite, when installed (each built-in voice is one speaker)."""
    if shutil.which("flite") is None:
        return []
    out = subprocess.run(["flite", "-lv"], capture_output=True, text=True).stdout
    voices = out.split(":", 1)[-1].split()
    return [{"id": f"{prefix}{i:03d}", "engine": "flite", "voice": v}
            for i, v in enumerate(voices)]


def synthesize(engine: ESpeak, spk: dict, words: list[str], rng) -> tuple[np.ndarray, int]:
    """Speak ``words`` as ``spk`` with per-utterance jitter; returns (float32 samples, rate)."""
    text = " ".join(words)
    if spk["engine"] == "flite":
        with tempfile.NamedTemporaryFile(suffix=".wav") as f:
            subprocess.run(["flite", "-voice", spk["voice"], "-t", text, "-o", f.name],
                           check=True, capture_output=True)
            audio, sr = sf.read(f.name, dtype="float32")
        return audio * 32768.0, sr
    audio = engine.synthesize(
        text, spk["voice"], spk["variant"],
        rate=int(spk["rate"] * rng.uniform(0.85, 1.15)),
        pitch=int(np.clip(spk["pitch"] + rng.integers(-8, 9), 0, 100)),
        pitch_range=int(np.clip(spk["range"] + rng.integers(-10, 11), 0, 100)),
        wordgap=int(rng.choice([0, 0, 0, 1, 2, 4, 8])))
    return audio.astype(np.float32), engine.sample_rate


def degrade(audio: np.ndarray, sr: int, rng, seed: int) -> np.ndarray:
    """Resample to 16 kHz and vary it: speed, padding, reverberation, noise, gain (int16 scale)."""
    audio = resample(audio, sr, SAMPLE_RATE)
    factor = float(rng.choice([0.9, 1.0, 1.0, 1.1]))
    if factor != 1.0:
        audio = speed_perturb(audio, SAMPLE_RATE, factor)
    pad = [int(SAMPLE_RATE * rng.uniform(0.05, 0.5)) for _ in range(2)]
    audio = np.concatenate([np.zeros(pad[0], np.float32), audio, np.zeros(pad[1], np.float32)])
    if rng.random() < 0.35:
        audio = reverberate(audio, SAMPLE_RATE, rt60=float(rng.uniform(0.15, 0.7)), seed=seed)
    if rng.random() < 0.7:
        kind = NOISES[int(rng.integers(len(NOISES)))]
        noise = make_noise(kind, len(audio), SAMPLE_RATE, seed=seed)
        audio = add_noise(audio, noise, snr_db=float(rng.uniform(0, 30)), seed=seed)
    else:
        audio = audio + rng.normal(0, 2.0, size=len(audio)).astype(np.float32)  # dither floor
    peak = float(np.abs(audio).max()) or 1.0
    gain = rng.uniform(0.05, 0.9) * 32767.0 / peak
    return np.clip(audio * gain, -32768, 32767).astype(np.int16)


def write_split(out: str, name: str, speakers: list[dict], utts_per_speaker: int, seed: int,
                engine: ESpeak) -> int:
    """Synthesise one split into OUT/NAME (Kaldi data dir) and OUT/wav/NAME; returns #utts."""
    data_dir = os.path.join(out, name)
    wav_dir = os.path.abspath(os.path.join(out, "wav", name))
    os.makedirs(data_dir, exist_ok=True)
    os.makedirs(wav_dir, exist_ok=True)
    wav_scp, text, utt2spk, utt2dur, spk2utt = [], [], [], [], {}
    for spk in speakers:
        spk_seed = seed * 100003 + zlib.crc32(spk["id"].encode())
        rng = np.random.default_rng(spk_seed)
        for j in range(utts_per_speaker):
            utt = f"{spk['id']}-{j:04d}"
            words = digit_string(rng)
            audio, sr = synthesize(engine, spk, words, rng)
            if len(audio) == 0:
                print(f"warning: {utt}: synthesiser returned no audio; skipped", file=sys.stderr)
                continue
            audio = degrade(audio, sr, rng, seed=spk_seed + j)
            path = os.path.join(wav_dir, f"{utt}.wav")
            sf.write(path, audio, SAMPLE_RATE, subtype="PCM_16")
            wav_scp.append(f"{utt} {path}")
            text.append(f"{utt} {' '.join(words)}")
            utt2spk.append(f"{utt} {spk['id']}")
            utt2dur.append(f"{utt} {len(audio) / SAMPLE_RATE:.3f}")
            spk2utt.setdefault(spk["id"], []).append(utt)
    for fname, lines in (("wav.scp", wav_scp), ("text", text), ("utt2spk", utt2spk),
                         ("utt2dur", utt2dur),
                         ("spk2utt", [f"{s} {' '.join(u)}" for s, u in sorted(spk2utt.items())])):
        with open(os.path.join(data_dir, fname), "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in sorted(lines)))
    with open(os.path.join(data_dir, "speakers.txt"), "w", encoding="utf-8") as f:
        for spk in speakers:
            f.write(" ".join(f"{k}={v}" for k, v in spk.items()) + "\n")
    return len(text)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="output folder (gets train/, test/ and wav/)")
    p.add_argument("--train-speakers", type=int, default=160)
    p.add_argument("--dev-speakers", type=int, default=10)
    p.add_argument("--test-speakers", type=int, default=40)
    p.add_argument("--utts-per-speaker", type=int, default=20)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    engine = ESpeak()
    train_variants, test_variants = split_variants(engine.variants())
    rng = np.random.default_rng(args.seed)
    train = make_speakers(rng, train_variants, args.train_speakers, "tr")
    test = make_speakers(rng, test_variants, args.test_speakers, "te")
    dev = make_speakers(rng, train_variants, args.dev_speakers, "dv")
    extra = flite_speakers("fl")
    # flite voices: the first half train, the rest test (different voices in each)
    train += extra[: len(extra) // 2]
    test += extra[len(extra) // 2:]
    n_train = write_split(args.out, "train", train, args.utts_per_speaker, args.seed, engine)
    n_test = write_split(args.out, "test", test, args.utts_per_speaker, args.seed + 1, engine)
    n_dev = write_split(args.out, "dev", dev, args.utts_per_speaker, args.seed + 2, engine)
    print(f"made {n_train} training, {n_dev} dev and {n_test} test utterances "
          f"({len(train)} / {len(dev)} / {len(test)} speakers, flite voices: {len(extra)}) "
          f"in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
