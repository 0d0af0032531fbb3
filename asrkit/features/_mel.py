"""Mel filterbank, VTLN warping, DCT and lifter, as Kaldi's ``mel-computations.cc`` builds them.

The filterbank is kept banded: each of the ``M`` triangular filters covers a short run of FFT
bins, so it is stored as ``offsets int64[M]``, ``widths int64[M]`` and ``weights float64[M, W]``
(``W`` = the widest run, zero padded), and applied by the kernels as ``M`` short dot products.
"""

from __future__ import annotations

import numpy as np


def mel_scale(freq):
    """Hz -> mel, Kaldi's ``1127 ln(1 + f / 700)``; float or float64 array."""
    return 1127.0 * np.log(1.0 + np.asarray(freq, dtype=np.float64) / 700.0)


def inverse_mel_scale(mel):
    """mel -> Hz, the inverse of :func:`mel_scale`."""
    return 700.0 * (np.exp(np.asarray(mel, dtype=np.float64) / 1127.0) - 1.0)


def vtln_warp_freq(vtln_low: float, vtln_high: float, low_freq: float, high_freq: float,
                   warp: float, freq: float) -> float:
    """Kaldi's piecewise-linear VTLN warp of one frequency in Hz (``MelBanks::VtlnWarpFreq``).

    Frequencies outside ``[low_freq, high_freq]`` are unchanged; between the inflection points
    ``l = vtln_low * max(1, warp)`` and ``h = vtln_high * min(1, warp)`` it is ``freq / warp``,
    and linear from there to the band edges, which stay fixed.
    """
    if freq < low_freq or freq > high_freq:
        return freq
    lo = vtln_low * max(1.0, warp)
    hi = vtln_high * min(1.0, warp)
    scale = 1.0 / warp
    f_lo = scale * lo
    f_hi = scale * hi
    if not (lo > low_freq and hi < high_freq):
        raise ValueError(
            f"VTLN warp {warp} moves the inflection points ({lo:g} Hz, {hi:g} Hz) outside "
            f"(low_freq={low_freq:g}, high_freq={high_freq:g})")
    scale_left = (f_lo - low_freq) / (lo - low_freq)
    scale_right = (high_freq - f_hi) / (high_freq - hi)
    if freq < lo:
        return low_freq + scale_left * (freq - low_freq)
    if freq < hi:
        return scale * freq
    return high_freq + scale_right * (freq - high_freq)


def mel_banks(num_bins: int, sample_frequency: float, fft_size: int, low_freq: float,
              high_freq: float, vtln_low: float = 100.0, vtln_high: float = -500.0,
              vtln_warp: float = 1.0):
    """Kaldi's triangular mel filters over the first ``fft_size // 2`` FFT bins.

    ``high_freq`` and ``vtln_high`` <= 0 are offsets from the Nyquist frequency. Returns
    ``(offsets int64[M], widths int64[M], weights float64[M, W])``: filter ``m`` has weight
    ``weights[m, j]`` on FFT bin ``offsets[m] + j`` for ``j < widths[m]``. The Nyquist bin is
    never used, as in Kaldi. Raises ValueError for inconsistent frequencies or empty filters.
    """
    if num_bins < 3:
        raise ValueError(f"num_mel_bins={num_bins}: must have at least 3 mel bins")
    nyquist = 0.5 * sample_frequency
    high = high_freq if high_freq > 0.0 else nyquist + high_freq
    if low_freq < 0.0 or low_freq >= nyquist or high <= 0.0 or high > nyquist or high <= low_freq:
        raise ValueError(
            f"bad values low_freq={low_freq:g}, high_freq={high_freq:g} (-> {high:g} Hz) for "
            f"sample_frequency={sample_frequency:g}: need 0 <= low_freq < high <= {nyquist:g}")
    v_high = vtln_high if vtln_high > 0.0 else vtln_high + nyquist
    if vtln_warp != 1.0 and (vtln_low < 0.0 or vtln_low <= low_freq or vtln_low >= high
                             or v_high <= 0.0 or v_high >= high or v_high <= vtln_low):
        raise ValueError(
            f"bad values vtln_low={vtln_low:g}, vtln_high={vtln_high:g} (-> {v_high:g} Hz): need "
            f"low_freq={low_freq:g} < vtln_low < vtln_high < high_freq={high:g}")
    num_fft_bins = fft_size // 2
    fft_bin_width = sample_frequency / fft_size
    mel_low = float(mel_scale(low_freq))
    mel_high = float(mel_scale(high))
    delta = (mel_high - mel_low) / (num_bins + 1)
    fft_mel = mel_scale(fft_bin_width * np.arange(num_fft_bins))

    def warp(mel: float) -> float:
        if vtln_warp == 1.0:
            return mel
        hz = float(inverse_mel_scale(mel))
        return float(mel_scale(vtln_warp_freq(vtln_low, v_high, low_freq, high, vtln_warp, hz)))

    rows = []
    for m in range(num_bins):
        left = warp(mel_low + m * delta)
        center = warp(mel_low + (m + 1) * delta)
        right = warp(mel_low + (m + 2) * delta)
        inside = np.nonzero((fft_mel > left) & (fft_mel < right))[0]
        if inside.size == 0:
            raise ValueError(
                f"mel bin {m} covers no FFT bin: num_mel_bins={num_bins} is too large for an "
                f"FFT of {fft_size} points at {sample_frequency:g} Hz")
        mel = fft_mel[inside[0]: inside[-1] + 1]
        rising = (mel - left) / (center - left)
        w = np.where(mel <= center, rising, (right - mel) / (right - center))
        rows.append((int(inside[0]), w))
    width = max(len(w) for _, w in rows)
    offsets = np.array([o for o, _ in rows], dtype=np.int64)
    widths = np.array([len(w) for _, w in rows], dtype=np.int64)
    weights = np.zeros((num_bins, width), dtype=np.float64)
    for m, (_, w) in enumerate(rows):
        weights[m, : len(w)] = w
    return offsets, widths, weights


def dense_mel_banks(offsets: np.ndarray, widths: np.ndarray, weights: np.ndarray,
                    num_fft_bins: int) -> np.ndarray:
    """The banded filters of :func:`mel_banks` as a dense float64 [M, num_fft_bins] matrix."""
    dense = np.zeros((len(offsets), num_fft_bins), dtype=np.float64)
    for m, (o, n) in enumerate(zip(offsets, widths)):
        dense[m, o: o + n] = weights[m, :n]
    return dense


def dct_matrix(num_ceps: int, num_bins: int) -> np.ndarray:
    """Kaldi's ``ComputeDctMatrix`` (orthonormal DCT-II) rows 0..num_ceps-1: float64 [C, M]."""
    k = np.arange(num_ceps, dtype=np.float64)[:, None]
    n = np.arange(num_bins, dtype=np.float64)[None, :]
    d = np.sqrt(2.0 / num_bins) * np.cos(np.pi / num_bins * (n + 0.5) * k)
    d[0, :] = np.sqrt(1.0 / num_bins)
    return d


def lifter_coeffs(num_ceps: int, cepstral_lifter: float) -> np.ndarray:
    """Kaldi's ``ComputeLifterCoeffs``: ``1 + Q/2 sin(pi i / Q)``, float64 [C]; ones if Q == 0."""
    if cepstral_lifter == 0.0:
        return np.ones(num_ceps, dtype=np.float64)
    i = np.arange(num_ceps, dtype=np.float64)
    return 1.0 + 0.5 * cepstral_lifter * np.sin(np.pi * i / cepstral_lifter)
