"""A small unidirectional LSTM-CTC model trained on synthetic tone "speech", for the streaming
tests and latency figures (``python -m tests.recognizer.tone_lstm OUT``).

Five "words" are five tones (``TONES_HZ``); a recording is 2-6 of them with random lengths,
levels and pauses over background noise of a random level, so the word ends are known exactly
(``ToneUtterance.words``). The model is built the way a recipe builds one, through the
``asrkit`` command: ``compute-features`` (40-dim fbank), ``train`` (2 x 32-cell LSTM over 3
stacked frames, CTC, sliding-window CMVN), ``graph build --word-loop`` and ``package``. It
takes about a minute of one core; the packaged folder is kept in ``tests/recognizer/data/
tone_lstm`` (about 60 kB), so the tests never train.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np

RATE = 16000
TONES_HZ = {"one": 300.0, "two": 560.0, "three": 1000.0, "four": 1780.0, "five": 3150.0}
FOLDER = os.path.join(os.path.dirname(__file__), "data", "tone_lstm")  # the packaged model

TRAIN_CONFIG = """
[network]
seed = 0
stack_frames = 3
subsample_frames = 3
[[network.layers]]
type = "lstm"
hidden = 32
num_layers = 2

[criterion]
type = "ctc"

[reader]
tokens = "tokens.txt"
unit = "word"
cmvn = "sliding"
cmn_window = 300
min_cmn_window = 100
minibatch_frames = 1000  # small batches: many steps (CTC leaves its all-blank phase)

[learner]
type = "adam"
lr = 5e-3
warmup_steps = 20
clip_norm = 5.0

