"""Waveform resampling and data augmentation: speed and volume perturbation, additive noise,
synthetic noises and synthetic reverberation.

Everything takes a waveform as float32, float64 or int16 (values used as given: int16 input
keeps its int16 scale, as the Kaldi feature functions expect) and returns float32. Everything
random takes ``seed=`` (int) or ``rng=`` (a numpy Generator) and is reproducible.

``resample`` is band-limited windowed-sinc interpolation with exactly the filter of torchaudio's
``torchaudio.functional.resample`` (``sinc_interp_hann`` or ``sinc_interp_kaiser``; the same
design as Kaldi's ``LinearResample``): the rates are reduced by their gcd, the filter is split
into ``new`` polyphase branches, and a Numba loop applies only each branch's non-zero taps.
The filter is computed in float64 (torchaudio computes it in the waveform's dtype), so results
agree with torchaudio to float32 rounding.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np
from numba import njit

from asrkit.features.augment import make_rng

KAISER_BETA = 14.769656459379492  # torchaudio's default beta for sinc_interp_kaiser
LN_1000 = 3.0 * math.log(10.0)  # an amplitude falls 60 dB (x 1/1000) over one RT60


def _as_waveform(waveform, what: str = "waveform", ndim: int | None = None) -> np.ndarray:
    x = np.asarray(waveform)
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
        raise ValueError(f"{what}: expected float or integer samples, got dtype {x.dtype}")
    if ndim is not None and x.ndim != ndim:
        raise ValueError(f"{what}: expected a {ndim}-D waveform, got shape {x.shape}")
    if x.ndim == 0:
        raise ValueError(f"{what}: expected samples along the last axis, got a scalar")
    return x.astype(np.float32, copy=False)


def _rate(value, name: str) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"{name} must be a positive integer number of Hz, got {value!r}")
    return int(value)


def sinc_resample_kernel(orig_freq: int, new_freq: int, lowpass_filter_width: int = 6,
                         rolloff: float = 0.99, resampling_method: str = "sinc_interp_hann",
                         beta: float | None = None) -> tuple[np.ndarray, int]:
    """Return torchaudio's polyphase filter bank ``(kernel float64 [new, 2*width + orig], width)``.

    ``orig_freq`` and ``new_freq`` must already be divided by their gcd. Branch ``j`` computes
    output sample ``i*new + j`` from input samples ``i*orig - width ... i*orig + width + orig - 1``.
    The low-pass cut-off is ``rolloff * min(orig, new) / 2`` and the sinc is cut to
    ``lowpass_filter_width`` zero crossings each side by a Hann (or Kaiser) window.
    """
    if lowpass_filter_width <= 0:
        raise ValueError(f"lowpass_filter_width must be positive, got {lowpass_filter_width}")
    if not 0 < rolloff <= 1:
        raise ValueError(f"rolloff must be in (0, 1], got {rolloff}")
    base_freq = min(orig_freq, new_freq) * rolloff
    width = math.ceil(lowpass_filter_width * orig_freq / base_freq)
    idx = np.arange(-width, width + orig_freq, dtype=np.float64)[None, :] / orig_freq
    t = -np.arange(new_freq, dtype=np.float64)[:, None] / new_freq + idx
    t = t * base_freq
    # torchaudio clamps t here, leaving ~1e-50 values outside the support; those are exact zeros
    # here so that the polyphase loop can skip them.
    support = np.abs(t) < lowpass_filter_width
    t = np.clip(t, -lowpass_filter_width, lowpass_filter_width)
    if resampling_method == "sinc_interp_hann":
        window = np.cos(t * math.pi / lowpass_filter_width / 2) ** 2
    elif resampling_method == "sinc_interp_kaiser":
        b = KAISER_BETA if beta is None else float(beta)
        window = np.i0(b * np.sqrt(1 - (t / lowpass_filter_width) ** 2)) / np.i0(b)
    else:
        raise ValueError(f"unknown resampling_method {resampling_method!r}; expected "
                         "'sinc_interp_hann' or 'sinc_interp_kaiser'")
    kernel = np.where(support, np.sinc(t) * window * (base_freq / orig_freq), 0.0)
    return kernel, width


def _compact_branches(kernel: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Trim each branch to its non-zero taps: ``(first int64 [new], taps float64 [new, K])``,
    ``first[j]`` being the offset of the first tap from input sample ``i*orig``."""
    new = kernel.shape[0]
    nz = kernel != 0
    lo = np.where(nz.any(1), nz.argmax(1), 0)
    hi = np.where(nz.any(1), kernel.shape[1] - nz[:, ::-1].argmax(1), 1)
    k = int((hi - lo).max())
    taps = np.zeros((new, k))
    for j in range(new):
        taps[j, :hi[j] - lo[j]] = kernel[j, lo[j]:hi[j]]
    return (lo - width).astype(np.int64), taps


