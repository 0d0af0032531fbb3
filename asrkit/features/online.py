"""Streaming front end: resampling, Kaldi features and CMVN fed a waveform piece by piece.

Each class takes input in chunks of any size (``accept``) and returns what can be computed so
far; ``finish`` says the input has ended and returns the rest. Fed the whole input, or the same
input in any chunking, the outputs concatenated are the offline functions' outputs:

- ``OnlineResampler``: ``asrkit.features.resample`` (same filters and arithmetic, so equal to
  the last bit);
- ``OnlineFeatures``: ``asrkit.features.compute`` (fbank, mfcc, spectrogram; ``snip_edges``
  both ways: with ``snip_edges=False`` the last frames reflect at the end of the signal, so they
  come from ``finish``; dither keyed by the global frame index as offline);
- ``OnlineCmvn``: ``asrkit.features.normalize`` for ``none`` and ``global`` (every frame at
  once, exactly as offline) and ``sliding`` (Kaldi's
  ``apply-cmvn-sliding``: a frame waits until its window is complete, i.e. the first
  ``min_window`` frames of a stream wait for frame ``min_window - 1``; with ``center`` every
  frame waits ``cmn_window - cmn_window // 2 - 1`` frames, and the first ones for frame
  ``cmn_window - 1``). ``causal=True`` is Kaldi's online CMN
  instead (``OnlineCmvn`` without global stats): frame t is normalised at once with the
  frames ``max(0, t - cmn_window) .. t``, a growing window at the start of a stream, which
  differs from the offline numbers only on the first ``min_window`` frames.

``utterance`` and ``speaker`` CMVN (the whole recording's mean) cannot be computed before the
recording ends. ``OnlineCmvn`` approximates them with a running mean: the first
``prior_frames`` frames wait and are normalised with their own statistics (the prior), every
later frame t with the statistics of frames ``0 .. t``. A stream that ends within
``prior_frames`` frames gets exactly the offline numbers.

Deliberate difference: ``subtract_mean`` (a per-file mean) cannot be streamed and is refused.
"""

from __future__ import annotations

import math

import numpy as np

from asrkit.features._options import KINDS
from asrkit.features._pipeline import BLOCK_FRAMES, Workspace, extract_range, make_plan
from asrkit.features.cmvn import (
    SLIDING_VARIANCE_FLOOR,
    VARIANCE_FLOOR,
    check_normalize_options,
    normalize,
    sliding_windows,
)

__all__ = ["OnlineCmvn", "OnlineFeatures", "OnlineResampler"]


def _samples(x, where: str) -> np.ndarray:
    """A 1-D float array of finite samples (ValueError naming ``where`` otherwise)."""
    x = np.asarray(x)
    if x.ndim != 1:
        raise ValueError(f"{where}: expected 1-D samples, got shape {x.shape}")
    if x.dtype.kind not in "iuf":
        raise ValueError(f"{where}: samples must be real numbers, got dtype {x.dtype}")
    if x.dtype.kind == "f" and x.size and not np.all(np.isfinite(x)):
        raise ValueError(f"{where}: sample {int(np.flatnonzero(~np.isfinite(x))[0])} of the "
                         "chunk is not finite")
    return x


class _Finished:
    """Refuses input after ``finish`` (a stream that ended cannot take more)."""

    finished = False

    def _check_open(self, what: str) -> None:
        if self.finished:
            raise ValueError(f"{what}: the input has ended (finish was called)")


