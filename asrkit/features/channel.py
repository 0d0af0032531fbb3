"""Channel simulation for data augmentation: rooms, microphones, telephone lines and codecs.

What lies between a talker and a recogniser, each a function over a 1-D waveform (float32,
float64 or int16; values as given, so int16-scale input stays at int16 scale) returning float32:

- ``room_impulse_response``: a shoebox room by the image method (``pyroomacoustics``, an
  optional dependency: ``pip install pyroomacoustics``; without it a warning names the package
  and the exponential-decay ``synthetic_rir`` is used instead); apply it with ``reverberate``;
- ``biquad_coefficients`` / ``biquad_filter``: second-order sections of the Audio EQ Cookbook
  (R. Bristow-Johnson), and ``random_mic_eq``: a random microphone/loudspeaker colouring made of
  them (high-pass, two shelves, peaks);
- ``telephone_channel``: a 300-3400 Hz telephone band, 8 kHz sampling and G.711 mu-law or
  A-law or GSM 06.10 coding (libsndfile through ``soundfile``);
- ``codec_roundtrip``: lossy coding and decoding with MP3, Opus or Vorbis (libsndfile >= 1.1);
- ``scale_to_level`` and ``clip``: recording level and overload.

Codecs see samples relative to ``full_scale`` (default 32768, the int16 scale of the rest of
``asrkit.features``); what exceeds it is clipped as a real encoder input would be. Everything
random takes ``seed=`` or ``rng=`` and is reproducible.
"""

from __future__ import annotations

import io
import math
import warnings

import numpy as np
from numba import njit

from asrkit.features.augment import make_rng
from asrkit.features.perturb import _as_waveform, _rate, power, resample, synthetic_rir

SPEED_OF_SOUND = 343.0  # m/s
FULL_SCALE = 32768.0  # int16 scale
TELEPHONE_RATE = 8000
# container format and libsndfile subtype of each codec, and the rates it accepts
CODECS = {
    "mp3": ("MP3", "MPEG_LAYER_III", (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100,
                                      48000)),
    "opus": ("OGG", "OPUS", (8000, 12000, 16000, 24000, 48000)),
    "vorbis": ("OGG", "VORBIS", None),
    "ulaw": ("WAV", "ULAW", None),
    "alaw": ("WAV", "ALAW", None),
    "gsm": ("WAV", "GSM610", (8000,)),
}


# ----------------------------------------------------------------------------- rooms

def _draw_room(gen, rt60, room, source, mic):
    """Room size (m), source and microphone positions: drawn where not given."""
    dims = np.array(room if room is not None else [gen.uniform(3.0, 10.0), gen.uniform(3.0, 8.0),
                                                    gen.uniform(2.4, 4.0)], dtype=np.float64)
    if dims.shape != (3,) or np.any(dims <= 1.0):
        raise ValueError(f"room must be 3 sizes in metres, each over 1 m, got {room!r}")

    def inside():
        return np.array([gen.uniform(0.5, d - 0.5) for d in dims[:2]]
                        + [gen.uniform(0.9, min(1.9, dims[2] - 0.3))])

    src = np.array(source, dtype=np.float64) if source is not None else inside()
    if mic is not None:
        mic_pos = np.array(mic, dtype=np.float64)
    else:
        for _ in range(100):  # at least 0.5 m from the talker
            mic_pos = inside()
            if np.linalg.norm(mic_pos - src) >= 0.5:
                break
    for name, p in (("source", src), ("mic", mic_pos)):
        if p.shape != (3,) or np.any(p <= 0) or np.any(p >= dims):
            raise ValueError(f"{name} position {p.tolist()} is not inside the room "
                             f"{dims.tolist()}")
    rt = float(rt60) if rt60 is not None else float(gen.uniform(0.15, 0.8))
    if not rt > 0:
        raise ValueError(f"rt60 must be positive seconds, got {rt60}")
    return dims, src, mic_pos, rt


def _pyroomacoustics():
    try:
        import pyroomacoustics
    except ImportError:
        return None
    return pyroomacoustics


