"""A model folder whose answers are known by construction: three "words" are three tones.

The network is one identity Dense layer and an output layer set by hand: token k's logit is
``GAIN * (fbank[BIN_k] - LEVEL)`` and the blank's is 0, so frames where tone k (``TONES_HZ``)
sounds choose token k and quiet frames the blank. A recording of tones and pauses therefore
reads as the tones' words, each starting where its tone starts: references for transcription,
chunking, resampling and alignment that need no training.
"""

from __future__ import annotations

import json
import os

import numpy as np
import soundfile as sf

TOKENS = ["<blk>", "one", "two", "three"]
TONES_HZ = {"one": 300.0, "two": 1000.0, "three": 3000.0}
BINS = {"one": 4, "two": 13, "three": 26}  # the 40-bin mel channel each tone peaks in (16 kHz)
LEVEL = 18.0    # log mel energy between a tone (> 23) and the background noise (< 16)
GAIN = 2.0
RATE = 16000


def tone_model():
    """The hand-set Model (40-dim fbank in, TOKENS out)."""
    from asrkit.models import Model

    net = {"seed": 0, "layers": [{"type": "dense", "dim": 40, "activation": "none"}]}
    W = np.zeros((40, len(TOKENS)), np.float32)
    b = np.zeros(len(TOKENS), np.float32)
    for k, word in enumerate(TOKENS[1:], 1):
        W[BINS[word], k] = GAIN
        b[k] = -GAIN * LEVEL
    params = {"layers.0.W": np.eye(40, dtype=np.float32), "layers.0.b": np.zeros(40, np.float32),
              "output.W": W, "output.b": b}
    return Model(net, 40, TOKENS, blank=0, params=params, reader={"cmvn": "none"})


def recording(words: list[str], rate: int = RATE, seed: int = 0, word_s: float = 0.3,
              gap_s: float = 0.4, lead_s: float = 0.5):
    """float32 samples in [-1, 1] of ``words`` as tones (10 ms ramps) between quiet gaps, and
    each word's true start in seconds."""
    rng = np.random.default_rng(seed)
    pieces, starts, t = [np.zeros(int(lead_s * rate))], [], lead_s
    ramp = int(0.01 * rate)
    for w in words:
        n = int(word_s * rate)
        x = 0.3 * np.sin(2 * np.pi * TONES_HZ[w] * np.arange(n) / rate)
        env = np.ones(n)
        env[:ramp] = np.linspace(0, 1, ramp)
        env[-ramp:] = np.linspace(1, 0, ramp)
        starts.append(t)
        pieces += [x * env, np.zeros(int(gap_s * rate))]
        t += (n + int(gap_s * rate)) / rate
    wave = np.concatenate(pieces)
    wave += 3e-4 * rng.standard_normal(len(wave))  # background noise, far below LEVEL
    return wave.astype(np.float32), starts


def make_tone_folder(root: str, cmvn: str = "none") -> str:
    """Write model, features, tokens, lexicon, a word-loop graph and the packaged folder
    ``root/final`` (its manifest's CMVN mode set to ``cmvn``); returns the folder."""
    from asrkit.decoders.graph import make_graph
    from asrkit.models import save
    from asrkit.recognizer import package_model_folder

    os.makedirs(root, exist_ok=True)
    model_path = os.path.join(root, "final.mdl")
    save(model_path, tone_model())
    feats = os.path.join(root, "fbank.toml")
    with open(feats, "w") as f:
        f.write('[features]\ntype = "fbank"\nnum_mel_bins = 40\n[cmvn]\nmode = "none"\n')
    tokens = os.path.join(root, "tokens.txt")
    with open(tokens, "w") as f:
        f.write("".join(f"{t} {i}\n" for i, t in enumerate(TOKENS)))
    lexicon = os.path.join(root, "lexicon.txt")
    with open(lexicon, "w") as f:
        f.write("one one\ntwo two\nthree three\n")
    make_graph(tokens, lexicon, word_loop=True).write(os.path.join(root, "graph"), text=False)
    out = os.path.join(root, "final")
    package_model_folder(out, model_path, feats, os.path.join(root, "graph"))
    if cmvn != "none":
        set_manifest(out, cmvn=cmvn)
    return out


def set_manifest(folder: str, **changes) -> None:
    """Rewrite ``folder/manifest.json`` with ``changes`` applied."""
    path = os.path.join(folder, "manifest.json")
    with open(path) as f:
        manifest = json.load(f)
    manifest.update(changes)
    with open(path, "w") as f:
        json.dump(manifest, f)


def write_wav(path, samples: np.ndarray, rate: int = RATE) -> str:
    """Write float samples as 16-bit PCM; returns the path as a string."""
    sf.write(path, samples, rate, subtype="PCM_16")
    return str(path)
