"""From a clean voice to a recording: speaker perturbation and a random channel, drawn per
speaker (what stays the same across one person's recordings: voice, room, microphone, line)
and per utterance (noise, level, silences), all through ``asrkit.features``.

Speaker (``draw_speaker``): pitch shift (+-4 semitones), formant shift (vocal-tract length,
0.86-1.18: a shorter tract moves every formant up; done in the waveform, so every front end
sees it, the data directory stays plain audio, and speaker CMVN sees the voice it will meet),
tempo (0.85-1.2) and occasionally speed (0.9/1.1); per utterance a little jitter on each.

Channel (``draw_channel``): a simulated room (half of the speakers; image method, see
``asrkit.features.room_impulse_response``), microphone colouring (``random_mic_eq``), a
telephone line (8 kHz, 300-3400 Hz, G.711/GSM), plain 8 kHz band-limiting, or a lossy codec
(MP3/Opus/Vorbis); noise (white/pink/brown/synthetic babble made of TTS voices, 0-30 dB SNR)
under the whole utterance, sometimes a burst of noise before or after the speech; recording
level from -42 to -16 dBFS RMS (peaks kept under full scale), rarely overloaded and clipped;
silences at both ends.
"""

from __future__ import annotations

import numpy as np

from asrkit.features import (
    add_noise,
    clip,
    codec_roundtrip,
    formant_shift,
    make_noise,
    pitch_shift,
    random_mic_eq,
    resample,
    reverberate,
    room_impulse_response,
    scale_to_level,
    speed_perturb,
    telephone_channel,
    tempo_perturb,
)

SAMPLE_RATE = 16000
COLOURED_NOISES = ["white", "pink", "brown"]
# babble is spoken by the training voices reading these (no digits in them: background talk
# must not put digits into the audio that the transcript lacks)
BABBLE_SENTENCES = [
    "the birch canoe slid on the smooth planks", "glue the sheet to the dark blue background",
    "it is easy to tell the depth of a well", "these days a chicken leg is a rare dish",
    "rice is often served in round bowls", "the juice of lemons makes fine punch",
    "the box was thrown beside the parked truck", "the hogs were fed chopped corn and garbage",
    "a large size in stockings is hard to sell", "the boy was there when the sun rose",
    "a rod is used to catch pink salmon", "the source of the huge river is the clear spring",
    "kick the ball straight and follow through", "help the woman get back to her feet",
    "a pot of tea helps to pass the evening", "smoky fires lack flame and heat",
    "the soft cushion broke the man's fall", "the salt breeze came across from the sea",
    "the girl at the booth sold fifty bonds", "the small pup gnawed a hole in the sock",
]


def draw_speaker(rng: np.random.Generator, strength: float = 1.0) -> dict:
    """One virtual speaker's voice change: ``{pitch: semitones, formant: alpha, tempo, speed}``
    (``strength`` 0 leaves the voice as it is)."""
    s = float(strength)
    return {
        "pitch": float(rng.uniform(-4, 4) * s) if rng.random() < 0.7 else 0.0,
        "formant": float(np.exp(rng.uniform(np.log(0.86), np.log(1.18)) * s))
        if rng.random() < 0.7 else 1.0,
        "tempo": float(np.exp(rng.uniform(np.log(0.85), np.log(1.2)) * s))
        if rng.random() < 0.5 else 1.0,
        "speed": float(rng.choice([0.9, 1.1])) if rng.random() < 0.15 * s else 1.0,
    }


