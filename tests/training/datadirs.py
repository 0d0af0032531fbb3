"""Tiny Kaldi data directories for the training tests (shared with tests/distributed).

``synthetic_dir`` writes features directly (a token-dependent pattern plus noise, so a model can
learn it in a few steps); ``digits_dir`` synthesises spoken digits with eSpeak NG
(recipes/digits/local/make_corpus.py) and computes real fbank features with
``asrkit compute-features``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

from asrkit.features import speaker_cmvn_stats
from asrkit.io import DataDir, write_table

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LETTERS = "abcde"


def synthetic_dir(path, num_utts=12, dim=8, seed=0, frames_per_token=6, extra_text=None,
                  drop_feats=(), speakers=3):
    """Write a data dir of ``num_utts`` utterances of 2-4 letters (a..e) and its tokens.txt.

    Each letter is ``frames_per_token`` frames of a letter-specific mean plus noise, with a
    silence gap between letters; ``ali.scp`` holds the per-frame classes (0 silence, then the
    letter's token id). ``extra_text`` adds ``{utt: text}`` lines (bad utterances);
    ``drop_feats`` lists utterances left out of feats.scp. Returns ``(data_dir, tokens_path)``.
    """
    rng = np.random.default_rng(seed)
    os.makedirs(path, exist_ok=True)
    means = rng.normal(0, 2.0, (len(LETTERS), dim))
    feats, text, utt2spk, labels = {}, {}, {}, {}
    for i in range(num_utts):
        utt = f"s{i % speakers}-u{i:03d}"
        word = "".join(rng.choice(list(LETTERS), size=int(rng.integers(2, 5))))
        frames = [rng.normal(0, 0.3, (3, dim))]
        classes = [0, 0, 0]
        for ch in word:
            frames.append(means[LETTERS.index(ch)] + rng.normal(0, 0.3, (frames_per_token, dim)))
            frames.append(rng.normal(0, 0.3, (2, dim)))
            classes += [LETTERS.index(ch) + 1] * frames_per_token + [0, 0]
        feats[utt] = (np.concatenate(frames) + 5.0).astype(np.float32)
        labels[utt] = np.array(classes, np.int32)
        text[utt] = word
        utt2spk[utt] = f"s{i % speakers}"
    for utt, t in (extra_text or {}).items():
        text[utt] = t
        utt2spk[utt] = "s0"
        feats[utt] = feats[next(iter(feats))]
    kept = {u: f for u, f in feats.items() if u not in drop_feats}
    ark = os.path.join(path, "feats.ark")
    write_table(f"ark,scp:{ark},{os.path.join(path, 'feats.scp')}", sorted(kept.items()))
    write_table(f"ark,scp:{os.path.join(path, 'ali.ark')},{os.path.join(path, 'ali.scp')}",
                sorted(labels.items()))
    stats = speaker_cmvn_stats(kept, utt2spk)
    write_table(f"ark,scp:{os.path.join(path, 'cmvn.ark')},{os.path.join(path, 'cmvn.scp')}",
                sorted(stats.items()))
    d = DataDir(None, utt2spk=utt2spk, text=text,
                utt2num_frames={u: str(len(f)) for u, f in kept.items()})
    d.write(path)
    tokens = os.path.join(os.path.dirname(path.rstrip("/")), "tokens.txt")
    with open(tokens, "w") as f:
        f.write("<blk> 0\n" + "".join(f"{c} {i + 1}\n" for i, c in enumerate(LETTERS)))
    return path, tokens


def digits_dir(root):
    """Make the digits corpus (4 train speakers x 3 utterances, 2 test speakers x 3) under
    ``root`` with 40-dim fbank features; returns ``(train_dir, test_dir, tokens_path)``."""
    corpus = os.path.join(root, "corpus")
    subprocess.run([sys.executable, os.path.join(ROOT, "recipes/digits/local/make_corpus.py"),
                    corpus, "--train-speakers", "4", "--test-speakers", "2",
                    "--utts-per-speaker", "3"], check=True, capture_output=True, timeout=120)
    conf = os.path.join(root, "fbank40.toml")
    with open(conf, "w") as f:
        f.write('[features]\ntype = "fbank"\nnum_mel_bins = 40\n[cmvn]\nmode = "speaker"\n')
    out = {}
    for part in ("train", "test"):
        out[part] = os.path.join(root, f"{part}_fbank")
        subprocess.run([sys.executable, "-m", "asrkit", "compute-features",
                        os.path.join(corpus, "synth", part), "--config", conf, "--out", out[part]],
                       check=True, capture_output=True, timeout=120)
    from asrkit.training import make_token_table

    tokens = os.path.join(root, "tokens.txt")
    # the test speakers may say a digit no training speaker said: one inventory for both
    texts = list(DataDir.read(out["train"]).text().values()) + list(
        DataDir.read(out["test"]).text().values())
    make_token_table(texts, "char").write(tokens)
    return out["train"], out["test"], tokens
