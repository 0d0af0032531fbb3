"""Kaldi-compatible filterbank, MFCC and spectrogram features.

``fbank``, ``mfcc`` and ``spectrogram`` reproduce Kaldi's ``compute-fbank-feats``,
``compute-mfcc-feats`` and ``compute-spectrogram-feats`` (checked against kaldi-native-fbank to a
relative difference below 1e-3). Options carry ``torchaudio.compliance.kaldi``'s names and
Kaldi's defaults; see :func:`default_options`.

Deliberate differences from Kaldi:

- Dither noise comes from a counter-based generator keyed by ``seed`` and the frame index, so
  output is reproducible (Kaldi's noise depends on a global random state). With the same seed,
  two utterances get the same noise on the same frame index.
- Arithmetic is float64 inside (Kaldi: float32); outputs are float32.
- A waveform shorter than ``min_duration`` seconds gives 0 frames (Kaldi skips the file).
- ``subtract_mean`` subtracts the per-utterance mean of each dimension, as the Kaldi tools do.
- An odd FFT length (``round_to_power_of_two=False`` with an odd number of samples per frame)
  works here; Kaldi's RealFft refuses it.

Example::

    feats = fbank(samples_int16_scale, num_mel_bins=80, dither=0.0)  # float32 [frames, 80]
"""

from __future__ import annotations

import numpy as np

from asrkit.features._options import KINDS
from asrkit.features._options import default_options as _default_options
from asrkit.features._pipeline import extract, make_plan, prepare_waveform

__all__ = ["compute", "default_options", "fbank", "mfcc", "spectrogram"]


def default_options(kind: str) -> dict:
    """Return ``{option name: Kaldi default}`` for ``kind`` ("fbank", "mfcc", "spectrogram").

    A fresh dict each call. Raises ValueError for an unknown kind.
    """
    return _default_options(kind)


def compute(kind: str, waveform, **opts) -> np.ndarray:
    """Features of ``kind`` ("fbank", "mfcc" or "spectrogram") for one waveform.

    Takes a 1-D waveform (any real dtype; int16-scale values give Kaldi's output), or 2-D
    [channels, samples] with the ``channel`` option, and Kaldi options by torchaudio's names.
    Returns float32 [frames, dims]. Unknown option names raise TypeError; bad values ValueError.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown feature kind {kind!r}; expected one of {', '.join(KINDS)}")
    plan = make_plan(kind, opts)
    return extract(plan, prepare_waveform(plan, waveform, kind))


def fbank(waveform, **opts) -> np.ndarray:
    """Kaldi log mel filterbank energies (``compute-fbank-feats``).

    Takes a 1-D waveform and options (defaults: 23 mel bins, 25 ms frames every 10 ms, povey
    window, dither 1.0, no energy). Returns float32 [frames, num_mel_bins (+1 with use_energy;
    energy first, or last with htk_compat)].
    """
    return compute("fbank", waveform, **opts)


def mfcc(waveform, **opts) -> np.ndarray:
    """Kaldi MFCCs (``compute-mfcc-feats``).

    Takes a 1-D waveform and options (defaults: 13 ceps from 23 mel bins, lifter 22, C0 replaced
    by the raw log energy, dither 1.0). Returns float32 [frames, num_ceps].
    """
    return compute("mfcc", waveform, **opts)


def spectrogram(waveform, **opts) -> np.ndarray:
    """Kaldi log power spectrogram (``compute-spectrogram-feats``).

    Takes a 1-D waveform and options. Returns float32 [frames, fft_size // 2 + 1] (257 for 25 ms
    at 16 kHz); column 0 holds the log energy instead of the DC bin, as in Kaldi.
    """
    return compute("spectrogram", waveform, **opts)