def draw_channel(rng: np.random.Generator, rir_bank: list[np.ndarray]) -> dict:
    """One speaker's recording set-up: room (an index into ``rir_bank`` or None), microphone
    colouring seed (or None), and the line: ``None``, ``("telephone", codec)``,
    ``("narrowband",)`` (8 kHz sampling) or ``("codec", name, quality)``."""
    room = int(rng.integers(len(rir_bank))) if rir_bank and rng.random() < 0.5 else None
    mic = int(rng.integers(2**31)) if rng.random() < 0.6 else None
    u = rng.random()
    if u < 0.12:
        line = ("telephone", str(rng.choice(["ulaw", "alaw", "gsm", "none"])))
    elif u < 0.27:
        line = ("narrowband",)
    elif u < 0.40:
        line = ("codec", str(rng.choice(["mp3", "opus", "vorbis"])), float(rng.uniform(0, 1)))
    else:
        line = None
    return {"room": room, "mic": mic, "line": line}


def perturb_voice(audio: np.ndarray, speaker: dict, rng: np.random.Generator,
                  jitter: float = 1.0) -> np.ndarray:
    """Apply ``draw_speaker``'s change, with per-utterance jitter, to 16 kHz ``audio``."""
    semitones = speaker["pitch"] + rng.uniform(-0.5, 0.5) * jitter
    alpha = speaker["formant"] * np.exp(rng.uniform(-0.02, 0.02) * jitter)
    tempo = speaker["tempo"] * np.exp(rng.uniform(-0.08, 0.08) * jitter)
    if abs(semitones) > 0.05:
        audio = pitch_shift(audio, SAMPLE_RATE, semitones)
    if abs(alpha - 1.0) > 0.005:
        audio = formant_shift(audio, SAMPLE_RATE, alpha)
    if abs(tempo - 1.0) > 0.01:
        audio = tempo_perturb(audio, SAMPLE_RATE, tempo)
    if speaker["speed"] != 1.0:
        audio = speed_perturb(audio, SAMPLE_RATE, speaker["speed"])
    return audio


def make_babble(voices_audio: list[np.ndarray], num_samples: int,
                rng: np.random.Generator) -> np.ndarray:
    """3-7 talkers from ``voices_audio`` (16 kHz TTS sentences) overlapping at random offsets
    and levels; float32 ``[num_samples]``. Synthetic ``make_noise('babble')`` without them."""
    if not voices_audio:
        return make_noise("babble", num_samples, SAMPLE_RATE, rng=rng)
    mix = np.zeros(num_samples, np.float64)
    for _ in range(int(rng.integers(3, 8))):
        talk = voices_audio[int(rng.integers(len(voices_audio)))].astype(np.float64)
        talk = talk / (np.sqrt(np.mean(talk ** 2)) + 1e-9) * 10 ** (rng.uniform(-6, 0) / 20)
        start = int(rng.integers(len(talk)))
        mix += talk[(start + np.arange(num_samples)) % len(talk)]
    return mix.astype(np.float32)


def noise_of(kind: str, n: int, rng, babble: list[np.ndarray]) -> np.ndarray:
    """``n`` samples of noise ``kind`` (a coloured noise or ``babble``)."""
    if kind == "babble":
        return make_babble(babble, n, rng)
    return make_noise(kind, n, SAMPLE_RATE, rng=rng)