[train]
epochs = 15
log_every = 20
"""

FBANK = """[features]
type = "fbank"
num_mel_bins = 40
dither = 1.0
[cmvn]
mode = "none"
"""


@dataclasses.dataclass
class ToneUtterance:
    """A synthetic recording: float32 samples in [-1, 1) at ``RATE`` and its words as
    ``(word, start s, end s)``."""

    samples: np.ndarray
    words: list[tuple[str, float, float]]

    @property
    def text(self) -> str:
        return " ".join(w for w, _, _ in self.words)


def tone_utterance(rng: np.random.Generator, min_words: int = 2,
                   max_words: int = 6) -> ToneUtterance:
    """A random recording (see the module docstring)."""
    names = list(TONES_HZ)
    n_words = int(rng.integers(min_words, max_words + 1))
    pieces = [np.zeros(int(rng.uniform(0.2, 0.8) * RATE))]
    t = len(pieces[0])
    words = []
    ramp = int(0.01 * RATE)
    for _ in range(n_words):
        w = names[int(rng.integers(len(names)))]
        n = int(rng.uniform(0.15, 0.4) * RATE)
        freq = TONES_HZ[w] * rng.uniform(0.97, 1.03)
        x = rng.uniform(0.05, 0.5) * np.sin(2 * np.pi * freq * np.arange(n) / RATE)
        x[:ramp] *= np.linspace(0, 1, ramp)
        x[-ramp:] *= np.linspace(1, 0, ramp)
        words.append((w, t / RATE, (t + n) / RATE))
        gap = np.zeros(int(rng.uniform(0.08, 0.6) * RATE))
        pieces += [x, gap]
        t += n + len(gap)
    pieces.append(np.zeros(int(rng.uniform(0.2, 0.6) * RATE)))
    wave = np.concatenate(pieces)
    wave += 10 ** rng.uniform(-4, -2.5) * rng.standard_normal(len(wave))
    return ToneUtterance(wave.astype(np.float32), words)


def write_data_dir(path: str, utterances: list[ToneUtterance], prefix: str) -> None:
    """A Kaldi data directory of ``utterances`` (wav files beside it) plus ``times.json``
    (each utterance's word times)."""
    import soundfile as sf

    os.makedirs(os.path.join(path, "wav"), exist_ok=True)
    scp, text, spk, times = [], [], [], {}
    for i, u in enumerate(utterances):
        utt = f"{prefix}-{i:04d}"
        wav = os.path.abspath(os.path.join(path, "wav", f"{utt}.wav"))
        sf.write(wav, u.samples, RATE, subtype="PCM_16")
        scp.append(f"{utt} {wav}\n")
        text.append(f"{utt} {u.text}\n")
        spk.append(f"{utt} {utt}\n")
        times[utt] = u.words
    for name, lines in (("wav.scp", scp), ("text", text), ("utt2spk", spk), ("spk2utt", spk)):
        with open(os.path.join(path, name), "w") as f:
            f.writelines(lines)
    with open(os.path.join(path, "times.json"), "w") as f:
        json.dump(times, f)


def _asrkit(*args, cwd):
    print("asrkit", *args, flush=True)
    subprocess.run([sys.executable, "-m", "asrkit", *args], cwd=cwd, check=True)


def build(work: str, out: str = FOLDER, seed: int = 0, config: str = TRAIN_CONFIG,
          graph: bool = True) -> str:
    """Synthesise the corpus in ``work``, train the network of ``config`` (a training config
    with the reader above), and package the model folder ``out`` (with a decoding graph unless
    ``graph`` is false: a transducer needs none)."""
    rng = np.random.default_rng(seed)
    os.makedirs(work, exist_ok=True)
    for part, n in (("train", 400), ("dev", 40), ("test", 60)):
        write_data_dir(os.path.join(work, "data", part), [tone_utterance(rng) for _ in range(n)],
                       part)
    with open(os.path.join(work, "tokens.txt"), "w") as f:
        f.writelines(f"{t} {i}\n" for i, t in enumerate(["<blk>", *TONES_HZ]))
    with open(os.path.join(work, "lexicon.txt"), "w") as f:
        f.writelines(f"{w} {w}\n" for w in TONES_HZ)
    with open(os.path.join(work, "train.toml"), "w") as f:
        f.write(config)
    with open(os.path.join(work, "fbank.toml"), "w") as f:
        f.write(FBANK)
    for part in ("train", "dev", "test"):
        _asrkit("compute-features", f"data/{part}", "--config", "fbank.toml", "--out",
                f"fbank/{part}", cwd=work)
    _asrkit("train", "train.toml", "--data", "fbank/train", "--cv-data", "fbank/dev", "--out",
            "exp/model", cwd=work)
    if not graph:
        _asrkit("package", "--model", "exp/model/final.mdl", "--features", "fbank.toml",
                "--out", os.path.abspath(out), cwd=work)
        return out
    _asrkit("graph", "build", "--tokens", "tokens.txt", "--lexicon", "lexicon.txt",
            "--word-loop", "--out", "graph", cwd=work)
    _asrkit("decode", "--graph", "graph", "--model", "exp/model/final.mdl", "fbank/test",
            "--out", "exp/decode_test", cwd=work)
    _asrkit("package", "--model", "exp/model/final.mdl", "--graph", "graph", "--features",
            "fbank.toml", "--out", os.path.abspath(out), cwd=work)
    return out


if __name__ == "__main__":
    build(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else FOLDER)


def stream_events(rec, samples, chunk_s, **options):
    """``[(event, t)]`` of streaming ``samples`` (float32 at RATE) in ``chunk_s`` pieces: events
    with the audio time (seconds) at which the chunk that gave them ended."""
    stream = rec.stream(**options)
    size = int(chunk_s * RATE)
    out = []
    for i in range(0, len(samples), size):
        out += [(e, min(i + size, len(samples)) / RATE) for e in stream.accept(
            samples[i:i + size], RATE)]
    return out + [(e, len(samples) / RATE) for e in stream.finish()]


def check_streams_equal_offline(rec, utterances, onset: tuple[float, float]) -> None:
    """Each utterance's offline transcript is right, with word starts within ``onset`` (lo, hi
    seconds) of the truth, and streaming it in 0.05/0.13/0.5 s chunks gives the same words and
    times as the offline result."""
    for k, u in enumerate(utterances):
        offline = rec.transcribe(u.samples, RATE)
        assert offline.text == u.text
        for w, (word, start, _) in zip(offline.words, u.words):
            assert w.word == word and onset[0] <= w.start - start <= onset[1]
        events = stream_events(rec, u.samples, [0.05, 0.13, 0.5][k % 3], endpoint=False)
        (final, _), = [(e, t) for e, t in events if e.kind == "final"]
        assert [w.as_dict() for w in final.words] == [w.as_dict() for w in offline.words]


def check_partials_come_soon(rec, utterances, slack: float, **options) -> None:
    """Streamed in 0.1 s chunks, every word first shows in a partial result at most ``slack``
    seconds after its end (or after sliding CMVN's held first window), and the finals together
    are the transcript."""
    held = rec.normalization["min_cmn_window"] * 0.01 + 0.015
    for u in utterances:
        events = stream_events(rec, u.samples, 0.1, partial_interval=0.0, **options)
        seen = {}
        for e, t in events:
            for k, w in enumerate(e.words):
                seen.setdefault((e.segment, k), (w.word, t))
        finals = [e for e, _ in events if e.kind == "final"]
        assert " ".join(f.text for f in finals) == u.text
        flat = [(f.segment, k) for f in finals for k in range(len(f.words))]
        for (seg, k), (word, _, end) in zip(flat, u.words):
            first_word, t = seen[(seg, k)]
            assert first_word == word and t - max(end, held) <= slack, (word, end, t)


def check_bench_stream(tmp_path, utterances, folder: str, capsys) -> None:
    """``asrkit bench stream`` on three utterances at 0.1 and 0.5 s chunks: no errors, every
    word timed, first partials before finals, and bigger chunks wait longer for a partial."""
    from asrkit.cli.main import main

    data = tmp_path / "data"
    write_data_dir(str(data), utterances[:3], "u")
    assert main(["bench", "stream", str(data), "--model-dir", folder, "--chunks", "0.1",
                 "0.5", "--json"]) == 0
    cases = json.loads(capsys.readouterr().out)["cases"]
    assert [c["extra"]["chunk_s"] for c in cases] == [0.1, 0.5]
    for c in cases:
        x = c["extra"]
        assert x["wer_stream"] == 0.0 and x["wer_offline"] == 0.0
        assert x["words_timed"] == sum(len(u.words) for u in utterances[:3])
        # the final comes at an endpoint (0.5 s of trailing blank) or at the end of the input
        assert x["first_partial_ms_p50"] <= x["final_ms_p50"]
        assert 0 < x["rtf"] and 0 < x["offline_rtf"]
    assert cases[0]["extra"]["first_partial_ms_p50"] < cases[1]["extra"]["first_partial_ms_p50"]