def room_impulse_response(sample_rate: int, rt60: float | None = None, room=None, source=None,
                          mic=None, seed=None, rng=None, max_order: int = 40,
                          backend: str = "auto") -> np.ndarray:
    """Impulse response of a random shoebox room: float32 ``[m]``, unit energy, the direct
    path at sample 0 (the propagation delay is removed, so speech does not move in time).

    ``room`` (3 sizes in m; default 3-10 x 3-8 x 2.4-4 m), ``source`` and ``mic`` positions
    (default: anywhere 0.5 m from the walls, 0.9-1.9 m high, 0.5 m apart or more) and ``rt60``
    (default 0.15-0.8 s) are drawn where not given. The walls' energy absorption comes from
    Sabine's formula for ``rt60`` (``pyroomacoustics.inverse_sabine``); images are computed up
    to order ``max_order`` (higher orders cost time and add little past ~40), with air
    absorption. ``backend``: ``"pyroomacoustics"``, ``"synthetic"`` (``synthetic_rir``:
    an exponentially decaying noise tail, no room geometry) or ``"auto"`` (the first when it
    is installed, else the second with a warning).
    """
    sr = _rate(sample_rate, "sample_rate")
    gen = make_rng(seed, rng)
    if backend not in ("auto", "pyroomacoustics", "synthetic"):
        raise ValueError(f"unknown backend {backend!r}; expected 'auto', 'pyroomacoustics' or "
                         "'synthetic'")
    dims, src, mic_pos, rt = _draw_room(gen, rt60, room, source, mic)
    pra = _pyroomacoustics() if backend != "synthetic" else None
    if pra is None:
        if backend == "pyroomacoustics":
            raise ImportError("room_impulse_response(backend='pyroomacoustics') needs the "
                              "pyroomacoustics package: pip install pyroomacoustics")
        if backend == "auto":
            warnings.warn("pyroomacoustics is not installed (pip install pyroomacoustics): "
                          "using synthetic_rir's exponential decay instead of a simulated room",
                          RuntimeWarning, stacklevel=2)
        return synthetic_rir(sr, rt, rng=gen,
                             direct_to_reverberant_db=float(gen.uniform(-5.0, 10.0)))
    try:
        absorption, order = pra.inverse_sabine(rt, dims.tolist())
    except ValueError:  # the room is too large for so short a reverberation: absorb everything
        absorption, order = 0.99, 1
    shoebox = pra.ShoeBox(dims.tolist(), fs=sr, materials=pra.Material(float(absorption)),
                          max_order=int(min(order, max_order)), air_absorption=True)
    shoebox.add_source(src.tolist())
    shoebox.add_microphone(mic_pos.tolist())
    shoebox.compute_rir()
    h = np.asarray(shoebox.rir[0][0], dtype=np.float64)
    # pyroomacoustics delays the direct path by distance / c plus half its fractional-delay
    # filter; start a few samples before that path's peak
    direct = int(round(np.linalg.norm(mic_pos - src) / SPEED_OF_SOUND * sr))
    search = slice(max(0, direct - 2), direct + 200)
    peak = search.start + int(np.argmax(np.abs(h[search])))
    h = h[max(0, peak - 4):]
    return (h / math.sqrt(np.sum(h * h))).astype(np.float32)


# ----------------------------------------------------------------------------- filters

