"""Render utterance specifications into cached Kaldi data directories, over several processes.

A recipe describes each utterance as a plain dict (``spec``), drawn from its own seed:

    {"utt": "tr003-0007", "spk": "tr003", "words": ["three", "oh"], "seed": 1234,
     "source": {"kind": "tts", "voice": ["flite", "slt", "slt"], "prosody": {"rate": 1.1}}
            or {"kind": "fsdd", "takes": ["recordings/3_lucas_7.wav", ...]},
     "speaker": draw_speaker(...) or None,      # voice change (None: as spoken)
     "channel": draw_channel(...) or None,      # recording set-up (None: clean)
     "pron": False}                             # keep what the engine said (text.ipa/.phones)

``Renderer(...).part(name, specs)`` makes (or reuses) ``CACHE/NAME-KEY/``, KEY being a hash of the
specs, the generator version and the banks: a rerun, or another recipe fold asking for the same
part, reuses it. It holds the 16 kHz 16-bit wavs and wav.scp (absolute paths), text, utt2spk,
spk2utt, utt2dur and, where kept, text.ipa / text.phones; ``copy_part`` writes those files into
a recipe's data/ folder.

FSDD strings: the takes of one speaker in a row, each preceded by a gap of 0-1 s (a third of
them under 80 ms, as in fluent digit strings), with 0.1-0.6 s of lead and trail, all over a
noise floor at the level of the recordings' own quietest frame, takes faded in and out over
5 ms so that no edge clicks. An isolated take is just the take (upsampled to 16 kHz); in an
augmented part, half of them get the same lead and trail.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import shutil
import sys
import time

import numpy as np
import soundfile as sf

from asrkit.features import make_noise, resample

from . import augment
from .voices import Synthesizer, Voice

GENERATOR_VERSION = 2  # bump when the rendering changes, so that caches are remade
SAMPLE_RATE = augment.SAMPLE_RATE
KALDI_FILES = ("wav.scp", "text", "utt2spk", "spk2utt", "utt2dur", "text.ipa", "text.phones")


def default_cache_dir(kind: str = "synth") -> str:
    """``$ASRKIT_CACHE/KIND``, else ``~/.cache/asrkit/KIND`` (the recipes' caches)."""
    root = os.environ.get("ASRKIT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                          "asrkit")
    return os.path.join(root, kind)


def spec_key(*parts) -> str:
    """A short hash of JSON-serialisable ``parts`` and the generator version."""
    h = hashlib.sha256(json.dumps([GENERATOR_VERSION, *parts], sort_keys=True).encode())
    return h.hexdigest()[:16]


# ----------------------------------------------------------------------------- banks

def make_banks(cache: str, voices: list[Voice], seed: int, num_rooms: int = 24,
               log=print) -> dict:
    """Simulated rooms and synthetic babble talkers (cached in ``cache``): ``{"rirs": [...],
    "babble": [...]}``, float32 arrays at 16 kHz. Babble is read by up to 12 of ``voices``."""
    pick = sorted(voices, key=lambda v: spec_key(v.id, seed))[:12]
    key = spec_key("banks", seed, num_rooms, [v.id for v in pick])
    path = os.path.join(cache, f"banks-{key}.npz")
    if os.path.exists(path):
        with np.load(path) as z:
            return {"rirs": [z[f"rir{i}"] for i in range(int(z["num_rirs"]))],
                    "babble": [z[f"babble{i}"] for i in range(int(z["num_babble"]))]}
    t0 = time.time()
    rirs = augment.rir_bank(num_rooms, seed)
    synth = Synthesizer()
    babble = []
    try:
        for i, voice in enumerate(pick):
            sentence = " ".join(augment.BABBLE_SENTENCES[(i * 3 + k) % len(
                augment.BABBLE_SENTENCES)] for k in range(3))
            speech = synth.speak(voice, sentence)
            if len(speech.audio):
                babble.append(resample(speech.audio, speech.sample_rate, SAMPLE_RATE))
    finally:
        synth.close()
    os.makedirs(cache, exist_ok=True)
    arrays = {f"rir{i}": h for i, h in enumerate(rirs)}
    arrays.update({f"babble{i}": b for i, b in enumerate(babble)})
    tmp = f"{path}.{os.getpid()}.tmp.npz"
    np.savez(tmp, num_rirs=len(rirs), num_babble=len(babble), **arrays)
    os.replace(tmp, path)
    log(f"banks: {len(rirs)} simulated rooms, {len(babble)} babble talkers "
        f"({time.time() - t0:.0f} s)")
    return {"rirs": rirs, "babble": babble}


# ----------------------------------------------------------------------------- one utterance

_ctx: dict = {}


def _init_worker(banks: dict, fsdd_root: str | None) -> None:
    _ctx.update(banks=banks, fsdd=fsdd_root, synth=Synthesizer())


def _fade(x: np.ndarray, n: int) -> np.ndarray:
    n = min(n, len(x) // 2)
    if n > 0:
        ramp = np.linspace(0.0, 1.0, n, dtype=np.float32)
        x = x.copy()
        x[:n] *= ramp
        x[-n:] *= ramp[::-1]
    return x


def _floor_level(x: np.ndarray, frame: int = 160) -> float:
    """RMS of the quietest 10 ms frame (the recording's own noise floor: FSDD takes are cut
    close to the speech, so even their quieter frames are mostly speech)."""
    power = augment.frame_power(x, frame)
    if len(power) == 0:
        return 1.0
    return float(max(np.sqrt(power).min(), 0.5))


def fsdd_string(takes: list[np.ndarray], rng: np.random.Generator,
                pad: bool = False) -> np.ndarray:
    """Join 16 kHz takes (int16 scale) into one connected string over a noise floor; a single
    take is returned as it is unless ``pad``."""
    sr = SAMPLE_RATE
    if len(takes) == 1 and not pad:
        return takes[0]
    gaps = [0.0] + [float(rng.uniform(0, 0.08) if rng.random() < 0.35 else rng.uniform(0.08, 1.0))
                    for _ in takes[1:]]
    lead, trail = (float(rng.uniform(0.1, 0.6)) for _ in range(2))
    starts, pos = [], int(lead * sr)
    for take, gap in zip(takes, gaps, strict=True):
        pos += int(gap * sr)
        starts.append(pos)
        pos += len(take)
    total = pos + int(trail * sr)
    level = float(np.median([_floor_level(t) for t in takes])) * rng.uniform(0.7, 1.3)
    out = make_noise(str(rng.choice(["pink", "brown", "white"])), total, sr, rng=rng) * level
    for take, start in zip(takes, starts, strict=True):
        out[start:start + len(take)] += _fade(take, sr // 200)
    return out


def _source_audio(spec: dict, speech) -> tuple[np.ndarray, int]:
    if spec["source"]["kind"] == "tts":
        return speech.audio, speech.sample_rate
    rng = np.random.default_rng(spec["seed"] + 1)
    takes = []
    for rel in spec["source"]["takes"]:
        x, sr = sf.read(os.path.join(_ctx["fsdd"], rel), dtype="float32")
        if spec["source"].get("trim"):
            x = augment.trim_to_speech(x, sr, rng, spec["source"]["trim"])
        takes.append(resample(x * 32768.0, sr, SAMPLE_RATE))
    # augmented isolated takes get silence around them half of the time, as users leave it
    pad = spec.get("channel") is not None and rng.random() < 0.5
    return fsdd_string(takes, rng, pad=pad), SAMPLE_RATE


def render_chunk(task: tuple[str, list[dict]]) -> list[dict]:
    """Synthesise and record the specs of ``task = (wav_dir, specs)`` (festival's of one voice
    in one process); write their wavs into ``wav_dir``; return one record per utterance
    (``utt``, ``path``, ``seconds``, ``ipa``, ``phones``, or ``error``)."""
    wav_dir, specs = task
    synth = _ctx["synth"]
    speech = {}
    groups: dict[tuple, list[dict]] = {}
    for spec in specs:
        if spec["source"]["kind"] == "tts":
            groups.setdefault(tuple(spec["source"]["voice"]), []).append(spec)
    for voice_fields, group in groups.items():
        voice = Voice(*voice_fields)
        texts = [" ".join(s["words"]) for s in group]
        prosodies = [s["source"].get("prosody", {}) for s in group]
        try:
            said = synth.speak_many(voice, texts, prosodies,
                                    want_pronunciation=any(s.get("pron") for s in group))
        except (RuntimeError, OSError, ValueError) as e:
            said = [e] * len(group)
        for s, sp in zip(group, said, strict=True):
            speech[s["utt"]] = sp
    records = []
    for spec in specs:
        sp = speech.get(spec["utt"])
        if isinstance(sp, Exception):
            records.append({"utt": spec["utt"], "error": str(sp)})
            continue
        audio, sr = _source_audio(spec, sp)
        if len(audio) == 0:
            records.append({"utt": spec["utt"], "error": "the synthesiser returned no audio"})
            continue
        audio = resample(audio, sr, SAMPLE_RATE)
        rng = np.random.default_rng(spec["seed"])
        if spec.get("speaker"):
            audio = augment.perturb_voice(audio, spec["speaker"], rng)
        banks = _ctx["banks"]
        if spec.get("channel"):
            pcm = augment.record(audio, spec["channel"], rng, banks["rirs"], banks["babble"],
                                 pad=spec["source"]["kind"] == "tts")
        else:
            if spec["source"]["kind"] == "tts":  # clean, but with a little room to breathe
                lead, trail = (np.zeros(int(SAMPLE_RATE * rng.uniform(0.1, 0.3)), np.float32)
                               for _ in range(2))
                audio = np.concatenate([lead, audio, trail])
                audio = audio + rng.normal(0, 1.0, len(audio)).astype(np.float32)
            pcm = np.clip(np.round(audio), -32768, 32767).astype(np.int16)
        path = os.path.join(wav_dir, f"{spec['utt']}.wav")
        sf.write(path, pcm, SAMPLE_RATE, subtype="PCM_16")
        rec = {"utt": spec["utt"], "path": path, "seconds": len(pcm) / SAMPLE_RATE}
        if spec.get("pron") and sp is not None:
            rec["ipa"], rec["phones"] = sp.ipa, sp.phones
        records.append(rec)
    return records


# ----------------------------------------------------------------------------- a part

def _chunks(specs: list[dict], size: int) -> list[list[dict]]:
    """Chunks of about ``size`` specs, one voice's festival utterances kept together."""
    def order(s):
        src = s["source"]
        return (src["kind"], tuple(src.get("voice", ())), s["utt"])
    ordered = sorted(specs, key=order)
    return [ordered[i:i + size] for i in range(0, len(ordered), size)]


class Renderer:
    """Renders parts in ``jobs`` processes (started on first need, kept for every part)."""

    def __init__(self, cache: str, banks: dict, jobs: int = 2, fsdd_root: str | None = None,
                 log=print, chunk: int = 16):
        self.cache, self.banks, self.jobs, self.fsdd_root = cache, banks, jobs, fsdd_root
        self.log, self.chunk = log, chunk
        self._pool = None
        self._env: dict[str, str | None] = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        """Stop the processes."""
        if self._pool is not None:
            self._pool.close()
            self._pool.join()
            self._pool = None
            for var, value in self._env.items():
                if value is None:
                    os.environ.pop(var, None)
                else:
                    os.environ[var] = value

    def _map(self, tasks):
        if self.jobs <= 1:
            if not _ctx:
                _init_worker(self.banks, self.fsdd_root)
            return map(render_chunk, tasks)
        if self._pool is None:
            # one BLAS/Numba thread per process: the processes already fill the cores
            for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS",
                        "MKL_NUM_THREADS"):
                self._env[var] = os.environ.get(var)
                os.environ[var] = "1"
            self._pool = mp.get_context("spawn").Pool(
                self.jobs, initializer=_init_worker, initargs=(self.banks, self.fsdd_root))
        return self._pool.imap_unordered(render_chunk, tasks)

    def part(self, name: str, specs: list[dict]) -> str:
        """Make (or reuse) the cached part ``NAME-KEY`` for ``specs``; returns its folder."""
        banks = self.banks
        key = spec_key(name, specs, len(banks["rirs"]), len(banks["babble"]),
                       [round(float(np.sum(np.abs(h))), 3) for h in banks["rirs"]])
        folder = os.path.join(self.cache, f"{name}-{key}")
        if os.path.exists(os.path.join(folder, "done")):
            self.log(f"{name}: {len(specs)} utterances from the cache ({folder})")
            return folder
        t0 = time.time()
        # a folder of this process's own: two runs making the same part at once (two folds
        # started together) do not write into each other's; the first to finish wins
        tmp = f"{folder}.tmp{os.getpid()}"
        if os.path.exists(tmp):
            shutil.rmtree(tmp)
        os.makedirs(os.path.join(tmp, "wav"))
        tasks = [(os.path.join(tmp, "wav"), c) for c in _chunks(specs, self.chunk)]
        records = []
        for i, recs in enumerate(self._map(tasks), 1):
            records += recs
            if i % max(1, len(tasks) // 4) == 0 and i < len(tasks):
                self.log(f"{name}: {len(records)}/{len(specs)} utterances "
                         f"({time.time() - t0:.0f} s)")
        _write_part(name, specs, records, tmp, os.path.join(folder, "wav"), time.time() - t0)
        if os.path.exists(os.path.join(folder, "done")):
            shutil.rmtree(tmp)  # another run finished it first
        else:
            if os.path.exists(folder):
                shutil.rmtree(folder, ignore_errors=True)
            try:
                os.rename(tmp, folder)
            except OSError:
                if not os.path.exists(os.path.join(folder, "done")):
                    raise
                shutil.rmtree(tmp)
        self.log(f"{name}: made {len(specs)} utterances in {time.time() - t0:.0f} s ({folder})")
        return folder


def _write_part(name, specs, records, tmp, final_wav, seconds) -> None:
    failed = [r for r in records if "error" in r]
    for r in failed:
        print(f"warning: {name}: utterance {r['utt']}: {r['error']}; left out", file=sys.stderr)
    if len(failed) > 0.05 * len(specs):
        raise RuntimeError(f"{name}: {len(failed)} of {len(specs)} utterances failed")
    by_utt = {s["utt"]: s for s in specs}
    ok = sorted((r for r in records if "error" not in r), key=lambda r: r["utt"])
    tables = {
        "wav.scp": [f"{r['utt']} {os.path.join(final_wav, os.path.basename(r['path']))}"
                    for r in ok],
        "text": [f"{r['utt']} {' '.join(by_utt[r['utt']]['words'])}" for r in ok],
        "utt2spk": [f"{r['utt']} {by_utt[r['utt']]['spk']}" for r in ok],
        "utt2dur": [f"{r['utt']} {r['seconds']:.3f}" for r in ok],
    }
    spk2utt: dict[str, list[str]] = {}
    for r in ok:
        spk2utt.setdefault(by_utt[r["utt"]]["spk"], []).append(r["utt"])
    tables["spk2utt"] = [f"{s} {' '.join(u)}" for s, u in sorted(spk2utt.items())]
    if any(r.get("ipa") for r in ok):
        tables["text.ipa"] = [f"{r['utt']} {r['ipa']}" for r in ok if r.get("ipa")]
    if any(r.get("phones") for r in ok):
        tables["text.phones"] = [f"{r['utt']} {' '.join(r['phones'])}" for r in ok
                                 if r.get("phones")]
    for fname, lines in tables.items():
        with open(os.path.join(tmp, fname), "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in sorted(lines, key=lambda x: x.encode())))
    with open(os.path.join(tmp, "specs.json"), "w", encoding="utf-8") as f:
        json.dump(specs, f)
    with open(os.path.join(tmp, "done"), "w", encoding="utf-8") as f:
        f.write(f"{len(ok)} utterances in {seconds:.1f} s\n")


def copy_part(folder: str, dest: str, extra: dict[str, list[str]] | None = None) -> int:
    """Write the Kaldi files of the cached part ``folder`` into ``dest`` (wav.scp keeps its
    absolute paths into the cache); ``extra`` adds files (name -> lines). Returns #utts."""
    os.makedirs(dest, exist_ok=True)
    for fname in KALDI_FILES:
        src = os.path.join(folder, fname)
        target = os.path.join(dest, fname)
        if os.path.exists(src):
            shutil.copyfile(src, target)
        elif os.path.exists(target):
            os.unlink(target)
    for fname, lines in (extra or {}).items():
        with open(os.path.join(dest, fname), "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
    with open(os.path.join(folder, "utt2spk"), encoding="utf-8") as f:
        return sum(1 for _ in f)
