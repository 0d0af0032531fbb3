"""Frame geometry and window functions, exactly as Kaldi's ``feature-window.cc`` computes them.

Sample counts follow Kaldi's arithmetic: ``int(samp_freq * 0.001 * ms)`` with the float32 option
values, so e.g. 22050 Hz x 25 ms gives 551 samples as in Kaldi.
"""

from __future__ import annotations

import numpy as np


def ms_to_samples(sample_frequency: float, ms: float) -> int:
    """Kaldi's ``static_cast<int32>(samp_freq * 0.001 * ms)`` with float32 option values."""
    return int(float(np.float32(sample_frequency)) * 0.001 * float(np.float32(ms)))


def padded_size(window_size: int, round_to_power_of_two: bool) -> int:
    """FFT length: ``window_size`` or the next power of two at or above it."""
    if not round_to_power_of_two:
        return window_size
    n = 1
    while n < window_size:
        n *= 2
    return n


def num_frames(num_samples: int, window_size: int, window_shift: int, snip_edges: bool) -> int:
    """Kaldi's ``NumFrames(num_samples, opts, flush=true)``.

    snip_edges: only frames that fit whole, ``1 + (n - size) // shift`` (0 when ``n < size``).
    Otherwise ``(n + shift // 2) // shift`` frames centred on ``shift * t + shift // 2``.
    """
    if snip_edges:
        if num_samples < window_size:
            return 0
        return 1 + (num_samples - window_size) // window_shift
    return (num_samples + window_shift // 2) // window_shift


def window_function(window_type: str, size: int, blackman_coeff: float = 0.42) -> np.ndarray:
    """Kaldi's ``FeatureWindowFunction``: float64 [size].

    ``a = 2 pi / (size - 1)``; povey is the Hann window to the power 0.85.
    """
    i = np.arange(size, dtype=np.float64)
    # Kaldi divides by (size - 1) unguarded; a 1-sample window is 0/0 there, we keep it finite.
    a = 2.0 * np.pi / (size - 1) if size > 1 else 0.0
    if window_type == "hanning":
        w = 0.5 - 0.5 * np.cos(a * i)
    elif window_type == "sine":
        w = np.sin(0.5 * a * i)
    elif window_type == "hamming":
        w = 0.54 - 0.46 * np.cos(a * i)
    elif window_type == "povey":
        w = (0.5 - 0.5 * np.cos(a * i)) ** 0.85
    elif window_type == "rectangular":
        w = np.ones(size)
    elif window_type == "blackman":
        w = blackman_coeff - 0.5 * np.cos(a * i) + (0.5 - blackman_coeff) * np.cos(2 * a * i)
    else:
        raise ValueError(f"unknown window_type {window_type!r}")
    return w
