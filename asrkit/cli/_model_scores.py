"""Log-probabilities of an acoustic model over a data directory with features (for decode).

Features are normalised as in training (``asrkit.features.normalize``): the mode and options the
model file recorded from its reader (``header["reader"]``: ``cmvn``, ``norm_vars``, and for
``sliding`` the window), else per-speaker stats from ``cmvn.scp`` when the data dir has one (the
default of ``asrkit train``). Utterances are batched by
length so padding stays small.
"""

from __future__ import annotations

import os
import sys
import tomllib

import numpy as np

BATCH_FRAMES = 20000  # padded input frames per forward pass


def feature_frame_shift(data_dir: str) -> float:
    """Seconds per feature frame from DATA_DIR/conf.toml (compute-features writes it), else 0.01."""
    conf = os.path.join(data_dir, "conf.toml")
    if os.path.exists(conf):
        with open(conf, "rb") as f:
            return float(tomllib.load(f).get("features", {}).get("frame_shift", 10.0)) / 1000.0
    return 0.01


def model_scores(model_path: str, data_dir: str):
    """Return (iterator of (utt, log_probs float32 [T', C] or None, error or None), seconds per
    output frame). An utterance whose features cannot be read, do not fit the model or are not
    finite comes with its error and no log-probs; a bad feats.scp/cmvn.scp line fails only
    the utterances it concerns."""
    from asrkit.cli.main import CommandError
    from asrkit.features import normalize
    from asrkit.io import DataDir, RandomAccessTable
    from asrkit.models import load

    try:
        model = load(model_path)
    except (OSError, ValueError, KeyError) as e:
        raise CommandError(f"{model_path}: {e}") from e
    d = DataDir.read(data_dir)
    if not d.has("feats.scp"):
        raise CommandError(f"{data_dir}: no feats.scp (run asrkit compute-features first)")
    from asrkit.recognizer.model_folder import normalization_settings

    try:
        norm = normalization_settings(model.header().get("reader", {}) or {},
                                      f"{model_path}: reader")
    except ValueError as e:
        raise CommandError(str(e)) from e
    mode = norm["cmvn"]
    cmvn = RandomAccessTable(f"scp:{os.path.join(data_dir, 'cmvn.scp')}", strict=False) \
        if mode == "speaker" and d.has("cmvn.scp") else None
    utt2spk = d.utt2spk if cmvn is not None else {}
    feats = RandomAccessTable(f"scp:{os.path.join(data_dir, 'feats.scp')}", strict=False)
    for error in feats.line_errors:
        print(f"asrkit: {error}; skipped", file=sys.stderr)
    num_frames = d.utt2num_frames() if d.has("utt2num_frames") else {}
    utts = sorted(feats.keys(), key=lambda u: (num_frames.get(u, 0), u))
    subsampling = 3000 / max(int(model.output_lengths(np.array([3000], np.int32))[0]), 1)
    frame_shift = feature_frame_shift(data_dir) * subsampling

    def normalised(utt):
        m = np.asarray(feats[utt], np.float32)
        if mode == "speaker" and cmvn is None:
            return m
        if mode == "speaker" and utt2spk.get(utt) not in cmvn:
            raise ValueError(f"speaker {utt2spk.get(utt)!r} of utterance {utt!r} has no CMVN "
                             f"stats in {data_dir}/cmvn.scp")
        stats = cmvn[utt2spk[utt]] if mode == "speaker" else norm["global_stats"]
        return normalize(m, mode, norm["norm_vars"], stats, norm["cmn_window"],
                         norm["min_cmn_window"], norm["cmn_center"])

    def generate():
        batch: list[tuple[str, np.ndarray]] = []

        def flush():
            T = max(m.shape[0] for _, m in batch)
            x = np.zeros((T, len(batch), model.input_dim), np.float32)
            lengths = np.array([m.shape[0] for _, m in batch], np.int32)
            for b, (_, m) in enumerate(batch):
                x[: m.shape[0], b] = m
            logp, out_len = model(x, lengths)
            for b, (utt, _) in enumerate(batch):
                yield utt, np.ascontiguousarray(logp[: out_len[b], b]), None
            batch.clear()

        for utt in utts:
            try:
                m = normalised(utt)
            except Exception as e:  # a bad utterance is reported, counted and skipped
                yield utt, None, f"cannot read features: {e}"
                continue
            if m.ndim != 2 or m.shape[1] != model.input_dim or m.shape[0] == 0:
                yield utt, None, (f"features {m.shape} do not fit the model "
                                  f"([frames, {model.input_dim}])")
                continue
            if not np.all(np.isfinite(m)):
                yield utt, None, "features are not finite (NaN or inf)"
                continue
            if batch and (len(batch) + 1) * max(m.shape[0], batch[-1][1].shape[0]) > BATCH_FRAMES:
                yield from flush()
            batch.append((utt, m))
        if batch:
            yield from flush()

    return generate(), frame_shift
