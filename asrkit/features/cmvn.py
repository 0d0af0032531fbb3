"""Cepstral mean and variance normalisation (CMVN), as Kaldi's ``transform/cmvn.cc``.

Statistics are Kaldi's matrix, exactly what ``compute-cmvn-stats`` writes: float64 ``[2, D+1]``,
row 0 the per-dimension sums followed by the frame count, row 1 the per-dimension sums of squares
followed by 0. Stats add, so the three usual modes are one accumulator over different frame sets:

- per utterance: ``apply_cmvn(x, cmvn_stats(x))``;
- per speaker: ``speaker_cmvn_stats(feats_by_utt, utt2spk)`` then ``apply_cmvn`` with the
  speaker's stats (``apply-cmvn --utt2spk``); ``apply_cmvn_corpus(..., mode="speaker")`` does both;
- global: ``global_cmvn_stats(feats_by_utt)``, one matrix over the corpus.

``apply_cmvn_sliding`` is Kaldi's ``apply-cmvn-sliding`` (a moving window, as online systems use),
and ``utterance_cmvn_batch`` normalises a padded batch ``[T, B, D]`` with its lengths so padding
never enters a statistic.

``normalize(feats, mode, ...)`` is the one place where a mode name (``NORMALIZE_MODES``: none,
utterance, sliding, speaker, global) becomes numbers: the training reader, ``asrkit decode
--model`` and the Recognizer all call it, so a model sees at inference the normalisation it was
trained with.

Differences from Kaldi: none intended in the numbers. Errors are ``ValueError`` where Kaldi calls
``KALDI_ERR``; the variance-flooring warning is not printed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

VARIANCE_FLOOR = 1.0e-20  # ApplyCmvn's floor on the per-dimension variance
SLIDING_VARIANCE_FLOOR = 1.0e-10  # SlidingWindowCmnInternal's floor
MIN_COUNT = 1.0  # ApplyCmvn refuses stats whose frame count is below one


def _as_feats(feats, what: str = "feats") -> np.ndarray:
    feats = np.asarray(feats)
    if feats.ndim != 2:
        raise ValueError(f"{what}: expected a [frames, dims] matrix, got shape {feats.shape}")
    if not np.issubdtype(feats.dtype, np.number):
        raise ValueError(f"{what}: expected numbers, got dtype {feats.dtype}")
    return feats


def _check_stats(stats, dim: int | None = None, what: str = "stats") -> np.ndarray:
    stats = np.asarray(stats, dtype=np.float64)
    if stats.ndim != 2 or stats.shape[0] not in (1, 2) or stats.shape[1] < 2:
        raise ValueError(f"{what}: expected a Kaldi CMVN stats matrix [2, D+1] (or [1, D+1], "
                         f"means only), got shape {stats.shape}")
    if dim is not None and stats.shape[1] - 1 != dim:
        raise ValueError(f"{what}: stats are for dimension {stats.shape[1] - 1} but the "
                         f"features have dimension {dim}")
    return stats


def accumulate_cmvn_stats(stats, feats, weights=None) -> np.ndarray:
    """Add the CMVN statistics of ``feats`` to ``stats`` in place (Kaldi's ``AccCmvnStats``).

    Takes ``stats`` float64 ``[2, D+1]`` or None (start from zeros), ``feats`` ``[T, D]`` of any
    float or integer dtype, and optional per-frame ``weights`` ``[T]`` (as
    ``compute-cmvn-stats --weights``). Returns ``stats`` (a new array when None was given).
    As in Kaldi, whose features are float32, each frame's ``x * w`` and ``x * x * w`` are
    rounded to float32 before they are summed in float64.
    """
    feats = _as_feats(feats)
    t, d = feats.shape
    if stats is None:
        stats = np.zeros((2, d + 1), dtype=np.float64)
    elif not (isinstance(stats, np.ndarray) and stats.dtype == np.float64
              and stats.shape[0] == 2):
        raise ValueError("stats: accumulate into a float64 numpy array [2, D+1] (or pass None)")
    _check_stats(stats, d)
    x = feats.astype(np.float32, copy=False)
    if weights is None:
        stats[0, :d] += x.sum(axis=0, dtype=np.float64)
        stats[1, :d] += (x * x).sum(axis=0, dtype=np.float64)
        stats[0, d] += t
    else:
        w = np.asarray(weights, dtype=np.float32)
        if w.shape != (t,):
            raise ValueError(f"weights: expected shape ({t},) to match {t} frames, got {w.shape}")
        wx = x * w[:, None]
        stats[0, :d] += wx.sum(axis=0, dtype=np.float64)
        stats[1, :d] += (x * x * w[:, None]).sum(axis=0, dtype=np.float64)
        stats[0, d] += w.sum(dtype=np.float64)
    return stats


def cmvn_stats(feats, weights=None) -> np.ndarray:
    """Return Kaldi's CMVN stats of one utterance: float64 ``[2, D+1]``.

    ``feats`` is ``[T, D]``; row 0 holds the per-dimension sums then the frame count (or the sum
    of ``weights`` ``[T]`` if given), row 1 the sums of squares then 0.
    """
    return accumulate_cmvn_stats(None, feats, weights)


def global_cmvn_stats(feats_by_utt: Mapping | Iterable) -> np.ndarray:
    """Return one stats matrix float64 ``[2, D+1]`` over a whole corpus.

    Takes a mapping ``utt -> [T, D]`` or an iterable of ``(utt, [T, D])`` pairs (e.g. what an ark
    reader yields). Raises ValueError naming the utterance whose dimension differs, or if empty.
    """
    stats = None
    for utt, feats in _items(feats_by_utt):
        try:
            stats = accumulate_cmvn_stats(stats, feats)
        except ValueError as e:
            raise ValueError(f"utterance {utt!r}: {e}") from None
    if stats is None:
        raise ValueError("global_cmvn_stats: no utterances given")
    return stats


def speaker_cmvn_stats(feats_by_utt: Mapping | Iterable,
                       utt2spk: Mapping[str, str]) -> dict[str, np.ndarray]:
    """Return ``{speaker: stats [2, D+1] float64}``, summing each speaker's utterances.

    ``feats_by_utt`` is a mapping ``utt -> [T, D]`` or an iterable of ``(utt, [T, D])`` pairs;
    ``utt2spk`` maps each utterance to its speaker (Kaldi's ``utt2spk``). Raises ValueError
    naming an utterance missing from ``utt2spk`` or of the wrong dimension.
    """
    by_spk: dict[str, np.ndarray] = {}
    for utt, feats in _items(feats_by_utt):
        if utt not in utt2spk:
            raise ValueError(f"utterance {utt!r} has no speaker in utt2spk")
        spk = utt2spk[utt]
        try:
            by_spk[spk] = accumulate_cmvn_stats(by_spk.get(spk), feats)
        except ValueError as e:
            raise ValueError(f"utterance {utt!r} (speaker {spk!r}): {e}") from None
    return by_spk


def _items(feats_by_utt):
    if isinstance(feats_by_utt, Mapping):
        return feats_by_utt.items()
    return feats_by_utt


def cmvn_transform(stats, norm_vars: bool = False,
                   reverse: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(scale, offset)`` float32 ``[D]`` such that CMVN is ``x * scale + offset``.

    Computed in float64 from ``stats`` ``[2, D+1]`` as Kaldi's ``ApplyCmvn``: mean = sum /
    count, var = sumsq / count - mean^2 floored at 1e-20, scale = 1 / sqrt(var) (1 without
    ``norm_vars``), offset = -mean * scale; with ``reverse`` (``ApplyCmvnReverse``) scale =
    sqrt(var) and offset = mean. Raises ValueError if the count is below 1 (Kaldi's threshold),
    if ``norm_vars`` is asked of means-only stats ``[1, D+1]``, or if a scale is not finite.
    """
    stats = _check_stats(stats)
    d = stats.shape[1] - 1
    if norm_vars and stats.shape[0] == 1:
        raise ValueError("variance normalization was requested but the stats have no "
                         "variance row (shape [1, D+1])")
    count = stats[0, d]
    if not count >= MIN_COUNT:
        raise ValueError(f"insufficient stats for cepstral mean and variance normalization: "
                         f"count = {count}")
    mean = stats[0, :d] / count
    if not norm_vars:
        scale = np.ones(d)
        offset = mean if reverse else -mean
    else:
        var = np.maximum(stats[1, :d] / count - mean * mean, VARIANCE_FLOOR)
        if reverse:
            scale, offset = np.sqrt(var), mean
        else:
            scale = 1.0 / np.sqrt(var)
            if not np.all(np.isfinite(scale)):
                raise ValueError("NaN or infinity in cepstral mean/variance computation")
            offset = -(mean * scale)
    return scale.astype(np.float32), offset.astype(np.float32)


def skip_dims_stats(stats, dims) -> np.ndarray:
    """Return a copy of ``stats`` ``[2, D+1]`` whose dimensions ``dims`` normalise to identity
    (mean 0, variance 1: Kaldi's ``FakeStatsForSomeDims``, behind ``apply-cmvn --skip-dims``)."""
    stats = np.array(_check_stats(stats), dtype=np.float64)
    if stats.shape[0] != 2:
        raise ValueError("skip_dims needs full stats [2, D+1]")
    d = stats.shape[1] - 1
    for i in dims:
        if not 0 <= i < d:
            raise ValueError(f"skip_dims: dimension {i} is outside [0, {d})")
        stats[0, i] = 0.0
        stats[1, i] = stats[0, d]
    return stats


def apply_cmvn(feats, stats, norm_vars: bool = False, norm_means: bool = True,
               reverse: bool = False, skip_dims=None) -> np.ndarray:
    """Normalise ``feats`` ``[T, D]`` with ``stats`` ``[2, D+1]`` as Kaldi's ``apply-cmvn``.

    Returns float32 ``[T, D]``: ``x - mean`` (and divided by the standard deviation with
    ``norm_vars``), the arithmetic done in float32 as Kaldi does on its BaseFloat matrices.
    ``norm_means=False`` returns the features unchanged (it cannot be combined with
    ``norm_vars``, as in Kaldi); ``reverse=True`` undoes a normalisation (``--reverse``);
    ``skip_dims`` lists dimensions left as they are (``--skip-dims``). Raises ValueError on a
    dimension mismatch or a frame count below 1.
    """
    feats = _as_feats(feats)
    stats = _check_stats(stats, feats.shape[1])
    if norm_vars and not norm_means:
        raise ValueError("you cannot normalize the variance but not the mean")
    out = feats.astype(np.float32, copy=True)
    if not norm_means:
        return out
    if skip_dims:
        stats = skip_dims_stats(stats, skip_dims)
    scale, offset = cmvn_transform(stats, norm_vars=norm_vars, reverse=reverse)
    if norm_vars:
        out *= scale
    out += offset
    return out


def apply_cmvn_corpus(feats_by_utt: Mapping, mode: str = "speaker",
                      utt2spk: Mapping[str, str] | None = None, norm_vars: bool = False,
                      norm_means: bool = True) -> dict[str, np.ndarray]:
    """Normalise a corpus ``{utt: [T, D]}``; returns ``{utt: float32 [T, D]}`` in the same order.

    ``mode`` is ``"utterance"`` (each utterance its own stats), ``"speaker"`` (stats pooled per
    speaker of ``utt2spk``), ``"global"`` (one stats matrix over everything) or ``"none"``
    (float32 copies, unnormalised).
    """
    if mode == "none":
        return {utt: np.array(x, dtype=np.float32) for utt, x in feats_by_utt.items()}
    if mode == "utterance":
        return {utt: apply_cmvn(x, cmvn_stats(x), norm_vars, norm_means)
                for utt, x in feats_by_utt.items()}
    if mode == "global":
        stats = global_cmvn_stats(feats_by_utt)
        return {utt: apply_cmvn(x, stats, norm_vars, norm_means)
                for utt, x in feats_by_utt.items()}
    if mode == "speaker":
        if utt2spk is None:
            raise ValueError("mode='speaker' needs utt2spk")
        spk_stats = speaker_cmvn_stats(feats_by_utt, utt2spk)
        return {utt: apply_cmvn(x, spk_stats[utt2spk[utt]], norm_vars, norm_means)
                for utt, x in feats_by_utt.items()}
    raise ValueError(f"unknown CMVN mode {mode!r}; expected 'utterance', 'speaker', 'global' "
                     "or 'none'")


def sliding_windows(num_frames: int, cmn_window: int = 600, min_window: int = 100,
                    center: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(start, end)`` int64 ``[num_frames]``: the frames ``[start, end)`` each frame of
    Kaldi's sliding-window CMN is normalised with (``SlidingWindowCmnInternal``'s rules)."""
    t = np.arange(num_frames, dtype=np.int64)
    if center:
        start = t - cmn_window // 2
        end = start + cmn_window
    else:
        start = t - cmn_window
        end = t + 1
    shift = np.minimum(start, 0)  # a window that starts before frame 0 slides right
    end = end - shift
    start = start - shift
    if not center:
        end = np.where(end > t, np.maximum(t + 1, min_window), end)
    over = np.maximum(end - num_frames, 0)
    start = np.maximum(start - over, 0)
    end = end - over
    return start, end


def apply_cmvn_sliding(feats, cmn_window: int = 600, min_window: int = 100, center: bool = False,
                       norm_vars: bool = False) -> np.ndarray:
    """Sliding-window mean (and variance) normalisation, as Kaldi's ``apply-cmvn-sliding``.

    Takes ``feats`` ``[T, D]`` and Kaldi's options (``--cmn-window``, ``--min-cmn-window``,
    ``--center``, ``--norm-vars``); returns float32 ``[T, D]``. Each frame has the mean of its
    window (``sliding_windows``) subtracted; with ``norm_vars`` it is divided by the window's
    standard deviation (variance floored at 1e-10; a one-frame window gives zeros).
    """
    feats = _as_feats(feats)
    if cmn_window <= 0 or min_window <= 0:
        raise ValueError("cmn_window and min_window must be positive")
    if not center and min_window > cmn_window:
        raise ValueError("min_window may not exceed cmn_window")
    x = feats.astype(np.float64)
    t, d = x.shape
    if t == 0:
        return np.zeros((0, d), np.float32)
    start, end = sliding_windows(t, cmn_window, min_window, center)
    n = (end - start).astype(np.float64)[:, None]
    csum = np.concatenate([np.zeros((1, d)), np.cumsum(x, axis=0)])
    total = csum[end] - csum[start]
    out = x - total / n
    if norm_vars:
        csq = np.concatenate([np.zeros((1, d)), np.cumsum(x * x, axis=0)])
        var = (csq[end] - csq[start]) / n - (total / n) ** 2
        out *= np.maximum(var, SLIDING_VARIANCE_FLOOR) ** -0.5
        out[(end - start) == 1] = 0.0
    return out.astype(np.float32)


def utterance_cmvn_batch(feats, lengths, norm_vars: bool = False) -> np.ndarray:
    """Per-utterance CMVN of a padded batch, ignoring padding.

    Takes ``feats`` ``[T, B, D]`` and ``lengths`` int ``[B]``; returns float32 ``[T, B, D]``
    where frames ``t < lengths[b]`` are normalised with the stats of sequence ``b``'s own frames
    (same numbers as ``apply_cmvn(x, cmvn_stats(x))`` per sequence) and padded frames are 0.
    """
    feats = np.asarray(feats)
    if feats.ndim != 3:
        raise ValueError(f"feats: expected a padded batch [T, B, D], got shape {feats.shape}")
    lengths = np.asarray(lengths)
    t_max, b, _ = feats.shape
    if lengths.shape != (b,) or np.any(lengths < 0) or np.any(lengths > t_max):
        raise ValueError(f"lengths: expected {b} values in [0, {t_max}], got {lengths.tolist()}")
    out = np.zeros(feats.shape, np.float32)
    for i in range(b):
        n = int(lengths[i])
        if n == 0:
            continue
        x = feats[:n, i]
        out[:n, i] = apply_cmvn(x, cmvn_stats(x), norm_vars=norm_vars)
    return out


NORMALIZE_MODES = ("none", "utterance", "sliding", "speaker", "global")


def check_global_stats(stats) -> np.ndarray:
    """float64 ``[2, D+1]``: ``stats`` (an array or nested lists) checked as the statistics of
    ``global`` normalisation: finite Kaldi CMVN stats with a frame count of at least 1.
    Raises ValueError saying what is wrong."""
    try:
        out = np.asarray(stats, dtype=np.float64)
    except (TypeError, ValueError):
        out = None
    if out is None or out.ndim != 2 or out.shape[0] != 2 or out.shape[1] < 2 or \
            not np.isfinite(out).all() or out[0, -1] < 1:
        shape = "" if out is None else f" (shape {out.shape})"
        raise ValueError(f"not Kaldi CMVN stats [2, D+1] of finite numbers with a frame count "
                         f"of at least 1{shape}")
    return out


class NormalizeOptionError(ValueError):
    """A bad ``normalize`` setting; ``option`` is its parameter name (``mode``, ``cmn_window``,
    ``min_window`` or ``center``) so callers can name their own key, ``reason`` what is wrong."""

    def __init__(self, option: str, reason: str):
        super().__init__(f"{option}: {reason}")
        self.option, self.reason = option, reason


def check_normalize_options(mode: str, cmn_window: int = 600, min_window: int = 100,
                            center: bool = False) -> None:
    """Raise NormalizeOptionError when ``normalize`` would refuse these settings."""
    if mode not in NORMALIZE_MODES:
        raise NormalizeOptionError("mode", f"expected one of {', '.join(NORMALIZE_MODES)}, got "
                                   f"{mode!r}")
    if mode != "sliding":
        return
    for name, v in (("cmn_window", cmn_window), ("min_window", min_window)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise NormalizeOptionError(name, f"expected a positive number of frames, got {v!r}")
    if not isinstance(center, (bool, np.bool_)):
        raise NormalizeOptionError("center", f"expected true or false, got {center!r}")
    if not center and min_window > cmn_window:
        raise NormalizeOptionError("min_window", f"{min_window} exceeds cmn_window "
                                   f"{cmn_window}")


def normalize(feats, mode: str, norm_vars: bool = False, stats=None, cmn_window: int = 600,
              min_window: int = 100, center: bool = False) -> np.ndarray:
    """Normalise one utterance's features ``[T, D]`` by ``mode``; returns float32 ``[T, D]``.

    - ``none``: unchanged (a float32 copy);
    - ``utterance``: the utterance's own stats (``apply_cmvn(x, cmvn_stats(x))``);
    - ``sliding``: Kaldi's ``apply-cmvn-sliding`` with ``cmn_window``, ``min_window`` (Kaldi's
      ``--min-cmn-window``) and ``center`` (``apply_cmvn_sliding``);
    - ``speaker``: the given ``stats`` ``[2, D+1]`` (the speaker's, from ``cmvn.scp``);
    - ``global``: the given ``stats`` ``[2, D+1]`` of the whole training set, the same for every
      recording (as ESPnet's global MVN): a short recording, or one cut close to its speech,
      keeps its spectral shape, which its own mean would take away.

    ``norm_vars`` also divides by the standard deviation. Raises ValueError on an unknown mode,
    bad window options, or ``speaker``/``global`` without stats.
    """
    check_normalize_options(mode, cmn_window, min_window, center)
    feats = _as_feats(feats)
    if mode == "none":
        return np.array(feats, dtype=np.float32)
    if mode == "utterance":
        return apply_cmvn(feats, cmvn_stats(feats), norm_vars=norm_vars)
    if mode == "sliding":
        return apply_cmvn_sliding(feats, cmn_window=int(cmn_window), min_window=int(min_window),
                                  center=bool(center), norm_vars=norm_vars)
    if stats is None:
        raise ValueError(f"cmvn mode {mode!r} needs "
                         + ("the speaker's stats" if mode == "speaker" else "the training set's "
                            "stats"))
    return apply_cmvn(feats, stats, norm_vars=norm_vars)