class OnlineResampler(_Finished):
    """``resample(x, orig_freq, new_freq)`` computed chunk by chunk; float32 output.

    Output sample ``m`` needs input up to about ``lowpass_filter_width`` periods past its time,
    so each ``accept`` returns the outputs whose filter taps are all in; ``finish`` the rest
    (zero-padded at the end, as the offline function). Equal rates pass samples through.
    """

    def __init__(self, orig_freq: int, new_freq: int, lowpass_filter_width: int = 6,
                 rolloff: float = 0.99):
        from asrkit.features.perturb import _branches, _rate

        orig, new = _rate(orig_freq, "orig_freq"), _rate(new_freq, "new_freq")
        g = math.gcd(orig, new)
        self.orig, self.new = orig // g, new // g
        self.first, self.taps = (None, None) if orig == new else _branches(
            self.orig, self.new, lowpass_filter_width, float(rolloff), "sinc_interp_hann", None)
        self._buf = np.zeros(0, np.float32)
        self._offset_blocks = 0   # the buffer starts at input sample offset_blocks * orig
        self._next_block = 0      # first output block (of ``new`` samples) not yet returned
        self._num_in = 0

    def _blocks(self, stop_block: int, final: bool) -> np.ndarray:
        from asrkit.features.perturb import _polyphase_resample

        b0 = self._offset_blocks
        n_local = (stop_block - b0) * self.new
        if final:
            n_local = -(-self._num_in * self.new // self.orig) - b0 * self.new
        if n_local <= 0 or stop_block <= self._next_block and not final:
            return np.zeros(0, np.float32)
        out = _polyphase_resample(self._buf[None, :], self.first, self.taps, self.orig,
                                  self.new, n_local)[0]
        return out[(self._next_block - b0) * self.new:]

    def accept(self, x) -> np.ndarray:
        """Resampled samples (float32) that ``x`` (1-D, any length) completes."""
        self._check_open("resampler")
        x = _samples(x, "resampler").astype(np.float32)
        self._num_in += len(x)
        if self.first is None:
            return x.copy()
        self._buf = np.concatenate([self._buf, x])
        k_len = self.taps.shape[1]
        last_read = int(self.first.max()) + k_len  # block i reads up to i*orig + last_read
        stop = max((self._num_in - last_read) // self.orig + 1, 0)
        out = self._blocks(stop, False)
        self._next_block = max(stop, self._next_block)
        self._trim()
        return out

    def _trim(self) -> None:
        # keep what the next block's taps read, from a block boundary (the kernel's origin)
        first_read = self._next_block * self.orig + int(self.first.min())
        keep_from = max(first_read // self.orig, 0)
        drop = (keep_from - self._offset_blocks) * self.orig
        if drop > 0:
            self._buf = self._buf[drop:]
            self._offset_blocks = keep_from

    def finish(self) -> np.ndarray:
        """The last resampled samples (the offline length is ``ceil(n * new / orig)``)."""
        self._check_open("resampler")
        self.finished = True
        if self.first is None:
            return np.zeros(0, np.float32)
        return self._blocks(0, True)


class OnlineFeatures(_Finished):
    """Kaldi features of a waveform given in chunks: ``compute(kind, whole, **opts)`` row by
    row. ``accept(samples)`` returns float32 ``[n, dim]``, the frames whose windows are complete;
    ``finish()`` the rest (with ``snip_edges=False``, the frames that reflect at the end).

    Samples are taken as given (int16 scale for Kaldi's numbers). Only the samples the next
    frames read are kept, so memory does not grow with the stream.
    """

    def __init__(self, kind: str, **opts):
        if kind not in KINDS:
            raise ValueError(f"unknown feature kind {kind!r}; expected one of "
                             f"{', '.join(KINDS)}")
        self.plan = make_plan(kind, opts)
        o = self.plan.options
        if o["subtract_mean"]:
            raise ValueError(f"{kind}: subtract_mean (a per-file mean) cannot be computed "
                             "online; normalise with CMVN instead")
        if o["channel"] > 0:
            raise ValueError(f"{kind}: channel={o['channel']}: online features take one "
                             "channel (mix or pick it first)")
        self.min_samples = o["min_duration"] * o["sample_frequency"]
        self._buf = np.zeros(0, np.float32)
        self._offset = 0        # sample index of _buf[0]
        self._num_samples = 0   # samples accepted so far
        self.frames_done = 0    # frames returned so far
        self._ws = Workspace(self.plan, BLOCK_FRAMES)

    @property
    def dim(self) -> int:
        """Feature dimension."""
        return self.plan.dim

    @property
    def frame_shift_samples(self) -> int:
        return self.plan.window_shift

    def _start(self, frame: int) -> int:
        """First sample of ``frame``'s window (negative before the start: reflected)."""
        p = self.plan
        if p.options["snip_edges"]:
            return frame * p.window_shift
        return frame * p.window_shift + p.window_shift // 2 - p.window_size // 2

    def _rows(self, stop: int) -> np.ndarray:
        first = self.frames_done
        out = np.empty((max(stop - first, 0), self.plan.dim), np.float32)
        if stop > first:
            extract_range(self.plan, self._buf, out, first, stop, self._ws, self._offset, first)
            self.frames_done = stop
        # keep from the next frame's first sample (from 0 while a frame reflects at the start)
        keep = max(self._start(self.frames_done), 0)
        if keep > self._offset:
            self._buf = self._buf[keep - self._offset:]
            self._offset = keep
        return out

    def accept(self, samples) -> np.ndarray:
        """Float32 ``[n, dim]``: the frames ``samples`` (1-D, any length) completes."""
        self._check_open(self.plan.kind)
        x = _samples(samples, self.plan.kind)
        # float32 unless float64 samples come (int samples are exact in float32, as offline)
        dtype = np.float64 if x.dtype == np.float64 else self._buf.dtype
        self._buf = np.concatenate([self._buf.astype(dtype, copy=False), x.astype(dtype)])
        self._num_samples += len(x)
        if self._num_samples < self.min_samples:
            return np.zeros((0, self.plan.dim), np.float32)
        p = self.plan
        # frame f is complete once its window ends within the samples given; such a frame is
        # always one of the offline frames, whatever comes later
        stop = (self._num_samples - self._start(0) - p.window_size) // p.window_shift + 1
        return self._rows(max(stop, self.frames_done))

    def finish(self) -> np.ndarray:
        """Float32 ``[n, dim]``: the frames left at the end of the input (offline count)."""
        self._check_open(self.plan.kind)
        self.finished = True
        if self._num_samples < self.min_samples:
            return np.zeros((0, self.plan.dim), np.float32)
        total = self.plan.num_frames(self._num_samples)
        return self._rows(max(total, self.frames_done))


class OnlineCmvn(_Finished):
    """``normalize(feats, mode, ...)`` fed frames in chunks; see the module docstring.

    mode, norm_vars, cmn_window, min_window, center, stats: as ``normalize`` (``global``
    normalises each frame as it comes, with ``stats``). causal: ``sliding`` only,
    Kaldi's online CMN (no waiting; differs on the first ``min_window`` frames). prior_frames:
    ``utterance``/``speaker``: frames normalised with their own statistics before the running
    mean takes over. ``accept(feats [n, D])`` returns the frames ready, ``finish()`` the rest.
    ``delay_frames`` is the most frames a frame waits (0: none).
    """

    def __init__(self, mode: str, norm_vars: bool = False, cmn_window: int = 600,
                 min_window: int = 100, center: bool = False, causal: bool = False,
                 prior_frames: int = 100, stats=None):
        check_normalize_options(mode, cmn_window, min_window, center)
        if mode == "global" and stats is None:
            raise ValueError("cmvn mode 'global' needs the training set's stats")
        self.stats = None if stats is None else np.asarray(stats, np.float64)
        if mode in ("utterance", "speaker") and (
                isinstance(prior_frames, bool) or not isinstance(prior_frames, int)
                or prior_frames < 1):
            raise ValueError(f"prior_frames: expected a positive number of frames, got "
                             f"{prior_frames!r}")
        self.mode, self.norm_vars = mode, bool(norm_vars)
        self.cmn_window, self.min_window, self.center = cmn_window, min_window, bool(center)
        self.causal, self.prior_frames = bool(causal), prior_frames
        self._x = None           # float64 frames kept: [frames_in - len(_x), frames_in)
        self._csum = None        # global cumulative sums (sliding) kept alongside, one longer
        self._csq = None
        self._sum = self._sumsq = None   # running statistics (utterance, speaker)
        self.frames_in = 0
        self.frames_out = 0
        self.dim = None          # feature dimension, from the first frames

    @property
    def delay_frames(self) -> int:
        """Frames a frame may wait for its statistics (at the start of a stream)."""
        if self.mode in ("none", "global") or (self.mode == "sliding" and self.causal):
            return 0
        if self.mode == "sliding":  # centred: the first frame's window is the first cmn_window
            return self.cmn_window - 1 if self.center else self.min_window - 1
        return self.prior_frames - 1

    def accept(self, feats) -> np.ndarray:
        """Float32 ``[m, D]``: the normalised frames that ``feats`` ``[n, D]`` makes ready."""
        self._check_open("cmvn")
        x = np.asarray(feats)
        if x.ndim != 2 or (self.dim is not None and x.shape[1] != self.dim):
            raise ValueError(f"cmvn: expected frames [n, {self.dim or 'dims'}], got shape "
                             f"{x.shape}")
        self.dim = x.shape[1]
        if self.mode in ("none", "global"):
            self.frames_in += len(x)
            self.frames_out += len(x)
            return normalize(x, self.mode, self.norm_vars, self.stats)
        x = x.astype(np.float32).astype(np.float64)
        if self._x is None:
            d = x.shape[1]
            self._x = np.zeros((0, d))
            self._csum = np.zeros((1, d))
            self._csq = np.zeros((1, d))
            self._sum, self._sumsq = np.zeros(d), np.zeros(d)
        self._x = np.concatenate([self._x, x])
        self.frames_in += len(x)
        if self.mode == "sliding":
            self._csum = np.concatenate([self._csum, np.cumsum(
                np.concatenate([self._csum[-1:], x]), axis=0)[1:]])
            if self.norm_vars:
                self._csq = np.concatenate([self._csq, np.cumsum(
                    np.concatenate([self._csq[-1:], x * x]), axis=0)[1:]])
            return self._sliding(False)
        return self._running(False)

    def finish(self) -> np.ndarray:
        """Float32 ``[m, D]``: the frames still waiting."""
        self._check_open("cmvn")
        self.finished = True
        if self.mode in ("none", "global") or self._x is None:
            return np.zeros((0, self.dim or 0), np.float32)
        return self._sliding(True) if self.mode == "sliding" else self._running(True)

    # -- sliding window ---------------------------------------------------------------------
    def _windows(self, first: int, stop: int, final: bool):
        t = np.arange(first, stop, dtype=np.int64)
        if self.causal:
            return np.maximum(t - self.cmn_window, 0), t + 1
        if final:
            start, end = sliding_windows(self.frames_in, self.cmn_window, self.min_window,
                                         self.center)
            return start[first:stop], end[first:stop]
        # the window rules before the end is known (windows clipped to the end are final only)
        start, end = sliding_windows(stop + self.cmn_window + self.min_window,
                                     self.cmn_window, self.min_window, self.center)
        return start[first:stop], end[first:stop]

    def _sliding(self, final: bool) -> np.ndarray:
        first, n_in = self.frames_out, self.frames_in
        if final:
            stop = n_in
        elif self.causal:
            stop = n_in
        else:
            # frame t is ready once its (unclipped) window ends within the frames given
            lo, hi = first, n_in
            _, end = self._windows(lo, hi, False) if hi > lo else (None, np.zeros(0, int))
            ok = np.flatnonzero(end > n_in)
            stop = first + (int(ok[0]) if ok.size else hi - lo)
        if stop <= first:
            return np.zeros((0, self._x.shape[1]), np.float32)
        start, end = self._windows(first, stop, final)
        base = n_in - len(self._x)           # global index of _x[0] and of _csum[0]
        cbase = n_in + 1 - len(self._csum)   # global index of _csum[0]
        x = self._x[first - base: stop - base]
        n = (end - start).astype(np.float64)[:, None]
        total = self._csum[end - cbase] - self._csum[start - cbase]
        out = x - total / n
        if self.norm_vars:
            var = (self._csq[end - cbase] - self._csq[start - cbase]) / n - (total / n) ** 2
            out *= np.maximum(var, SLIDING_VARIANCE_FLOOR) ** -0.5
            out[(end - start) == 1] = 0.0
        self.frames_out = stop
        # keep the frames not yet returned, and the sums later windows read (a window starts
        # at most cmn_window frames before its frame, also when clipped at the end)
        self._x = self._x[stop - base:]
        keep_from = max(stop - self.cmn_window - 1, 0)
        if keep_from > cbase:
            self._csum = self._csum[keep_from - cbase:]
            if self.norm_vars:
                self._csq = self._csq[keep_from - cbase:]
        return out.astype(np.float32)

    # -- running mean -----------------------------------------------------------------------
    def _running(self, final: bool) -> np.ndarray:
        from asrkit.features.cmvn import apply_cmvn, cmvn_stats

        first, n_in = self.frames_out, self.frames_in
        base = n_in - len(self._x)
        if first < self.prior_frames:
            if n_in < self.prior_frames and not final:
                return np.zeros((0, self._x.shape[1]), np.float32)
            # the prior: the first frames with their own stats (all of them at the end)
            prior = self._x[:min(self.prior_frames, n_in)]
            out = apply_cmvn(prior.astype(np.float32), cmvn_stats(prior.astype(np.float32)),
                             norm_vars=self.norm_vars)
            x32 = prior.astype(np.float32)
            self._sum += x32.sum(axis=0, dtype=np.float64)
            self._sumsq += (x32 * x32).sum(axis=0, dtype=np.float64)
            first = self.frames_out = len(prior)
            rest = self._running_rows(self._x[first - base:])
            self._x = self._x[:0]
            return np.concatenate([out, rest])
        rest = self._running_rows(self._x[first - base:])
        self._x = self._x[:0]
        return rest

    def _running_rows(self, x: np.ndarray) -> np.ndarray:
        """Frames after the prior: each normalised with the stats of every frame up to it."""
        if not len(x):
            return np.zeros((0, x.shape[1]), np.float32)
        x32 = x.astype(np.float32)
        s = self._sum + np.cumsum(x32, axis=0, dtype=np.float64)
        q = self._sumsq + np.cumsum(x32 * x32, axis=0, dtype=np.float64)
        count = (self.frames_out + np.arange(1, len(x) + 1, dtype=np.float64))[:, None]
        mean = s / count
        if self.norm_vars:  # apply_cmvn's arithmetic: x * scale + offset, in float32
            scale = 1.0 / np.sqrt(np.maximum(q / count - mean * mean, VARIANCE_FLOOR))
            out = x32 * scale.astype(np.float32) + (-(mean * scale)).astype(np.float32)
        else:
            out = x32 + (-mean).astype(np.float32)
        self._sum, self._sumsq = s[-1], q[-1]
        self.frames_out += len(x)
        return out.astype(np.float32)