def biquad_coefficients(kind: str, freq: float, sample_rate: int, q: float = 1 / math.sqrt(2),
                        gain_db: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """One second-order section of the Audio EQ Cookbook: ``(b float64 [3], a float64 [3])``
    with ``a[0] == 1``.

    ``kind``: ``lowpass``, ``highpass``, ``bandpass`` (0 dB peak), ``peaking``, ``lowshelf``,
    ``highshelf``. ``freq`` Hz (0 < freq < Nyquist) is the corner, centre or shelf midpoint;
    ``q`` the quality factor (shelves: the cookbook's Q, 1/sqrt(2) is the steepest without
    overshoot); ``gain_db`` the gain of peaks and shelves. The bilinear transform is prewarped
    at ``freq``, so a ``lowpass``/``highpass`` with Q 1/sqrt(2) is the 2nd-order Butterworth.
    """
    sr = _rate(sample_rate, "sample_rate")
    if not 0 < freq < sr / 2:
        raise ValueError(f"freq must be in (0, {sr / 2:g}) Hz, got {freq}")
    if not q > 0:
        raise ValueError(f"q must be positive, got {q}")
    w0 = 2.0 * math.pi * freq / sr
    cw, sw = math.cos(w0), math.sin(w0)
    alpha = sw / (2.0 * q)
    big_a = 10.0 ** (gain_db / 40.0)
    if kind == "lowpass":
        b = [(1 - cw) / 2, 1 - cw, (1 - cw) / 2]
        a = [1 + alpha, -2 * cw, 1 - alpha]
    elif kind == "highpass":
        b = [(1 + cw) / 2, -(1 + cw), (1 + cw) / 2]
        a = [1 + alpha, -2 * cw, 1 - alpha]
    elif kind == "bandpass":
        b = [alpha, 0.0, -alpha]
        a = [1 + alpha, -2 * cw, 1 - alpha]
    elif kind == "peaking":
        b = [1 + alpha * big_a, -2 * cw, 1 - alpha * big_a]
        a = [1 + alpha / big_a, -2 * cw, 1 - alpha / big_a]
    elif kind in ("lowshelf", "highshelf"):
        s = 2.0 * math.sqrt(big_a) * alpha
        sign = 1.0 if kind == "lowshelf" else -1.0
        b = [big_a * ((big_a + 1) - sign * (big_a - 1) * cw + s),
             sign * 2 * big_a * ((big_a - 1) - sign * (big_a + 1) * cw),
             big_a * ((big_a + 1) - sign * (big_a - 1) * cw - s)]
        a = [(big_a + 1) + sign * (big_a - 1) * cw + s,
             -sign * 2 * ((big_a - 1) + sign * (big_a + 1) * cw),
             (big_a + 1) + sign * (big_a - 1) * cw - s]
    else:
        raise ValueError(f"unknown biquad kind {kind!r}; expected lowpass, highpass, bandpass, "
                         "peaking, lowshelf or highshelf")
    b = np.array(b, dtype=np.float64)
    a = np.array(a, dtype=np.float64)
    return b / a[0], a / a[0]


@njit(cache=True)
def _biquad(x, b, a):  # pragma: no cover - compiled
    y = np.empty(x.shape[0], np.float32)
    z1 = 0.0
    z2 = 0.0
    for n in range(x.shape[0]):  # transposed direct form II, state in float64
        xn = float(x[n])
        yn = b[0] * xn + z1
        z1 = b[1] * xn - a[1] * yn + z2
        z2 = b[2] * xn - a[2] * yn
        y[n] = yn
    return y


def biquad_filter(waveform, b, a) -> np.ndarray:
    """Filter a 1-D waveform ``[n]`` by one biquad (``b``, ``a`` of length 3, ``a[0]`` 1, as
    ``biquad_coefficients`` gives them): ``scipy.signal.lfilter(b, a, x)`` from rest.
    Returns float32 ``[n]``."""
    x = _as_waveform(waveform, ndim=1)
    b = np.asarray(b, dtype=np.float64)
    a = np.asarray(a, dtype=np.float64)
    if b.shape != (3,) or a.shape != (3,) or a[0] != 1.0:
        raise ValueError(f"expected b and a of length 3 with a[0] == 1, got b={b}, a={a}")
    return _biquad(np.ascontiguousarray(x), b, a)


def random_mic_eq(waveform, sample_rate: int, seed=None, rng=None,
                  max_gain_db: float = 10.0) -> np.ndarray:
    """Colour a 1-D waveform as a random microphone and preamp would: a high-pass at 40-250 Hz
    (half of the time two, a steeper roll-off), a low shelf at 100-400 Hz and a high shelf at
    2-6 kHz of +-``max_gain_db``, and 1-3 peaks/notches at 200-5000 Hz (Q 0.7-4, up to
    +-0.8 ``max_gain_db``). The output has the input's energy. float32 ``[n]``.
    """
    x = _as_waveform(waveform, ndim=1)
    sr = _rate(sample_rate, "sample_rate")
    gen = make_rng(seed, rng)
    top = 0.45 * sr
    sections = [biquad_coefficients("highpass", min(gen.uniform(40, 250), top), sr)]
    if gen.random() < 0.5:
        sections.append(sections[0])
    sections.append(biquad_coefficients("lowshelf", min(gen.uniform(100, 400), top), sr,
                                        gain_db=gen.uniform(-max_gain_db, max_gain_db)))
    sections.append(biquad_coefficients("highshelf", min(gen.uniform(2000, 6000), top), sr,
                                        gain_db=gen.uniform(-max_gain_db, max_gain_db)))
    for _ in range(int(gen.integers(1, 4))):
        sections.append(biquad_coefficients(
            "peaking", min(math.exp(gen.uniform(math.log(200), math.log(5000))), top), sr,
            q=gen.uniform(0.7, 4.0), gain_db=gen.uniform(-0.8, 0.8) * max_gain_db))
    y = x
    for b, a in sections:
        y = biquad_filter(y, b, a)
    p_in, p_out = power(x), power(y)
    return y * np.float32(math.sqrt(p_in / p_out)) if p_out > 0 else y


# ----------------------------------------------------------------------------- codecs

def codec_roundtrip(waveform, sample_rate: int, codec: str, quality: float = 0.5,
                    full_scale: float = FULL_SCALE) -> np.ndarray:
    """Encode a 1-D waveform with ``codec`` and decode it again (libsndfile via soundfile, in
    memory): float32 ``[n]`` at the same rate and scale, aligned with the input.

    ``codec``: ``mp3``, ``opus``, ``vorbis`` (``quality`` 0 best .. 1 smallest, libsndfile's
    compression level), ``ulaw``, ``alaw`` (G.711) or ``gsm`` (GSM 06.10, 8 kHz only). Samples
    are divided by ``full_scale`` for the codec and clipped to +-1 there.
    """
    x = _as_waveform(waveform, ndim=1)
    sr = _rate(sample_rate, "sample_rate")
    if codec not in CODECS:
        raise ValueError(f"unknown codec {codec!r}; expected one of {', '.join(CODECS)}")
    if not 0.0 <= quality <= 1.0:
        raise ValueError(f"quality must be in [0, 1], got {quality}")
    fmt, subtype, rates = CODECS[codec]
    if rates is not None and sr not in rates:
        raise ValueError(f"codec {codec} does not take {sr} Hz audio (rates: "
                         f"{', '.join(map(str, rates))})")
    import soundfile as sf

    if len(x) == 0:
        return x.copy()
    buf = io.BytesIO()
    level = {"compression_level": float(quality)} if fmt != "WAV" else {}
    try:
        sf.write(buf, np.clip(x / full_scale, -1.0, 1.0), sr, format=fmt, subtype=subtype,
                 **level)
    except (sf.LibsndfileError, TypeError, ValueError) as e:
        raise ValueError(f"codec {codec}: libsndfile {sf.__libsndfile_version__} cannot "
                         f"encode it here: {e}") from None
    buf.seek(0)
    y, _ = sf.read(buf, dtype="float32")
    if y.ndim > 1:
        y = y[:, 0]
    if len(y) < len(x):
        y = np.concatenate([y, np.zeros(len(x) - len(y), np.float32)])
    return (y[:len(x)] * np.float32(full_scale)).astype(np.float32)


def telephone_channel(waveform, sample_rate: int, codec: str | None = "ulaw",
                      low: float = 300.0, high: float = 3400.0, out_rate: int | None = None,
                      full_scale: float = FULL_SCALE) -> np.ndarray:
    """A telephone line: band-pass ``low``-``high`` Hz (two Butterworth biquads each side),
    resampling to 8 kHz and ``codec`` (``ulaw``, ``alaw``, ``gsm`` or None) coding.

    Returns float32 at ``out_rate`` (default: the input's rate, resampled back up, so the
    audio stays band-limited but keeps its rate; give 8000 for narrow-band files).
    """
    x = _as_waveform(waveform, ndim=1)
    sr = _rate(sample_rate, "sample_rate")
    out = sr if out_rate is None else _rate(out_rate, "out_rate")
    if not 0 < low < high < TELEPHONE_RATE / 2:
        raise ValueError(f"need 0 < low < high < 4000 Hz, got low={low}, high={high}")
    narrow = resample(x, sr, TELEPHONE_RATE)
    for kind, freq in (("highpass", low), ("highpass", low), ("lowpass", high),
                       ("lowpass", high)):
        narrow = biquad_filter(narrow, *biquad_coefficients(kind, freq, TELEPHONE_RATE))
    if codec is not None:
        if codec not in ("ulaw", "alaw", "gsm"):
            raise ValueError(f"telephone codec must be ulaw, alaw, gsm or None, got {codec!r}")
        narrow = codec_roundtrip(narrow, TELEPHONE_RATE, codec, full_scale=full_scale)
    return resample(narrow, TELEPHONE_RATE, out)


# ----------------------------------------------------------------------------- levels

def scale_to_level(waveform, rms_dbfs: float, full_scale: float = FULL_SCALE) -> np.ndarray:
    """Scale a waveform so that its RMS is ``rms_dbfs`` dB relative to ``full_scale``
    (-20 dBFS: RMS 3277 at int16 scale). A silent waveform is returned unchanged. float32."""
    x = _as_waveform(waveform)
    p = power(x)
    if p == 0.0:
        return x.copy()
    target = full_scale * 10.0 ** (rms_dbfs / 20.0)
    return (x * np.float32(target / math.sqrt(p))).astype(np.float32)


def clip(waveform, limit: float = FULL_SCALE - 1) -> np.ndarray:
    """Hard clipping at +-``limit`` (an overloaded preamp or converter). float32."""
    if not limit > 0:
        raise ValueError(f"limit must be positive, got {limit}")
    return np.clip(_as_waveform(waveform), -limit, limit).astype(np.float32)