def record(audio: np.ndarray, channel: dict, rng: np.random.Generator,
           rir_bank: list[np.ndarray], babble: list[np.ndarray], pad: bool = True) -> np.ndarray:
    """Put 16 kHz speech ``audio`` (int16 scale) through ``channel`` with per-utterance noise,
    level and silences; returns int16 ``[m]``."""
    sr = SAMPLE_RATE
    if pad:
        lead, trail = (int(sr * rng.uniform(0.05, 0.6)) for _ in range(2))
        audio = np.concatenate([np.zeros(lead, np.float32), audio, np.zeros(trail, np.float32)])
    else:
        lead = trail = 0
    if channel["room"] is not None:
        audio = reverberate(audio, sr, 0, rir=rir_bank[channel["room"]])
    if rng.random() < 0.75 and len(audio):
        kind = str(rng.choice(COLOURED_NOISES + ["babble", "babble"]))
        audio = add_noise(audio, noise_of(kind, len(audio), rng, babble),
                          snr_db=float(rng.uniform(0, 30)), rng=rng)
    if rng.random() < 0.2 and max(lead, trail) > sr // 10:
        # a burst before or after the speech (a door, a breath, a cough's worth of noise)
        where = lead if lead > trail else trail
        n = int(rng.integers(sr // 20, min(where, sr * 3 // 10) + 1))
        start = int(rng.integers(0, lead - n + 1)) if lead > trail else \
            len(audio) - trail + int(rng.integers(0, trail - n + 1))
        level = np.sqrt(np.mean(audio.astype(np.float64) ** 2)) * 10 ** (rng.uniform(-25, 0) / 20)
        burst = noise_of(str(rng.choice(COLOURED_NOISES)), n, rng, babble) * np.hanning(n)
        audio = audio.copy()
        audio[start:start + n] += (burst * level).astype(np.float32)
    if channel["mic"] is not None:
        audio = random_mic_eq(audio, sr, seed=channel["mic"])
    audio = scale_to_level(audio, float(rng.uniform(-42, -16)))
    peak = float(np.abs(audio).max()) if len(audio) else 0.0
    if peak > 32767:  # a recorder's limiter keeps loud speech under full scale
        audio = audio * np.float32(rng.uniform(0.7, 0.99) * 32767 / peak)
    line = channel["line"]
    if line is not None and line[0] == "telephone":
        audio = telephone_channel(audio, sr, codec=None if line[1] == "none" else line[1])
    elif line is not None and line[0] == "narrowband":
        audio = resample(resample(audio, sr, 8000), 8000, sr)
    elif line is not None and line[0] == "codec":
        audio = codec_roundtrip(audio, sr, line[1], quality=line[2])
    if rng.random() < 0.04:  # overload: gain up until the top 0.1-2% of samples clip
        limit = np.quantile(np.abs(audio), 1 - rng.uniform(0.001, 0.02))
        if limit > 0:
            audio = clip(audio * (32767 / limit), 32767)
    audio = audio + rng.normal(0, rng.uniform(0.5, 3.0), size=len(audio))  # converter noise
    return np.clip(np.round(audio), -32768, 32767).astype(np.int16)


def frame_power(audio: np.ndarray, frame: int) -> np.ndarray:
    """Mean square of each whole ``frame``-sample frame of ``audio`` ``[n]``: float64
    ``[n // frame]``."""
    n = len(audio) // frame
    return np.mean(audio[:n * frame].astype(np.float64).reshape(n, frame) ** 2, axis=1)


def trim_to_speech(audio: np.ndarray, sr: int, rng: np.random.Generator,
                   share: float) -> np.ndarray:
    """Cut each end of ``audio`` (float ``[n]`` at ``sr``) with probability ``share`` where its
    10 ms frames first (last) rise above a level drawn from 15-35 dB under the loudest one,
    keeping 0-10 ms more: an isolated-word corpus's silence trimming, which takes quiet
    consonants (a word's /s/, /f/, /th/) with it. Returns a view of ``audio``."""
    frame = sr // 100
    cut = rng.random(2) < share
    if len(audio) < 3 * frame or not cut.any():
        return audio
    energy = frame_power(audio, frame)
    bounds = [0, len(audio)]
    for end in np.flatnonzero(cut):  # start, then end: the draws' order fixes cached renders
        loud = np.flatnonzero(energy > energy.max() * 10 ** (-rng.uniform(15, 35) / 10))
        keep = int(rng.uniform(0, 0.01) * sr)
        bounds[end] = max(int(loud[0]) * frame - keep, 0) if end == 0 else \
            min((int(loud[-1]) + 1) * frame + keep, len(audio))
    return audio[bounds[0]:max(bounds[1], bounds[0] + frame)]


def rir_bank(count: int, seed: int) -> list[np.ndarray]:
    """``count`` simulated rooms (RT60 0.15-0.8 s), reused across speakers."""
    rng = np.random.default_rng(seed)
    return [room_impulse_response(SAMPLE_RATE, rng=rng, max_order=30) for _ in range(count)]