@functools.lru_cache(maxsize=64)
def _branches(orig, new, lowpass_filter_width, rolloff, resampling_method, beta):
    """Cached compact filter bank for one rate pair (speed perturbation reuses a few)."""
    first, taps = _compact_branches(*sinc_resample_kernel(
        orig, new, lowpass_filter_width, rolloff, resampling_method, beta))
    first.flags.writeable = False
    taps.flags.writeable = False
    return first, taps


# Reassociation lets LLVM vectorise the tap reduction (about 3x; the sum stays in float64)
# without the no-NaN/no-inf assumptions of full fastmath, so NaN input still gives NaN.
@njit(cache=True, fastmath={"reassoc", "contract", "nsz"})
def _polyphase_resample(x, first, taps, orig, new, out_len):  # pragma: no cover - compiled
    channels, n = x.shape
    k_len = taps.shape[1]
    out = np.empty((channels, out_len), np.float32)
    num_blocks = -(-out_len // new)
    for c in range(channels):
        for i in range(num_blocks):  # block i: outputs i*new .. i*new+new-1
            for j in range(min(new, out_len - i * new)):
                start = i * orig + first[j]
                acc = 0.0
                if start >= 0 and start + k_len <= n:
                    for k in range(k_len):
                        acc += taps[j, k] * x[c, start + k]
                else:  # near the ends the input is zero-padded, as torchaudio pads it
                    for k in range(max(0, -start), min(k_len, n - start)):
                        acc += taps[j, k] * x[c, start + k]
                out[c, i * new + j] = acc
    return out


def resample(waveform, orig_freq: int, new_freq: int, lowpass_filter_width: int = 6,
             rolloff: float = 0.99, resampling_method: str = "sinc_interp_hann",
             beta: float | None = None) -> np.ndarray:
    """Resample ``waveform`` ``[..., n]`` from ``orig_freq`` to ``new_freq`` Hz along the last axis.

    Band-limited sinc interpolation as ``torchaudio.functional.resample`` with the same options
    (``lowpass_filter_width`` zero crossings, ``rolloff`` of the lower Nyquist frequency,
    ``resampling_method`` Hann or Kaiser window). Returns float32 ``[..., ceil(n * new / orig)]``
    (rates reduced by their gcd first, as torchaudio). Equal rates return a float32 copy.
    """
    x = _as_waveform(waveform)
    orig = _rate(orig_freq, "orig_freq")
    new = _rate(new_freq, "new_freq")
    if orig == new:
        return x.copy()
    g = math.gcd(orig, new)
    orig, new = orig // g, new // g
    first, taps = _branches(orig, new, lowpass_filter_width, float(rolloff), resampling_method,
                            None if beta is None else float(beta))
    n = x.shape[-1]
    out_len = -(-n * new // orig)
    if n == 0 or x.size == 0:
        return np.zeros(x.shape[:-1] + (out_len,), np.float32)
    flat = np.ascontiguousarray(x.reshape(-1, n))
    out = _polyphase_resample(flat, first, taps, orig, new, out_len)
    return out.reshape(x.shape[:-1] + (out_len,))


def speed_perturb(waveform, sample_rate: int, factor: float) -> np.ndarray:
    """Speed perturbation as sox's ``speed`` effect (Kaldi's and ESPnet's ``--speed-perturb``).

    The waveform ``[..., n]`` is taken to be at ``round(sample_rate * factor)`` Hz and resampled
    to ``sample_rate``, so it plays ``factor`` times faster with its pitch scaled by ``factor``.
    Returns float32 ``[..., ceil(n / factor)]`` (about). Typical factors: 0.9, 1.0, 1.1.
    """
    if not factor > 0:
        raise ValueError(f"speed factor must be positive, got {factor}")
    sr = _rate(sample_rate, "sample_rate")
    return resample(waveform, int(round(sr * factor)), sr)


def volume_perturb(waveform, factor: float | None = None, *, low: float = 0.125,
                   high: float = 2.0, seed=None, rng=None) -> np.ndarray:
    """Scale the waveform's amplitude by ``factor``, or by ``U[low, high]`` drawn from the rng
    (Kaldi's ``perturb_data_dir_volume.sh`` range 1/8..2). Returns float32, same shape."""
    x = _as_waveform(waveform)
    if factor is None:
        if not 0 <= low <= high:
            raise ValueError(f"need 0 <= low <= high, got low={low}, high={high}")
        factor = make_rng(seed, rng).uniform(low, high)
    return x * np.float32(factor)


def power(x) -> float:
    """Mean square of the samples (float64 arithmetic)."""
    x = np.asarray(x, np.float64)
    return float(np.mean(x * x)) if x.size else 0.0


def fit_noise(noise, num_samples: int, seed=None, rng=None) -> np.ndarray:
    """Return ``num_samples`` of ``noise`` from a random offset: a contiguous crop when the
    noise is long enough, else the noise looped around from that offset. float32 ``[num_samples]``.
    """
    noise = _as_waveform(noise, "noise", ndim=1)
    if len(noise) == 0:
        raise ValueError("noise: empty signal")
    gen = make_rng(seed, rng)
    if len(noise) >= num_samples:
        start = int(gen.integers(0, len(noise) - num_samples + 1))
        return noise[start:start + num_samples].copy()
    start = int(gen.integers(0, len(noise)))
    return noise[(start + np.arange(num_samples)) % len(noise)]


def add_noise(waveform, noise, snr_db: float, seed=None, rng=None) -> np.ndarray:
    """Mix ``noise`` into ``waveform`` (1-D, ``[n]``) at a signal-to-noise ratio of ``snr_db``.

    The noise is cropped or looped to ``n`` samples at a seeded offset (``fit_noise``) and scaled
    so that ``10 log10(power(waveform) / power(scaled noise)) == snr_db``, powers being mean
    squares over the whole utterance. Returns float32 ``[n]``. A silent waveform is returned
    unchanged; a silent noise raises ValueError.
    """
    x = _as_waveform(waveform, ndim=1)
    piece = fit_noise(noise, len(x), seed, rng).astype(np.float64)
    p_signal, p_noise = power(x), power(piece)
    if p_signal == 0.0:
        return x.copy()
    if p_noise == 0.0:
        raise ValueError("noise: the selected noise segment is silent, so no SNR can be reached")
    scale = math.sqrt(p_signal / (p_noise * 10.0 ** (snr_db / 10.0)))
    return (x.astype(np.float64) + scale * piece).astype(np.float32)


NOISE_KINDS = ("white", "pink", "brown", "blue", "violet", "babble")


def _fast_length(n: int) -> int:
    """The smallest 2^a 3^b 5^c >= n (pocketfft is several times slower on lengths with
    large prime factors)."""
    best = 1 << max(0, (n - 1).bit_length())
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            m = p35 << max(0, (-(-n // p35) - 1).bit_length())
            best = min(best, m)
            p35 *= 3
        p5 *= 5
    return best


def _colored(num_samples: int, exponent: float, gen) -> np.ndarray:
    """Gaussian noise whose power spectrum goes as ``f ** exponent`` (pink: -1, brown: -2),
    made at a fast FFT length and cut to ``num_samples``."""
    size = _fast_length(num_samples)
    spec = np.fft.rfft(gen.standard_normal(size))
    f = np.arange(len(spec), dtype=np.float64)
    f[0] = 1.0
    spec *= f ** (exponent / 2)
    spec[0] = 0.0  # no DC offset
    return np.fft.irfft(spec, size)[:num_samples]


def _bandpass_noise(num_samples: int, sample_rate: int, centre: float, bandwidth: float,
                    gen) -> np.ndarray:
    """White noise filtered by a Gaussian band of the given centre and -3 dB width (Hz)."""
    spec = np.fft.rfft(gen.standard_normal(num_samples))
    f = np.fft.rfftfreq(num_samples, 1.0 / sample_rate)
    sigma = bandwidth / 2.3548
    spec *= np.exp(-0.5 * ((f - centre) / sigma) ** 2)
    return np.fft.irfft(spec, num_samples)


def _syllable_envelope(num_samples: int, sample_rate: int, gen) -> np.ndarray:
    """A slowly varying gate, 0 in pauses, with the 2-8 Hz modulations of running speech."""
    spec = np.fft.rfft(gen.standard_normal(num_samples))
    f = np.fft.rfftfreq(num_samples, 1.0 / sample_rate)
    spec *= (f >= 1.0) & (f <= 8.0)
    env = np.fft.irfft(spec, num_samples)
    env /= env.std() + 1e-12
    return np.maximum(env + 0.3, 0.0)


def make_noise(kind: str, num_samples: int, sample_rate: int = 16000, seed=None, rng=None,
               num_talkers: int = 6) -> np.ndarray:
    """Synthesise noise for augmentation without any download; float32 ``[num_samples]``, RMS 1.

    ``kind``: ``white`` (flat spectrum), ``pink`` (power 1/f), ``brown`` (1/f^2), ``blue`` (f),
    ``violet`` (f^2), or ``babble``: ``num_talkers`` speech-like voices, each three formant-like
    noise bands (F1 300-900 Hz, F2 900-2500 Hz, F3 2500-3500 Hz, capped below Nyquist) gated by
    a 1-8 Hz syllabic envelope with pauses. Seeded: same seed, same noise.
    """
    if num_samples < 0:
        raise ValueError(f"num_samples must be >= 0, got {num_samples}")
    sr = _rate(sample_rate, "sample_rate")
    gen = make_rng(seed, rng)
    if num_samples == 0:
        return np.zeros(0, np.float32)
    exponents = {"white": 0.0, "pink": -1.0, "brown": -2.0, "blue": 1.0, "violet": 2.0}
    if kind in exponents:
        x = gen.standard_normal(num_samples) if kind == "white" else _colored(
            num_samples, exponents[kind], gen)
    elif kind == "babble":
        if num_talkers < 1:
            raise ValueError(f"num_talkers must be >= 1, got {num_talkers}")
        top = 0.45 * sr
        x = np.zeros(num_samples)
        for _ in range(num_talkers):
            voice = np.zeros(num_samples)
            for (lo, hi), gain in zip(((300, 900), (900, 2500), (2500, 3500)), (1.0, 0.5, 0.25),
                                      strict=True):
                centre = min(gen.uniform(lo, hi), top)
                band = _bandpass_noise(num_samples, sr, centre, gen.uniform(80, 250), gen)
                voice += gain * band / (band.std() + 1e-12)
            x += voice * _syllable_envelope(num_samples, sr, gen)
    else:
        raise ValueError(f"unknown noise kind {kind!r}; expected one of {', '.join(NOISE_KINDS)}")
    rms = math.sqrt(power(x))
    return (x / rms if rms > 0 else x).astype(np.float32)


def synthetic_rir(sample_rate: int, rt60: float, seed=None, rng=None,
                  direct_to_reverberant_db: float = 0.0) -> np.ndarray:
    """A synthetic room impulse response: float32 ``[ceil(rt60 * sample_rate) + 1]``, unit energy.

    A direct-path impulse at sample 0 followed by Gaussian noise under the envelope
    ``exp(-3 ln(10) t / rt60)`` (its energy falls 60 dB in ``rt60`` seconds), the tail scaled
    so that direct / tail energy is ``direct_to_reverberant_db``.
    """
    sr = _rate(sample_rate, "sample_rate")
    if not rt60 > 0:
        raise ValueError(f"rt60 must be positive seconds, got {rt60}")
    gen = make_rng(seed, rng)
    n = int(math.ceil(rt60 * sr)) + 1
    t = np.arange(1, n) / sr
    tail = gen.standard_normal(n - 1) * np.exp(-LN_1000 * t / rt60)
    tail *= math.sqrt(10.0 ** (-direct_to_reverberant_db / 10.0) / max(power(tail) * (n - 1),
                                                                       1e-300))
    h = np.concatenate([[1.0], tail])
    return (h / math.sqrt(np.sum(h * h))).astype(np.float32)


def fft_convolve(x: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Full linear convolution of 1-D ``x`` and ``h`` by FFT: float64 ``[len(x) + len(h) - 1]``."""
    n = len(x) + len(h) - 1
    size = 1 << max(0, (n - 1).bit_length())
    y = np.fft.irfft(np.fft.rfft(x, size) * np.fft.rfft(h, size), size)
    return y[:n]


def reverberate(waveform, sample_rate: int, rt60: float, seed=None, rng=None, rir=None,
                direct_to_reverberant_db: float = 0.0) -> np.ndarray:
    """Reverberate a 1-D waveform ``[n]``: convolve it (FFT) with ``rir`` or a
    ``synthetic_rir(sample_rate, rt60, ...)``, keep the first ``n`` samples and rescale them to
    the input's energy. Returns float32 ``[n]``; ``rt60 == 0`` without ``rir`` returns a copy.
    """
    x = _as_waveform(waveform, ndim=1)
    if rir is None:
        if rt60 == 0:
            return x.copy()
        rir = synthetic_rir(sample_rate, rt60, seed, rng, direct_to_reverberant_db)
    h = _as_waveform(rir, "rir", ndim=1).astype(np.float64)
    if len(x) == 0:
        return x.copy()
    if not np.any(h):
        raise ValueError("rir: the impulse response is all zeros")
    y = fft_convolve(x.astype(np.float64), h)[:len(x)]
    p_in, p_out = power(x), power(y)
    if p_out > 0:
        y *= math.sqrt(p_in / p_out)
    return y.astype(np.float32)


# ----------------------------------------------------------------------------- tempo and pitch

def _frame_samples(sample_rate: int, seconds: float, what: str) -> int:
    n = int(round(seconds * sample_rate))
    if n < 4:
        raise ValueError(f"{what} of {seconds} s is under 4 samples at {sample_rate} Hz")
    return n


def wsola(x: np.ndarray, speed: float, frame_length: int, tolerance: int) -> np.ndarray:
    """WSOLA time-scale modification of 1-D ``x`` (Verhelst & Roelands 1993, in the formulation
    of Driedger & Mueller's review and of ``audiotsm.wsola``): float64 ``[round(n / speed)]``.

    Frames of ``frame_length`` samples are overlap-added every ``frame_length // 2`` samples
    under a periodic Hann window; frame ``k`` is read near input sample ``k * hop * speed``,
    shifted by up to ``2 * tolerance`` samples to the position whose samples correlate best
    with the natural continuation of the previous frame, so that waveform periods line up and
    the pitch stays. The input is preceded by ``tolerance + frame_length // 2`` zeros, as
    audiotsm does, and the first frame is taken unshifted.
    """
    n = len(x)
    n_frame, hop, tol = int(frame_length), int(frame_length) // 2, int(tolerance)
    out_len = int(round(n / speed))
    if out_len == 0:
        return np.zeros(0)
    num_frames = (out_len + n_frame // 2) // hop + 2
    span = n_frame + 2 * tol + hop  # analysis frame with the samples around it
    last_start = int(round((num_frames - 1) * hop * speed))
    xp = np.zeros(tol + n_frame // 2 + max(n, last_start) + span)
    xp[tol + n_frame // 2: tol + n_frame // 2 + n] = x
    window = 0.5 * (1.0 - np.cos(2.0 * np.pi * np.arange(n_frame) / n_frame))
    out = np.zeros(num_frames * hop + n_frame)
    norm = np.zeros_like(out)
    natural = None
    for k in range(num_frames):
        frame = xp[int(round(k * hop * speed)):][:span]
        if natural is None:
            delta = 0
        else:
            delta = int(np.argmax(np.correlate(frame[:n_frame + 2 * tol], natural)))
        out[k * hop:k * hop + n_frame] += window * frame[delta:delta + n_frame]
        norm[k * hop:k * hop + n_frame] += window
        natural = frame[delta + hop:delta + hop + n_frame]
    norm[norm < 1e-4] = 1.0
    return (out / norm)[n_frame // 2:n_frame // 2 + out_len]


def tempo_perturb(waveform, sample_rate: int, factor: float, frame_length: float = 0.032,
                  tolerance: float | None = None) -> np.ndarray:
    """Change the tempo by ``factor`` without changing pitch or formants (sox's ``tempo``).

    WSOLA (``wsola``) over frames of ``frame_length`` seconds with a search of +-``tolerance``
    seconds (default half a frame: 16 ms covers the pitch period of any adult voice). 1-D
    waveform ``[n]`` -> float32 ``[round(n / factor)]``: factor 1.2 is 20% faster (shorter).
    """
    x = _as_waveform(waveform, ndim=1)
    if not factor > 0:
        raise ValueError(f"tempo factor must be positive, got {factor}")
    sr = _rate(sample_rate, "sample_rate")
    n_frame = _frame_samples(sr, frame_length, "frame_length")
    tol = n_frame // 2 if tolerance is None else int(round(tolerance * sr))
    if tol < 0:
        raise ValueError(f"tolerance must be >= 0 seconds, got {tolerance}")
    if factor == 1.0:
        return x.copy()
    return wsola(x.astype(np.float64), float(factor), n_frame, tol).astype(np.float32)


def pitch_shift(waveform, sample_rate: int, semitones: float,
                frame_length: float = 0.032) -> np.ndarray:
    """Shift the pitch by ``semitones`` keeping the duration (sox's ``pitch``): the tempo is
    slowed by ``r = 2 ** (semitones / 12)`` (``tempo_perturb``), then the result is played ``r``
    times faster (resampled by ``r`` as a ratio of integers up to 64, within 0.5%). The whole
    spectrum scales by ``r``, formants included; follow with ``formant_shift(.., 1 / r)`` to
    keep them. 1-D ``[n]`` -> float32 ``[n]``.
    """
    x = _as_waveform(waveform, ndim=1)
    sr = _rate(sample_rate, "sample_rate")
    if semitones == 0:
        return x.copy()
    # a ratio of small integers keeps the polyphase resampler small (16000/17959 Hz would need
    # 16000 filter branches); 1/64 steps are ~0.5% apart, 1/10 of a semitone
    ratio = Fraction(2.0 ** (float(semitones) / 12.0)).limit_denominator(64)
    slow = tempo_perturb(x, sr, float(1 / ratio), frame_length)
    y = resample(slow, ratio.numerator, ratio.denominator)
    if len(y) < len(x):  # rounding of the two lengths: pad or cut to the input's
        y = np.concatenate([y, np.zeros(len(x) - len(y), np.float32)])
    return y[:len(x)]


def _lpc_log_envelope(power: np.ndarray, n_fft: int, order: int, sr: int) -> np.ndarray:
    """Log magnitude of the all-pole (LPC) envelope of each frame's power spectrum
    ``[frames, bins]``: autocorrelation by inverse FFT, Levinson-Durbin run for all frames at
    once, ``-log|A(f)|`` sampled at the same bins (the gain is left out: only ratios are used).
    """
    r = np.fft.irfft(power, n_fft, axis=1)[:, :order + 1]
    r[:, 0] = r[:, 0] * (1.0 + 1e-6) + 1e-12  # white-noise correction keeps A stable
    lag = np.arange(order + 1)
    r = r * np.exp(-0.5 * (2.0 * np.pi * 40.0 / sr * lag) ** 2)  # 40 Hz Gaussian lag window
    frames = r.shape[0]
    a = np.zeros((frames, order + 1))
    a[:, 0] = 1.0
    err = r[:, 0].copy()
    for i in range(1, order + 1):
        k = -(a[:, :i] * r[:, i:0:-1]).sum(axis=1) / err
        a[:, 1:i + 1] = a[:, 1:i + 1] + k[:, None] * a[:, i - 1::-1][:, :i]
        err *= 1.0 - k * k
    return -np.log(np.maximum(np.abs(np.fft.rfft(a, n_fft, axis=1)), 1e-10))


def formant_shift(waveform, sample_rate: int, alpha: float, vtln_low: float = 100.0,
                  vtln_high: float = -500.0, frame_length: float = 0.032,
                  lpc_order: int | None = None, max_gain_db: float = 30.0) -> np.ndarray:
    """Vocal-tract length perturbation in the waveform: move the spectral envelope (formants)
    by ``alpha`` while the harmonics, and so the pitch, stay where they are.

    Each frame (Hann, 75% overlap, weighted overlap-add) is multiplied by
    ``E(w(f)) / E(f)``, ``E`` being its all-pole envelope (LPC of ``lpc_order``, default
    ``sample_rate / 1000 + 4``, the usual order for formants) and ``w`` Kaldi's
    piecewise-linear VTLN warp (``vtln_warp_freq`` with warp ``alpha``: ``f / alpha`` between
    the inflection points set by ``vtln_low``/``vtln_high``, band edges fixed), so a formant at
    ``F`` Hz moves to about ``alpha * F``: ``alpha > 1`` sounds like a shorter vocal tract.
    Gains are limited to +-``max_gain_db``. 1-D ``[n]`` -> float32 ``[n]``; ``alpha`` 1 copies.
    """
    from asrkit.features._mel import vtln_warp_freq

    x = _as_waveform(waveform, ndim=1)
    sr = _rate(sample_rate, "sample_rate")
    if not alpha > 0:
        raise ValueError(f"alpha must be positive, got {alpha}")
    if alpha == 1.0 or len(x) == 0:
        return x.copy()
    n_fft = 1 << max(2, (_frame_samples(sr, frame_length, "frame_length") - 1).bit_length())
    hop = n_fft // 4
    nyquist = sr / 2.0
    high = vtln_high if vtln_high > 0 else vtln_high + nyquist
    freqs = np.fft.rfftfreq(n_fft, 1.0 / sr)
    source = np.array([vtln_warp_freq(vtln_low, high, 0.0, nyquist, float(alpha), f)
                       for f in freqs])
    order = int(sr / 1000 + 4) if lpc_order is None else int(lpc_order)
    if not 1 <= order < n_fft // 2:
        raise ValueError(f"lpc_order must be in [1, {n_fft // 2}), got {lpc_order}")
    window = 0.5 * (1.0 - np.cos(2.0 * np.pi * np.arange(n_fft) / n_fft))
    pad = n_fft
    xp = np.concatenate([np.zeros(pad), x.astype(np.float64), np.zeros(pad + hop)])
    num_frames = (len(xp) - n_fft) // hop + 1
    idx = np.arange(num_frames)[:, None] * hop + np.arange(n_fft)[None, :]
    spec = np.fft.rfft(xp[idx] * window, axis=1)
    env = _lpc_log_envelope(np.abs(spec) ** 2, n_fft, order, sr)
    bins = source / (sr / n_fft)  # fractional bin each output bin takes its envelope from
    lo = np.clip(np.floor(bins).astype(int), 0, len(freqs) - 1)
    hi = np.minimum(lo + 1, len(freqs) - 1)
    frac = bins - lo
    warped = env[:, lo] * (1.0 - frac) + env[:, hi] * frac
    limit = max_gain_db / 20.0 * np.log(10.0)
    gain = np.exp(np.clip(warped - env, -limit, limit))
    frames = np.fft.irfft(spec * gain, n_fft, axis=1) * window
    out = np.zeros(len(xp) + n_fft)
    norm = np.zeros(len(xp) + n_fft)
    for r in range(n_fft // hop):  # frames r, r+4, ... do not overlap: add them in one slice
        part = frames[r::n_fft // hop]
        out[r * hop:r * hop + part.size] += part.reshape(-1)
        norm[r * hop:r * hop + part.size] += np.tile(window * window, len(part))
    norm[norm < 1e-4] = 1.0
    return (out / norm)[pad:pad + len(x)].astype(np.float32)
