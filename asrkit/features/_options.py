"""Option tables of the Kaldi feature extractors, with Kaldi's defaults and torchaudio's names.

Each kind ("fbank", "mfcc", "spectrogram") has one flat table ``name -> default``. The names are
those of ``torchaudio.compliance.kaldi``; the defaults are Kaldi's (``compute-fbank-feats``,
``compute-mfcc-feats``, ``compute-spectrogram-feats``) where the two differ: ``dither=1.0``,
``energy_floor=0.0``. ``seed`` is asrkit's own: it seeds the dither noise so output is reproducible.
"""

from __future__ import annotations

import difflib
import numbers

import numpy as np

# Kaldi FrameExtractionOptions plus the per-file options of the compute-*-feats tools.
FRAME_OPTIONS: dict[str, object] = {
    "sample_frequency": 16000.0,  # Hz
    "frame_length": 25.0,  # ms
    "frame_shift": 10.0,  # ms
    "dither": 1.0,  # std of Gaussian noise added to each frame (Kaldi scale: int16 samples)
    "preemphasis_coefficient": 0.97,
    "remove_dc_offset": True,
    "window_type": "povey",  # povey, hamming, hanning, rectangular, blackman, sine
    "blackman_coeff": 0.42,
    "round_to_power_of_two": True,  # zero-pad each frame to the next power of two for the FFT
    "snip_edges": True,  # True: only whole frames; False: reflect at the edges, shift/2 rule
    "min_duration": 0.0,  # s; shorter input gives 0 frames (Kaldi skips the file)
    "subtract_mean": False,  # subtract the per-file mean of every feature dimension
    "channel": -1,  # which row of a [channels, samples] waveform; -1 means the first
    "energy_floor": 0.0,  # floor on the energy (absolute, not log); 0 means no floor
    "raw_energy": True,  # energy before preemphasis and windowing (else after)
    "seed": 0,  # seed of the dither noise (asrkit only)
}

# Kaldi MelBanksOptions (num_mel_bins is 23 in both compute-fbank-feats and compute-mfcc-feats).
MEL_OPTIONS: dict[str, object] = {
    "num_mel_bins": 23,
    "low_freq": 20.0,  # Hz
    "high_freq": 0.0,  # Hz; <= 0 means an offset from the Nyquist frequency
    "vtln_low": 100.0,  # Hz, lower inflection point of the VTLN warp
    "vtln_high": -500.0,  # Hz, upper inflection point; <= 0 means an offset from Nyquist
    "vtln_warp": 1.0,  # VTLN warp factor (1.0: no warping)
}

DEFAULTS: dict[str, dict[str, object]] = {
    "fbank": {
        **FRAME_OPTIONS,
        **MEL_OPTIONS,
        "use_energy": False,  # add log energy as an extra dimension
        "use_log_fbank": True,
        "use_power": True,  # power spectrum (else magnitude)
        "htk_compat": False,  # energy last (HTK order) instead of first
    },
    "mfcc": {
        **FRAME_OPTIONS,
        **MEL_OPTIONS,
        "num_ceps": 13,
        "use_energy": True,  # C0 replaced by the log energy
        "cepstral_lifter": 22.0,  # 0 disables liftering
        "htk_compat": False,  # C0/energy last, unscaled as HTK does
    },
    "spectrogram": dict(FRAME_OPTIONS),
}

KINDS = tuple(DEFAULTS)

WINDOW_TYPES = ("povey", "hamming", "hanning", "rectangular", "blackman", "sine")


def default_options(kind: str) -> dict:
    """Return a fresh dict ``option name -> Kaldi default`` for fbank, mfcc or spectrogram."""
    return dict(_table(kind))


def _table(kind: str) -> dict[str, object]:
    try:
        return DEFAULTS[kind]
    except KeyError:
        raise ValueError(
            f"unknown feature kind {kind!r}; expected one of {', '.join(KINDS)}") from None


def resolve_options(kind: str, opts: dict) -> dict:
    """Merge ``opts`` over the defaults of ``kind``, coercing each value to its default's type.

    Raises TypeError for an unknown option name (listing the valid ones) and ValueError for a
    value of the wrong type. Range checks that need derived quantities happen in the plan.
    """
    table = _table(kind)
    unknown = [name for name in opts if name not in table]
    if unknown:
        name = unknown[0]
        close = difflib.get_close_matches(name, table, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise TypeError(
            f"{kind}() got an unknown option {name!r}{hint}; valid options: "
            f"{', '.join(sorted(table))}")
    resolved = dict(table)
    for name, value in opts.items():
        resolved[name] = _coerce(kind, name, value, table[name])
    if isinstance(resolved.get("window_type"), str):
        resolved["window_type"] = resolved["window_type"].lower()
    return resolved


def _coerce(kind: str, name: str, value, default):
    def bad(expected: str):
        return ValueError(f"{kind}: option {name}={value!r} must be {expected}")

    if isinstance(default, bool):
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        if isinstance(value, numbers.Integral) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise bad("a bool")
    if isinstance(default, int):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
            if isinstance(value, numbers.Real) and float(value).is_integer():
                return int(value)
            raise bad("an integer")
        return int(value)
    if isinstance(default, float):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
            raise bad("a number")
        value = float(value)
        if not np.isfinite(value):
            raise bad("finite")
        return value
    if isinstance(default, str):
        if not isinstance(value, str):
            raise bad("a string")
        return value
    raise AssertionError(f"no coercion for option {name}")  # pragma: no cover
