"""From options to features: a cached plan per option set, and the blocked extraction loop.

A :class:`FeaturePlan` holds everything that depends only on the options (frame geometry,
window, banded mel filters, DCT, lifter), built once per option set and reused (LRU cache), so
a call on a short utterance costs little more than its frames.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types

import numpy as np

from asrkit.features import _kernels as K
from asrkit.features._mel import dct_matrix, lifter_coeffs, mel_banks
from asrkit.features._options import WINDOW_TYPES, resolve_options
from asrkit.features._window import ms_to_samples, num_frames, padded_size, window_function

BLOCK_FRAMES = 128  # frames per block: the float64 frames and spectra (~1 MB) stay in L2

_NATIVE_DTYPES = (np.float32, np.float64, np.int16, np.int32)


@dataclasses.dataclass(frozen=True, eq=False)
class FeaturePlan:
    """Everything fixed by one (kind, options) pair; arrays are read-only."""

    kind: str
    options: types.MappingProxyType  # resolved options, read-only
    window_size: int  # samples per frame
    window_shift: int  # samples between frames
    fft_size: int  # padded frame length
    window: np.ndarray  # float64 [window_size]
    energy_mode: int  # _kernels.ENERGY_*
    log_energy_floor: float  # -inf without a floor
    dim: int  # output columns
    offsets: np.ndarray | None = None  # banded mel filters (fbank, mfcc)
    widths: np.ndarray | None = None
    weights: np.ndarray | None = None
    dct: np.ndarray | None = None  # float64 [num_ceps, num_mel_bins] (mfcc)
    lifter: np.ndarray | None = None  # float64 [num_ceps] (mfcc)

    def num_frames(self, num_samples: int) -> int:
        """Frames produced for a waveform of ``num_samples`` samples."""
        if num_samples < self.options["min_duration"] * self.options["sample_frequency"]:
            return 0
        return num_frames(num_samples, self.window_size, self.window_shift,
                          self.options["snip_edges"])


def make_plan(kind: str, opts: dict) -> FeaturePlan:
    """Validate ``opts`` for ``kind`` and return its (cached) :class:`FeaturePlan`.

    Raises TypeError for unknown option names and ValueError for invalid values.
    """
    resolved = resolve_options(kind, opts)
    return _cached_plan(kind, tuple(sorted(resolved.items())))


@functools.lru_cache(maxsize=64)
def _cached_plan(kind: str, items: tuple) -> FeaturePlan:
    o = dict(items)
    sf = o["sample_frequency"]
    if sf <= 0:
        raise ValueError(f"{kind}: sample_frequency={sf:g} must be positive")
    size = ms_to_samples(sf, o["frame_length"])
    shift = ms_to_samples(sf, o["frame_shift"])
    if size < 1 or shift < 1:
        raise ValueError(
            f"{kind}: frame_length={o['frame_length']:g} ms and frame_shift={o['frame_shift']:g} "
            f"ms give {size} and {shift} samples at {sf:g} Hz; both must be at least 1")
    if o["window_type"] not in WINDOW_TYPES:
        raise ValueError(
            f"{kind}: unknown window_type {o['window_type']!r}; valid: {', '.join(WINDOW_TYPES)}")
    if not 0.0 <= o["preemphasis_coefficient"] <= 1.0:
        raise ValueError(
            f"{kind}: preemphasis_coefficient={o['preemphasis_coefficient']:g} must be in [0, 1]")
    if o["energy_floor"] < 0.0:
        raise ValueError(f"{kind}: energy_floor={o['energy_floor']:g} must be >= 0")
    if o["min_duration"] < 0.0:
        raise ValueError(f"{kind}: min_duration={o['min_duration']:g} must be >= 0")
    if not 0 <= o["seed"] < 2**63:
        raise ValueError(f"{kind}: seed={o['seed']} must be in [0, 2**63)")
    fft_size = padded_size(size, o["round_to_power_of_two"])
    window = _readonly(window_function(o["window_type"], size, o["blackman_coeff"]))
    use_energy = o.get("use_energy", kind == "spectrogram")
    if not use_energy:
        energy_mode = K.ENERGY_NONE
    else:
        energy_mode = K.ENERGY_RAW if o["raw_energy"] else K.ENERGY_WINDOWED
    floor = math.log(o["energy_floor"]) if o["energy_floor"] > 0.0 else -math.inf
    common = dict(kind=kind, options=types.MappingProxyType(o), window_size=size,
                  window_shift=shift, fft_size=fft_size, window=window, energy_mode=energy_mode,
                  log_energy_floor=floor)
    if kind == "spectrogram":
        return FeaturePlan(dim=fft_size // 2 + 1, **common)
    if o["vtln_warp"] <= 0.0:
        raise ValueError(f"{kind}: vtln_warp={o['vtln_warp']:g} must be positive")
    try:
        offsets, widths, weights = mel_banks(
            o["num_mel_bins"], sf, fft_size, o["low_freq"], o["high_freq"], o["vtln_low"],
            o["vtln_high"], o["vtln_warp"])
    except ValueError as e:
        raise ValueError(f"{kind}: {e}") from None
    banks = dict(offsets=_readonly(offsets), widths=_readonly(widths), weights=_readonly(weights))
    if kind == "fbank":
        return FeaturePlan(dim=o["num_mel_bins"] + int(use_energy), **common, **banks)
    num_ceps = o["num_ceps"]
    if not 1 <= num_ceps <= o["num_mel_bins"]:
        raise ValueError(
            f"mfcc: num_ceps={num_ceps} must be between 1 and num_mel_bins={o['num_mel_bins']}")
    return FeaturePlan(dim=num_ceps, dct=_readonly(dct_matrix(num_ceps, o["num_mel_bins"])),
                       lifter=_readonly(lifter_coeffs(num_ceps, o["cepstral_lifter"])),
                       **common, **banks)


def _readonly(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    a.setflags(write=False)
    return a


def prepare_waveform(plan: FeaturePlan, waveform, where: str) -> np.ndarray:
    """Check ``waveform`` and return the 1-D contiguous array the kernels read.

    Takes a 1-D array-like of samples, or 2-D [channels, samples] (``channel`` option picks the
    row, -1 = first). Real numeric dtypes only; NaN/inf are rejected. ``where`` names the input in
    errors (e.g. "fbank" or "waveform 17").
    """
    wave = np.asarray(waveform)
    if wave.dtype.kind not in "iuf":
        raise ValueError(f"{where}: waveform must hold real numbers, got dtype {wave.dtype}")
    channel = plan.options["channel"]
    if wave.ndim == 2:
        if wave.shape[0] > wave.shape[1]:
            raise ValueError(
                f"{where}: a 2-D waveform must be [channels, samples], got shape {wave.shape}; "
                f"transpose soundfile's [samples, channels] output first")
        row = max(channel, 0)
        if row >= wave.shape[0]:
            raise ValueError(
                f"{where}: channel={channel} but the waveform has {wave.shape[0]} channels "
                f"(shape {wave.shape}, expected [channels, samples])")
        wave = wave[row]
    elif wave.ndim != 1:
        raise ValueError(
            f"{where}: waveform must be 1-D [samples] or 2-D [channels, samples], got shape "
            f"{wave.shape}")
    elif channel > 0:
        raise ValueError(f"{where}: channel={channel} but the waveform is 1-D (one channel)")
    if wave.dtype.type not in _NATIVE_DTYPES or not wave.dtype.isnative:
        wave = wave.astype(np.float64)
    wave = np.ascontiguousarray(wave)
    if wave.dtype.kind == "f":
        bad = K.first_nonfinite(wave)
        if bad >= 0:
            raise ValueError(f"{where}: waveform sample {bad} is {wave[bad]} (not finite)")
    return wave


class Workspace:
    """Scratch blocks for :func:`extract_range`: frames float64 [B, fft_size], their spectra
    complex128 [B, fft_size/2+1] and energies float64 [B]. One per thread; reused across calls.
    """

    def __init__(self, plan: FeaturePlan, block: int = 0):
        block = block or BLOCK_FRAMES
        self.frames = np.empty((block, plan.fft_size), dtype=np.float64)
        self.spec = np.empty((block, plan.fft_size // 2 + 1), dtype=np.complex128)
        self.energy = np.zeros(block, dtype=np.float64)


def new_output(plan: FeaturePlan, num_samples: int) -> np.ndarray:
    """Uninitialised float32 [frames, dim] output for a waveform of ``num_samples`` samples."""
    return np.empty((plan.num_frames(num_samples), plan.dim), dtype=np.float32)


def extract_range(plan: FeaturePlan, wave: np.ndarray, out: np.ndarray, first: int, stop: int,
                  ws: Workspace, sample_offset: int = 0, row0: int = 0) -> None:
    """Fill rows ``first - row0:stop - row0`` of ``out`` (see :func:`new_output`) with the
    features of frames ``first:stop`` of the prepared ``wave``, which holds the signal from
    sample ``sample_offset`` on (0: all of it; a streaming buffer otherwise). Rows depend only
    on their own frame, so disjoint ranges may be filled by different threads.
    """
    o = plan.options
    block = ws.frames.shape[0]
    for start in range(first, stop, block):
        n = min(block, stop - start)
        fr, sp, en = ws.frames[:n], ws.spec[:n], ws.energy[:n]
        K.extract_frames(wave, start, plan.window_size, plan.window_shift, o["snip_edges"],
                         o["dither"], o["seed"], o["remove_dc_offset"],
                         o["preemphasis_coefficient"], plan.window, plan.energy_mode, fr, en,
                         sample_offset)
        np.fft.rfft(fr, axis=1, out=sp)
        if plan.kind == "fbank":
            K.fbank_rows(sp, en, plan.offsets, plan.widths, plan.weights, o["use_power"],
                         o["use_log_fbank"], o["use_energy"], o["htk_compat"],
                         plan.log_energy_floor, out, start - row0)
        elif plan.kind == "mfcc":
            K.mfcc_rows(sp, en, plan.offsets, plan.widths, plan.weights, plan.dct, plan.lifter,
                        o["use_energy"], o["htk_compat"], plan.log_energy_floor, out,
                        start - row0)
        else:
            K.spectrogram_rows(sp, en, plan.log_energy_floor, out, start - row0)


def finish(plan: FeaturePlan, out: np.ndarray) -> np.ndarray:
    """Per-utterance post-processing once all rows are filled (``subtract_mean``)."""
    if plan.options["subtract_mean"] and out.shape[0]:
        out -= out.mean(axis=0, dtype=np.float64).astype(np.float32)
    return out


def extract(plan: FeaturePlan, wave: np.ndarray, ws: Workspace | None = None) -> np.ndarray:
    """Features of one prepared waveform (see :func:`prepare_waveform`): float32 [frames, dim]."""
    out = new_output(plan, wave.shape[0])
    total = out.shape[0]
    if total:
        extract_range(plan, wave, out, 0, total, ws or Workspace(plan, min(BLOCK_FRAMES, total)))
    return finish(plan, out)
