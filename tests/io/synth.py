"""Tiny synthetic Kaldi data directories for the io and compute-features tests."""

from __future__ import annotations

import os

import numpy as np
import soundfile as sf


def tone(num_samples: int, rng: np.random.Generator, freq: float = 440.0,
         rate: int = 16000) -> np.ndarray:
    """int16 test signal: a sine plus noise, ``[num_samples]``."""
    t = np.arange(num_samples) / rate
    x = 8000 * np.sin(2 * np.pi * freq * t) + 500 * rng.standard_normal(num_samples)
    return np.clip(x, -32768, 32767).astype(np.int16)


def write_kaldi_files(folder: str, tables: dict[str, dict[str, str]]) -> None:
    """Write ``{file: {key: value}}`` as sorted Kaldi files, spk2utt derived from utt2spk."""
    os.makedirs(folder, exist_ok=True)
    tables = dict(tables)
    if "utt2spk" in tables and "spk2utt" not in tables:
        spk2utt: dict[str, list[str]] = {}
        for utt in sorted(tables["utt2spk"]):
            spk2utt.setdefault(tables["utt2spk"][utt], []).append(utt)
        tables["spk2utt"] = {s: " ".join(u) for s, u in spk2utt.items()}
    for name, table in tables.items():
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            for key in sorted(table, key=lambda k: k.encode()):
                f.write(f"{key} {table[key]}\n")


def make_corpus(root: str, rng: np.random.Generator) -> tuple[str, dict[str, np.ndarray]]:
    """A data dir under ``root`` with 7 utterances of 3 speakers.

    Good audio: three 16-bit wavs, a flac, a ``cat x.wav |`` pipe. Bad: a corrupt wav and an
    empty file. Returns ``(data_dir, {utt: int16 samples})`` for the good utterances.
    """
    audio = os.path.join(root, "audio")
    os.makedirs(audio, exist_ok=True)
    samples: dict[str, np.ndarray] = {}
    wav: dict[str, str] = {}
    lengths = {"alice-1": 4000, "alice-2": 5200, "bob-1": 3300, "bob-flac": 4100}
    for i, (utt, n) in enumerate(lengths.items()):
        x = tone(n, rng, freq=300 + 100 * i)
        path = os.path.join(audio, f"{utt}.{'flac' if 'flac' in utt else 'wav'}")
        sf.write(path, x, 16000, subtype="PCM_16")
        samples[utt] = x
        wav[utt] = path
    wav["carol-pipe"] = f"cat {wav['alice-1']} |"
    samples["carol-pipe"] = samples["alice-1"]
    corrupt = os.path.join(audio, "corrupt.wav")
    with open(corrupt, "wb") as f:
        f.write(b"RIFF\x24\x00\x00\x00WAVEfmt garbage that is not audio")
    empty = os.path.join(audio, "empty.wav")
    open(empty, "wb").close()
    wav["bob-corrupt"] = corrupt
    wav["carol-empty"] = empty
    utt2spk = {u: u.split("-")[0] for u in wav}
    data = os.path.join(root, "data", "train")
    write_kaldi_files(data, {"wav.scp": wav, "utt2spk": utt2spk,
                             "text": {u: "hello world" for u in wav}})
    return data, samples
