"""The training reader: a Kaldi data dir with features and transcripts -> padded minibatches.

Inputs: ``feats.scp`` (+ ``cmvn.scp`` per speaker, applied as Kaldi's ``apply-cmvn``; or one
``global`` normalisation for every recording, from the training set's statistics), ``text``,
``utt2spk`` and a ``tokens.txt``; ``utt2num_frames`` (written by ``asrkit compute-features``)
gives lengths without reading the features, and ``utt2dur`` or it balances the MPI shards.

Batching is CNTK's and ESPnet's bucketing: each epoch the utterances are shuffled with a generator
seeded by ``(seed, epoch)``, cut into pools of ``bucket_pool`` utterances, each pool is sorted by
length and cut into minibatches of at most ``minibatch_frames`` *padded* frames (utterances x the
longest one, so that memory per step is bounded; CNTK's ``minibatch_size`` in samples), and the
minibatches are shuffled. The plan of an epoch is a pure function of ``(seed, epoch)``, so the
reader's position in a checkpoint is just ``(epoch, next minibatch index)``. SpecAugment (training
only) draws from a generator seeded by ``(seed, epoch, index, rank)``: resuming replays it.

Bad utterances (no features, unreadable features, no/empty transcript, unknown token, zero
frames, more targets than the network has output frames for CTC) are reported with their id,
skipped and counted in ``problems``; they never stop a run.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable, Iterator

import numpy as np

from asrkit.distributed import shard_by_duration
from asrkit.io import DataDir, read_rxfilename
from asrkit.io.tokens import TokenError, TokenTable


class ReaderError(ValueError):
    """A data directory the reader cannot use at all (the message names the file)."""


@dataclasses.dataclass
class ReaderConfig:
    """Options of the ``[reader]`` section (one comment per field says what it does)."""

    data_dir: str = ""                 # Kaldi data dir with feats.scp and text
    tokens: str = ""                   # tokens.txt ("symbol id" lines)
    frame_targets: str = ""            # cross-entropy: rspecifier of per-frame int class ids
    #                                    (e.g. "scp:ali.scp" from ali-to-pdf), one per output
    #                                    frame; replaces the transcripts
    cv_data_dir: str = ""              # held-out data dir for the per-epoch CV (optional)
    unit: str = "char"                 # char | word | piece (see asrkit.io.tokens)
    minibatch_frames: int = 4000       # padded frames per minibatch (global, over all ranks)
    max_utts: int = 0                  # at most this many utterances per minibatch (0: no limit)
    bucket_pool: int = 1000            # utterances sorted by length together
    shuffle: bool = True               # shuffle utterances and minibatches every epoch
    sortagrad: int = 0                 # the first this many epochs go shortest first (Deep
    #                                    Speech 2's SortaGrad: CTC leaves its all-blank start
    #                                    sooner on short utterances)
    seed: int = 0                      # shuffling and augmentation seed
    cmvn: str = "speaker"              # speaker (cmvn.scp; none if absent) | utterance |
    #                                    sliding | global | none (asrkit.features.normalize)
    global_cmvn: str = ""              # global: a Kaldi stats file [2, D+1] (asrkit
    #                                    compute-features' global_cmvn.stats); empty: the
    #                                    statistics of data_dir's features, computed once
    norm_vars: bool = False            # CMVN also normalises variances
    cmn_window: int = 600              # sliding: window in frames (apply-cmvn-sliding's)
    min_cmn_window: int = 100          # sliding: shortest window at the start (not centred)
    cmn_center: bool = False           # sliding: window centred on the frame, else trailing
    max_frames: int = 0                # skip utterances longer than this (0: keep all)
    stack_frames: int = 1              # low frame rate: stack this many frames ...
    subsample_frames: int = 1          # ... every this many (done by the network's first op)
    spec_augment: dict = dataclasses.field(default_factory=dict)  # asrkit.features.spec_augment
    #                                    options; empty: no augmentation

    def normalization(self) -> dict:
        """The feature normalisation settings (kept in model files and model folders); for
        ``global`` with ``global_stats``, the statistics as nested lists ``[2][D+1]``."""
        out = {"cmvn": self.cmvn, "norm_vars": self.norm_vars, "cmn_window": self.cmn_window,
               "min_cmn_window": self.min_cmn_window, "cmn_center": self.cmn_center}
        if self.cmvn == "global":
            out["global_stats"] = training_set_stats(self.data_dir, self.global_cmvn).tolist()
        return out


@functools.lru_cache(maxsize=8)
def training_set_stats(data_dir: str, stats_file: str = "") -> np.ndarray:
    """float64 ``[2, D+1]`` Kaldi CMVN stats for ``global`` normalisation: ``stats_file``'s when
    given, else accumulated over every readable utterance of ``data_dir``'s ``feats.scp`` (all
    of it, not a rank's shard, so every MPI rank normalises alike). Raises ReaderError naming
    the file."""
    from asrkit.features import accumulate_cmvn_stats
    from asrkit.features.cmvn import check_global_stats
    from asrkit.io.kaldi_tables import TableError, read_table_entries

    where = stats_file or f"{data_dir}/feats.scp"
    if stats_file:
        try:
            stats = np.asarray(read_rxfilename(stats_file), dtype=np.float64)
        except Exception as e:  # noqa: BLE001 - any unreadable file is the same error
            raise ReaderError(f"{stats_file}: cannot read CMVN stats ([reader] global_cmvn): "
                              f"{e}") from None
    else:
        stats = None
        try:  # a damaged entry is the reader's to report (and skip): not counted here
            for entry in read_table_entries(f"scp:{where}"):
                feats = entry.value if entry.error is None else None
                if feats is not None and np.ndim(feats) == 2 and len(feats) and (
                        stats is None or feats.shape[1] == stats.shape[1] - 1) and \
                        np.isfinite(feats).all():
                    stats = accumulate_cmvn_stats(stats, feats)
        except (OSError, TableError) as e:
            raise ReaderError(f"{where}: cannot read: {e}") from None
        if stats is None:
            raise ReaderError(f"{where}: no readable features for the global CMVN statistics")
    try:
        return check_global_stats(stats)
    except ValueError as e:
        raise ReaderError(f"{where}: {e}") from None


@dataclasses.dataclass
class Batch:
    """One minibatch.

    feats float32 ``[T, B, D]`` zero-padded; lengths int32 ``[B]``; targets int32 ``[B, S]``
    padded with 0; target_lengths int32 ``[B]``; utt_ids: the B utterances; index: position in
    the epoch's plan; skipped: ``(utt, reason)`` of utterances dropped while loading.
    """

    feats: np.ndarray
    lengths: np.ndarray
    targets: np.ndarray
    target_lengths: np.ndarray
    utt_ids: list[str]
    index: int = 0
    skipped: list = dataclasses.field(default_factory=list)

    @property
    def size(self) -> int:
        """Number of utterances."""
        return len(self.utt_ids)

    @property
    def frames(self) -> int:
        """Real (unpadded) input frames."""
        return int(self.lengths.sum())


def pad_batch(feats: list[np.ndarray], targets: list[np.ndarray], dim: int) -> tuple:
    """Pad lists of ``[T_b, D]`` features and ``[S_b]`` targets into batch arrays.

    Returns ``(feats [T, B, D] float32, lengths int32 [B], targets int32 [B, S],
    target_lengths int32 [B])``.
    """
    B = len(feats)
    lengths = np.array([len(f) for f in feats], np.int32)
    tl = np.array([len(t) for t in targets], np.int32)
    x = np.zeros((int(lengths.max()) if B else 0, B, dim), np.float32)
    y = np.zeros((B, int(tl.max()) if B else 0), np.int32)
    for b, (f, t) in enumerate(zip(feats, targets)):
        x[: len(f), b] = f
        y[b, : len(t)] = t
    return x, lengths, y, tl


def ctc_min_frames(target: np.ndarray) -> int:
    """Fewest frames CTC needs for ``target``: its length plus one blank per repeated label."""
    t = np.asarray(target)
    return int(len(t) + np.count_nonzero(t[1:] == t[:-1])) if len(t) else 0


class Reader:
    """Minibatches of one data directory for one rank.

    config: ReaderConfig; data_dir: overrides ``config.data_dir`` (e.g. the CV set); training:
    shuffle + augmentation (False: sorted by length, no augmentation); rank/size: this rank's
    shard (``shard_by_duration``); minibatch_frames: this rank's share (default: the config's
    global size divided by ``size``); output_lengths: input lengths -> network output lengths
    (the CTC feasibility check; None skips it); log: where problems are reported.
    """

    def __init__(self, config: ReaderConfig, data_dir: str | None = None, *, training: bool = True,
                 rank: int = 0, size: int = 1, minibatch_frames: int | None = None,
                 output_lengths: Callable | None = None, tokens: TokenTable | None = None,
                 log=None):
        self.config = config
        self.data_dir = data_dir or config.data_dir
        self.training = training
        self.rank, self.size = rank, size
        self.minibatch_frames = (minibatch_frames if minibatch_frames is not None
                                 else max(config.minibatch_frames // size, 1))
        self.log = log if log is not None else (lambda msg: print(msg, file=sys.stderr))
        self.tokens = tokens or TokenTable.read(config.tokens, config.unit)
        self.problems: list[tuple[str, str]] = []
        self._reported: set[tuple[str, str]] = set()
        d = DataDir.read(self.data_dir)
        self.datadir = d
        if not d.has("feats.scp"):
            raise ReaderError(f"{self.data_dir}/feats.scp: no such file (make features with "
                              "asrkit compute-features)")
        frame_targets = None
        if config.frame_targets:
            from asrkit.io import read_table_dict

            try:
                frame_targets = read_table_dict(config.frame_targets)
            except Exception as e:  # noqa: BLE001 - reported with the rspecifier
                raise ReaderError(f"{config.frame_targets}: cannot read frame targets: {e}") \
                    from e
        elif not d.has("text"):
            raise ReaderError(f"{self.data_dir}/text: no such file")
        self.frame_level = frame_targets is not None
        self.feats_scp = d.table("feats.scp")
        self.utt2spk = d.utt2spk
        self.cmvn_scp = d.table("cmvn.scp") if config.cmvn == "speaker" else {}
        self._cmvn_cache: dict[str, np.ndarray] = {}
        self._norm = config.normalization()  # once: global computes the training set's stats
        self._global_stats = (None if self._norm["cmvn"] != "global"
                              else training_set_stats(config.data_dir, config.global_cmvn))
        self.targets: dict[str, np.ndarray] = {}
        self.num_frames: dict[str, int] = {}
        self.dim = None
        known_frames = d.utt2num_frames() if d.has("utt2num_frames") else {}
        text = d.text()
        for utt in d.utt_ids():
            reason = None
            if utt not in self.feats_scp:
                reason = "no features in feats.scp"
            elif frame_targets is not None:
                if utt not in frame_targets:
                    reason = f"no frame targets in {config.frame_targets}"
                else:
                    t = np.asarray(frame_targets[utt]).reshape(-1)
                    if t.size and (t.min() < 0 or t.max() >= len(self.tokens)):
                        reason = (f"frame target {int(t.max())} outside the "
                                  f"{len(self.tokens)} classes of tokens.txt")
                    self.targets[utt] = t.astype(np.int32)
            elif utt not in text:
                reason = "no transcript in text"
            elif not text[utt].strip():
                reason = "empty transcript"
            else:
                try:
                    self.targets[utt] = self.tokens.encode(text[utt])
                except TokenError as e:
                    reason = f"{e} (not in {config.tokens or 'tokens'})"
            if reason is None:
                n = known_frames.get(utt)
                if n is None:
                    feats = self._read(utt)
                    n = 0 if feats is None else len(feats)
                    if feats is None:
                        reason = "unreadable features"
                if reason is None:
                    self.num_frames[utt] = int(n)
                    reason = self._length_problem(utt, output_lengths)
            if reason is not None:
                self._skip(utt, reason)
                self.targets.pop(utt, None)
                self.num_frames.pop(utt, None)
        self.all_utts = [u for u in d.utt_ids() if u in self.num_frames]
        if not self.all_utts:
            raise ReaderError(f"{self.data_dir}: no usable utterances ({len(self.problems)} "
                              "skipped; see the messages above)")
        if self.problems:
            self.log(f"reader: {self.data_dir}: {len(self.all_utts)} utterances usable, "
                     f"{len(self.problems)} skipped")
        if size > 1:
            durs = d.utt2dur() if d.has("utt2dur") else {}
            weights = {u: float(durs.get(u, self.num_frames[u])) for u in self.all_utts}
            self.utts = shard_by_duration(weights, rank, size)
        else:
            self.utts = list(self.all_utts)
        if self.dim is None:
            # the first readable utterance, this rank's shard first: a rank whose shard is
            # empty, or whose features all fail to load, still knows the dimension
            for utt in self.utts + self.all_utts:
                if self._read(utt) is not None and self.dim is not None:
                    break
            else:
                raise ReaderError(f"{self.data_dir}/feats.scp: no utterance's features can be "
                                  "read (see the messages above)")

    # -- problems -------------------------------------------------------------------------
    def _skip(self, utt: str, reason: str) -> None:
        """Report and count a bad utterance (once, however many epochs meet it)."""
        if (utt, reason) in self._reported:
            return
        self._reported.add((utt, reason))
        self.problems.append((utt, reason))
        self.log(f"reader: skipping utterance {utt} of {self.data_dir}: {reason}")

    def _length_problem(self, utt, output_lengths) -> str | None:
        n = self.num_frames[utt]
        if n == 0:
            return "zero feature frames"
        if self.config.max_frames and n > self.config.max_frames:
            return f"{n} frames, above max_frames {self.config.max_frames}"
        if output_lengths is not None and self.frame_level:
            out = int(output_lengths(np.array([n]))[0])
            if len(self.targets[utt]) != out:
                return (f"{len(self.targets[utt])} frame targets, but the network outputs "
                        f"{out} frames (of {n} input frames)")
        elif output_lengths is not None:
            out = int(output_lengths(np.array([n]))[0])
            need = ctc_min_frames(self.targets[utt])
            if need > out:
                return (f"target longer than input: {len(self.targets[utt])} tokens need "
                        f"{need} frames, the network outputs {out} (of {n} input frames)")
        return None

    # -- features -------------------------------------------------------------------------
    def _read(self, utt: str) -> np.ndarray | None:
        try:
            m = np.asarray(read_rxfilename(self.feats_scp[utt]), np.float32)
        except Exception as e:  # noqa: BLE001 - any unreadable ark is a skipped utterance
            self.log(f"reader: cannot read features of {utt} ({self.feats_scp[utt]}): {e}")
            return None
        if m.ndim != 2:
            return None
        if self.dim is None and len(m):
            self.dim = int(m.shape[1])
        return m

    def _normalise(self, utt: str, m: np.ndarray) -> np.ndarray:
        from asrkit.features import normalize

        norm = self._norm
        stats = self._global_stats
        if norm["cmvn"] == "speaker":
            spk = self.utt2spk.get(utt)
            if spk not in self.cmvn_scp:
                return m
            if spk not in self._cmvn_cache:
                self._cmvn_cache[spk] = np.asarray(read_rxfilename(self.cmvn_scp[spk]))
            stats = self._cmvn_cache[spk]
        return normalize(m, norm["cmvn"], norm["norm_vars"], stats, norm["cmn_window"],
                         norm["min_cmn_window"], norm["cmn_center"])

    # -- planning -------------------------------------------------------------------------
    def plan(self, epoch: int) -> list[list[str]]:
        """The minibatches (lists of utterance ids) of ``epoch``: a pure function of the seed."""
        cfg = self.config
        utts = list(self.utts)
        rng = np.random.default_rng([cfg.seed, epoch, 7919])
        shortest_first = self.training and epoch < cfg.sortagrad
        if self.training and cfg.shuffle and not shortest_first:
            utts = [utts[i] for i in rng.permutation(len(utts))]
            pool = max(cfg.bucket_pool, 1)
        else:
            pool = max(len(utts), 1)
        batches: list[list[str]] = []
        for start in range(0, len(utts), pool):
            chunk = sorted(utts[start:start + pool], key=lambda u: (self.num_frames[u], u))
            cur: list[str] = []
            longest = 0
            for u in chunk:
                n = self.num_frames[u]
                full = cur and ((len(cur) + 1) * max(longest, n) > self.minibatch_frames
                                or (cfg.max_utts and len(cur) >= cfg.max_utts))
                if full:
                    batches.append(cur)
                    cur, longest = [], 0
                cur.append(u)
                longest = max(longest, n)
            if cur:
                batches.append(cur)
        if self.training and cfg.shuffle and not shortest_first:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches

    def load(self, utt_ids: list[str], epoch: int = 0, index: int = 0) -> Batch:
        """Read, normalise and (training) augment ``utt_ids`` into a padded Batch.

        An utterance whose features cannot be read, have no frames or the wrong dimension,
        hold NaN/inf (before or after CMVN), or whose speaker's CMVN stats cannot be applied
        is reported by id, counted in ``problems`` and left out of the batch.
        """
        feats, targets, kept, skipped = [], [], [], []
        for u in utt_ids:
            m = self._read(u)
            reason = self._feature_problem(m)
            if reason is None:
                try:
                    m = self._normalise(u, m)
                except Exception as e:  # noqa: BLE001 - unreadable or mismatched stats
                    reason = (f"cannot apply the CMVN stats of speaker {self.utt2spk.get(u)!r} "
                              f"({type(e).__name__}: {str(e)[:200]})")
                else:
                    bad = _non_finite(m)
                    if bad:
                        reason = f"{bad} after CMVN ({self.config.cmvn})"
            if reason is not None:
                self._skip(u, reason)
                skipped.append((u, reason))
                continue
            feats.append(m)
            targets.append(self.targets[u])
            kept.append(u)
        x, lengths, y, tl = pad_batch(feats, targets, self.dim or 0)
        if self.training and self.config.spec_augment and len(kept):
            from asrkit.features import spec_augment

            seed = [self.config.seed, epoch, index, self.rank, 104729]
            x = spec_augment(x, lengths=lengths, rng=np.random.default_rng(seed),
                             **self.config.spec_augment)
        return Batch(x, lengths, y, tl, kept, index, skipped)

    def _feature_problem(self, m: np.ndarray | None) -> str | None:
        """Why features just read cannot be used (None: they can)."""
        if m is None:
            return "unreadable features"
        if len(m) == 0:
            return "zero feature frames"
        if self.dim is not None and m.shape[1] != self.dim:
            return f"feature dimension {m.shape[1]}, expected {self.dim}"
        return _non_finite(m)

    def batches(self, epoch: int, start: int = 0) -> Iterator[Batch]:
        """Yield the Batches of ``epoch`` from plan index ``start`` (the resume position)."""
        for i, utts in enumerate(self.plan(epoch)):
            if i >= start:
                yield self.load(utts, epoch, i)

    def __len__(self) -> int:
        return len(self.utts)


def _non_finite(m: np.ndarray) -> str | None:
    """None when every value of ``m [T, D]`` is finite, else what is wrong and where."""
    finite = np.isfinite(m)
    if finite.all():
        return None
    nan = int(np.isnan(m).sum())
    frame = int(np.argmin(finite.all(axis=1)))
    return (f"the features hold {nan} NaN and {int(m.size - finite.sum()) - nan} inf values "
            f"(first at frame {frame})")


# every number of the [reader] section, as a mathematical interval (see check_interval)
READER_RANGES = {"minibatch_frames": "[1, inf)", "max_utts": "[0, inf)",
                 "bucket_pool": "[1, inf)", "seed": "[0, 9.2e18]", "max_frames": "[0, inf)",
                 "stack_frames": "[1, 1024]", "subsample_frames": "[1, 1024]"}
# SpecAugment options: interval of each number (mask counts beyond this are typos: each mask
# is a pass over the utterance)
SPEC_AUGMENT_RANGES = {"num_freq_masks": "[0, 100]", "num_time_masks": "[0, 100]",
                       "freq_mask_width": "[0, inf)", "time_mask_width": "[0, inf)",
                       "time_mask_fraction": "[0, 1]", "time_warp": "[0, inf)"}


def reader_config_from_dict(section: dict, where: str, error=ValueError) -> ReaderConfig:
    """Build a ReaderConfig from a ``[reader]`` table; unknown keys and wrong types raise
    ``error`` naming ``where`` and the key."""
    fields = {f.name: f for f in dataclasses.fields(ReaderConfig)}
    defaults = ReaderConfig()
    kwargs = {}
    for k, v in section.items():
        if k not in fields:
            raise error(f"{where}.{k}: unknown key (known: {', '.join(sorted(fields))})")
        want = type(getattr(defaults, k))
        if want is float and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if not isinstance(v, want) or (want is int and isinstance(v, bool)):
            raise error(f"{where}.{k}: expected {want.__name__}, got {v!r}")
        kwargs[k] = v
    cfg = ReaderConfig(**kwargs)
    if cfg.unit not in ("char", "word", "piece"):
        raise error(f"{where}.unit: expected char, word or piece, got {cfg.unit!r}")
    from asrkit.features.cmvn import NormalizeOptionError, check_normalize_options

    try:
        check_normalize_options(cfg.cmvn, cfg.cmn_window, cfg.min_cmn_window, cfg.cmn_center)
    except NormalizeOptionError as e:
        key = {"mode": "cmvn", "min_window": "min_cmn_window", "center": "cmn_center"}.get(
            e.option, e.option)
        raise error(f"{where}.{key}: {e.reason}") from None
    if cfg.global_cmvn and cfg.cmvn != "global":
        raise error(f"{where}.global_cmvn: a statistics file is only for cmvn = \"global\" "
                    f"(cmvn is {cfg.cmvn!r})")
    from asrkit.config.acoustic_net import check_interval

    for k, interval in READER_RANGES.items():
        check_interval(getattr(cfg, k), interval, f"{where}.{k}", error)
    if cfg.spec_augment:
        _check_spec_augment(cfg.spec_augment, f"{where}.spec_augment", error)
    return cfg


def _check_spec_augment(options: dict, where: str, error) -> None:
    """Names, types and ranges of ``[reader.spec_augment]``; then one trial run on a tiny
    batch, so a value the options' own checks refuse fails here, naming the section."""
    import inspect

    from asrkit.config.acoustic_net import check_interval
    from asrkit.features import spec_augment

    params = inspect.signature(spec_augment).parameters
    known = set(params) - {"feats", "lengths", "seed", "rng"}
    for k, v in options.items():
        if k not in known:
            raise error(f"{where}.{k}: unknown option (known: {', '.join(sorted(known))})")
        default = params[k].default
        if isinstance(default, (int, float)) and not isinstance(default, bool):
            want = "integer" if isinstance(default, int) else "number"
            if isinstance(v, bool) or not isinstance(v, (int, float)) or (
                    isinstance(default, int) and not isinstance(v, int)):
                if not (k == "mask_value" and v == "mean"):
                    raise error(f"{where}.{k}: expected an {want}, got {v!r}")
            if k in SPEC_AUGMENT_RANGES:
                check_interval(v, SPEC_AUGMENT_RANGES[k], f"{where}.{k}", error)
            elif isinstance(v, (int, float)):
                check_interval(v, "(-inf, inf)", f"{where}.{k}", error)
        elif isinstance(default, str) and not isinstance(v, str):
            raise error(f"{where}.{k}: expected a string, got {v!r}")
    if "warp_mode" in options:  # the trial's 8 frames are too few to warp: try it on its own
        from asrkit.features.augment import resize_time

        try:
            resize_time(np.zeros((4, 2), np.float32), 3, options["warp_mode"])
        except (ValueError, KeyError) as e:
            raise error(f"{where}.warp_mode: {e}") from None
    try:
        spec_augment(np.zeros((8, 1, 4), np.float32), lengths=np.array([8], np.int32),
                     rng=np.random.default_rng(0), **options)
    except (ValueError, TypeError, KeyError) as e:
        raise error(f"{where}: {e}") from None
