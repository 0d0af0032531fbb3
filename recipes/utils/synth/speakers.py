"""Synthetic speakers: which voices train and which test, voices drawn evenly, each speaker's
prosody, voice change and recording set-up, and the utterance specs of ``corpus``.

Held out for the test set (never heard in training): whole talkers of flite/festival/Piper
(``test_talkers``, default flite's awb and festival's ked) and a fifth of eSpeak NG's voice
variants (by a hash of their names, so the split does not move when voices are added).
Speakers draw their voice group by group: each non-eSpeak voice is a group, eSpeak NG's many
variants form ``espeak_groups`` groups, so that no engine or voice dominates.
"""

from __future__ import annotations

import collections
import zlib

import numpy as np

from . import augment
from .voices import Voice

TEST_TALKERS = ("awb", "ked")
ESPEAK_TEST_PERCENT = 20


def seed_of(*parts) -> int:
    """A seed from any values (CRC-32 of their text)."""
    return zlib.crc32(" ".join(map(str, parts)).encode())


def split_voices(inventory: list[Voice], test_talkers=TEST_TALKERS) -> tuple[list, list]:
    """(train voices, test voices)."""
    def held_out(v):
        if v.engine == "espeak":
            return zlib.crc32(v.talker.split(":", 1)[1].encode()) % 100 < ESPEAK_TEST_PERCENT
        return v.talker in test_talkers
    return ([v for v in inventory if not held_out(v)], [v for v in inventory if held_out(v)])


def voice_groups(pool: list[Voice], espeak_groups: int) -> list[list[Voice]]:
    """Groups drawn from equally: each non-eSpeak voice alone, eSpeak NG's variants as
    ``espeak_groups`` groups (by accent)."""
    groups = [[v] for v in pool if v.engine != "espeak"]
    by_accent = collections.defaultdict(list)
    for v in pool:
        if v.engine == "espeak":
            by_accent[v.name.split("+")[0]].append(v)
    accents = sorted(by_accent)
    for k in range(espeak_groups if accents else 0):
        groups.append([v for a in accents[k::espeak_groups] for v in by_accent[a]])
    return [g for g in groups if g]


def draw_prosody(voice: Voice, rng) -> dict:
    """A speaker's own speaking rate and pitch (see ``voices.Synthesizer``)."""
    p = {"rate": float(np.exp(rng.uniform(np.log(0.8), np.log(1.25))))}
    if voice.engine == "espeak":
        p.update(pitch=int(rng.integers(20, 80)), range=int(rng.integers(20, 90)))
    elif voice.engine == "festival" and voice.name.endswith("_diphone"):
        p.update(pitch=float(rng.uniform(85, 190)), range=float(rng.uniform(10, 35)))
    elif voice.engine == "piper":
        p.update(noise=float(rng.uniform(0.4, 0.9)), noise_w=float(rng.uniform(0.5, 1.0)))
    return p


def jitter(prosody: dict, rng) -> dict:
    """Per-utterance variation of a speaker's prosody."""
    p = dict(prosody)
    p["rate"] = p["rate"] * float(np.exp(rng.uniform(-0.1, 0.1)))
    if "pitch" in p and isinstance(p["pitch"], int):
        p["pitch"] = int(np.clip(p["pitch"] + rng.integers(-8, 9), 0, 100))
        p["range"] = int(np.clip(p["range"] + rng.integers(-10, 11), 0, 100))
        p["wordgap"] = int(rng.choice([0, 0, 0, 1, 2, 4, 8]))
    return p


def tts_specs(prefix: str, groups: list[list[Voice]], num_speakers: int, utts: int, seed: int,
              banks: dict, perturb: bool, words, pron: bool = False) -> tuple[list, list]:
    """Utterance specs of ``num_speakers`` speakers ``PREFIX000``.. with ``utts`` each, and
    their ``speakers.txt`` lines. ``words(rng, speaker_index, j)`` gives utterance ``j``'s
    words. With ``perturb`` 80% of the speakers get a voice change; 90% get a channel."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(groups))
    specs, lines = [], []
    for i in range(num_speakers):
        group = groups[order[i % len(groups)]]
        voice = group[int(rng.integers(len(group)))]
        spk = f"{prefix}{i:03d}"
        prosody = draw_prosody(voice, rng)
        change = augment.draw_speaker(rng) if perturb and rng.random() < 0.8 else None
        channel = augment.draw_channel(rng, banks["rirs"]) if rng.random() < 0.9 else None
        line = "clean" if channel is None else (channel["line"] or ["wide"])[0]
        lines.append(f"{spk} engine={voice.engine} voice={voice.name} talker={voice.talker} "
                     f"perturbed={'yes' if change else 'no'} channel={line}")
        for j in range(utts):
            urng = np.random.default_rng(seed_of(seed, spk, j))
            specs.append({"utt": f"{spk}-{j:04d}", "spk": spk, "words": words(urng, i, j),
                          "seed": seed_of(seed, spk, j, "render"),
                          "source": {"kind": "tts",
                                     "voice": [voice.engine, voice.name, voice.talker],
                                     "prosody": jitter(prosody, urng)},
                          "speaker": change, "channel": channel, "pron": pron})
    return specs, lines


def without_channels(specs: list[dict], lines: list[str]) -> tuple[list[dict], list[str]]:
    """The same utterances as the voices spoke them, no room, line or noise (a test set's
    ``test_clean`` twin): ``tts_specs``' ``(specs, lines)`` with every channel dropped."""
    clean = [dict(spec, channel=None) for spec in specs]
    lines = [" ".join("channel=clean" if f.startswith("channel=") else f for f in line.split())
             for line in lines]
    return clean, lines
