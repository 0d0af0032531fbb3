"""Numba kernels of the Kaldi feature pipeline.

The pipeline runs on blocks of frames so the working set stays in cache:

1. :func:`extract_frames`: cut frames (reflecting at the edges when not ``snip_edges``), dither,
   remove the DC offset, take the raw energy, then DC removal, pre-emphasis and window in one
   pass into a zero-padded float64 [n, fft_size] block, and the windowed energy.
2. ``numpy.fft.rfft`` of the block (pocketfft; about 1 us per 512-point frame).
3. :func:`fbank_rows`, :func:`mfcc_rows` or :func:`spectrogram_rows`: power spectrum, banded mel
   filterbank, log, DCT and lifter, energy placement; written straight into the float32 output.

All kernels release the GIL (``nogil=True``) so :mod:`asrkit.features.batch` runs them on threads.
Work is in float64 (Kaldi uses float32), which keeps us within float32 rounding of Kaldi.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

FLT_EPSILON = float(np.finfo(np.float32).eps)  # Kaldi's floor before every log

ENERGY_NONE = 0  # no energy wanted
ENERGY_RAW = 1  # after DC removal, before preemphasis and window (Kaldi raw_energy=true)
ENERGY_WINDOWED = 2  # after the window (raw_energy=false)

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_FRAME_KEY = np.uint64(0xD1B54A32D192ED03)
# Reassociation lets LLVM vectorise the sums; no nnan/ninf, so -inf floors keep working.
_FAST = {"reassoc", "contract"}

_LOW32 = np.uint64(0xFFFFFFFF)
_TWO_POW_M31 = 2.0 / 4294967296.0


@njit(cache=True, nogil=True, inline="always")
def _splitmix64(state):
    """One step of splitmix64: returns (next state, 64 random bits), both uint64."""
    state = state + _GOLDEN
    z = state
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return state, z ^ (z >> np.uint64(31))


@njit(cache=True, nogil=True)
def _add_dither(buf, n, dither, seed, frame):
    """Add ``dither * N(0, 1)`` to ``buf[:n]``; the noise depends only on (seed, frame, i).

    Counter-based (splitmix64 keyed by seed and frame, Marsaglia's polar method), so the result
    does not depend on block boundaries or threads.
    """
    state = np.uint64(seed) * _GOLDEN ^ np.uint64(frame) * _FRAME_KEY
    state, _ = _splitmix64(state)
    i = 0
    while i < n:
        state, bits = _splitmix64(state)
        # two 32-bit uniforms in (-1, 1), never exactly 0, so s > 0 below
        u = (float(bits >> np.uint64(32)) + 0.5) * _TWO_POW_M31 - 1.0
        v = (float(bits & _LOW32) + 0.5) * _TWO_POW_M31 - 1.0
        s = u * u + v * v
        if s >= 1.0:
            continue
        m = math.sqrt(-2.0 * math.log(s) / s) * dither
        buf[i] += u * m
        if i + 1 < n:
            buf[i + 1] += v * m
        i += 2


@njit(cache=True, nogil=True, fastmath=_FAST)
def first_nonfinite(wave):
    """Index of the first NaN/inf sample of a 1-D float array, or -1."""
    # x - x is 0 for finite x and NaN otherwise; the sum vectorises, the search runs only on NaN
    acc = 0.0
    for i in range(wave.shape[0]):
        acc += wave[i] - wave[i]
    if acc == 0.0:
        return -1
    for i in range(wave.shape[0]):
        if not math.isfinite(wave[i]):
            return i
    return -1


@njit(cache=True, nogil=True, fastmath=_FAST)
def extract_frames(wave, first_frame, window_size, window_shift, snip_edges, dither, seed,
                   remove_dc, preemph, window, energy_mode, frames, energy, sample_offset=0):
    """Kaldi's ``ExtractWindow`` + ``ProcessWindow`` for frames ``first_frame + [0, n)``.

    wave: 1-D real array (any numeric dtype) holding the signal from sample ``sample_offset``
    on (a streaming buffer; frames reflect at its ends, so a frame that starts before sample 0
    needs ``sample_offset`` 0); window: float64 [window_size];
    frames: float64 [n, fft_size] output (zero-padded after window_size);
    energy: float64 [n] output, log(max(sum x^2, FLT_EPSILON)) of the raw or windowed frame
    (see ENERGY_*), untouched for ENERGY_NONE.
    """
    num_samples = wave.shape[0]
    n, fft_size = frames.shape
    raw = np.empty(window_size, dtype=np.float64)
    for f in range(n):
        frame = first_frame + f
        if snip_edges:
            start = frame * window_shift - sample_offset
        else:
            start = frame * window_shift + window_shift // 2 - window_size // 2 - sample_offset
        if start >= 0 and start + window_size <= num_samples:
            for i in range(window_size):
                raw[i] = wave[start + i]
        else:
            for i in range(window_size):
                s = start + i
                while s < 0 or s >= num_samples:  # reflect: -1 -> 0, n -> n - 1
                    if s < 0:
                        s = -s - 1
                    else:
                        s = 2 * num_samples - 1 - s
                raw[i] = wave[s]
        if dither != 0.0:
            _add_dither(raw, window_size, dither, seed, frame)
        mean = 0.0
        if remove_dc:
            for i in range(window_size):
                mean += raw[i]
            mean /= window_size
        if energy_mode == ENERGY_RAW:
            e = 0.0
            for i in range(window_size):
                d = raw[i] - mean
                e += d * d
            energy[f] = math.log(max(e, FLT_EPSILON))
        # DC removal, preemphasis (x[i] - c x[i-1], and x[0] - c x[0]) and window in one pass
        buf = frames[f]
        x0 = raw[0] - mean
        buf[0] = (x0 - preemph * x0) * window[0]
        for i in range(1, window_size):
            buf[i] = ((raw[i] - mean) - preemph * (raw[i - 1] - mean)) * window[i]
        for i in range(window_size, fft_size):
            buf[i] = 0.0
        if energy_mode == ENERGY_WINDOWED:
            e = 0.0
            for i in range(window_size):
                e += buf[i] * buf[i]
            energy[f] = math.log(max(e, FLT_EPSILON))


@njit(cache=True, nogil=True, inline="always")
def _power(spec, f, power, use_power):
    for k in range(power.shape[0]):
        re = spec[f, k].real
        im = spec[f, k].imag
        p = re * re + im * im
        power[k] = p if use_power else math.sqrt(p)


@njit(cache=True, nogil=True, inline="always")
def _mel(power, offsets, widths, weights, m):
    o = offsets[m]
    acc = 0.0
    for j in range(widths[m]):
        acc += weights[m, j] * power[o + j]
    return acc


@njit(cache=True, nogil=True, fastmath=_FAST)
def fbank_rows(spec, energy, offsets, widths, weights, use_power, use_log, use_energy,
               htk_compat, log_energy_floor, out, row0):
    """Kaldi's ``FbankComputer::Compute`` on a block: spec complex128 [n, fft_size/2+1] ->
    out[row0:row0+n] (float32 [., M (+1)]). Energy goes first, or last with htk_compat.
    """
    num_bins = offsets.shape[0]
    power = np.empty(spec.shape[1], dtype=np.float64)
    mel_col = 1 if (use_energy and not htk_compat) else 0
    energy_col = num_bins if htk_compat else 0
    for f in range(spec.shape[0]):
        _power(spec, f, power, use_power)
        row = out[row0 + f]
        for m in range(num_bins):
            v = _mel(power, offsets, widths, weights, m)
            if use_log:
                v = math.log(max(v, FLT_EPSILON))
            row[mel_col + m] = v
        if use_energy:
            row[energy_col] = max(energy[f], log_energy_floor)


@njit(cache=True, nogil=True, fastmath=_FAST)
def mfcc_rows(spec, energy, offsets, widths, weights, dct, lifter, use_energy, htk_compat,
              log_energy_floor, out, row0):
    """Kaldi's ``MfccComputer::Compute`` on a block: log mel energies times the DCT [C, M],
    liftered; C0 replaced by the log energy with use_energy; htk_compat moves C0 (times sqrt 2
    without use_energy) to the end. Writes out[row0:row0+n] (float32 [., C]).
    """
    num_bins = offsets.shape[0]
    num_ceps = dct.shape[0]
    power = np.empty(spec.shape[1], dtype=np.float64)
    logmel = np.empty(num_bins, dtype=np.float64)
    ceps = np.empty(num_ceps, dtype=np.float64)
    for f in range(spec.shape[0]):
        _power(spec, f, power, True)
        for m in range(num_bins):
            logmel[m] = math.log(max(_mel(power, offsets, widths, weights, m), FLT_EPSILON))
        for c in range(num_ceps):
            acc = 0.0
            for m in range(num_bins):
                acc += dct[c, m] * logmel[m]
            ceps[c] = acc * lifter[c]
        if use_energy:
            ceps[0] = max(energy[f], log_energy_floor)
        row = out[row0 + f]
        if htk_compat:
            c0 = ceps[0] if use_energy else ceps[0] * math.sqrt(2.0)
            for c in range(num_ceps - 1):
                row[c] = ceps[c + 1]
            row[num_ceps - 1] = c0
        else:
            for c in range(num_ceps):
                row[c] = ceps[c]


@njit(cache=True, nogil=True, fastmath=_FAST)
def spectrogram_rows(spec, energy, log_energy_floor, out, row0):
    """Kaldi's ``SpectrogramComputer::Compute`` on a block: log power spectrum with bin 0
    replaced by the log energy. Writes out[row0:row0+n] (float32 [., fft_size/2+1]).
    """
    for f in range(spec.shape[0]):
        row = out[row0 + f]
        for k in range(1, spec.shape[1]):
            re = spec[f, k].real
            im = spec[f, k].imag
            row[k] = math.log(max(re * re + im * im, FLT_EPSILON))
        row[0] = max(energy[f], log_energy_floor)
