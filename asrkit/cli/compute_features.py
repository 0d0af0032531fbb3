"""Compute Kaldi features (fbank, MFCC, spectrogram) for a data directory, as Kaldi's
steps/make_fbank.sh + steps/compute_cmvn_stats.sh.

    asrkit compute-features data/train --config conf/fbank.toml --out fbank/train --jobs 4

OUT becomes a Kaldi data directory: a copy of DATA_DIR without the utterances that failed, with

  raw_<type>_<data>.<job>.ark/.scp   features (Kaldi binary float matrices), one archive per job
  feats.scp                          all jobs' scp files merged (absolute paths)
  cmvn.scp + cmvn_<data>.ark         CMVN stats per speaker (Kaldi double matrices) [cmvn] speaker
  cmvn_utt.scp + cmvn_utt_<data>.ark per-utterance stats                           [cmvn] utterance
  global_cmvn.stats                  one stats matrix over all utterances          [cmvn] global
  utt2num_frames, utt2dur            frames and seconds per utterance

Audio is read at int16 scale so features equal Kaldi's. An utterance whose audio is missing,
empty, corrupt or at the wrong sample rate is reported (utterance id and wav.scp entry),
skipped, and counted; the command still succeeds unless more than --max-fail-fraction of the
utterances failed. Each job writes its archive through a temporary file renamed when complete,
then its scp, then a done marker, so a rerun skips the jobs already done (for the same config,
utterances and audio files) and redoes the rest. Dither noise is seeded per utterance from the
config's seed and the utterance id, so results do not depend on --jobs.
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys
import time
import zlib

from asrkit.cli.main import CommandError

COMMAND = "compute-features"
HELP = "compute fbank/MFCC/spectrogram features and CMVN stats for a Kaldi data directory"

REGENERATED = ("feats.scp", "cmvn.scp", "utt2num_frames", "utt2dur")


def add_arguments(parser) -> None:
    """Add the command's options to ``parser``."""
    parser.add_argument("data_dir", metavar="DATA_DIR", help="Kaldi data directory to read")
    parser.add_argument("--config", required=True, metavar="TOML",
                        help="feature config with a [features] table (e.g. data/conf/fbank.toml)")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="output folder: archives plus a copy of the data dir with feats.scp")
    parser.add_argument("--jobs", type=int, default=1, metavar="N",
                        help="split the utterances into N parts computed in parallel processes "
                             "(default 1)")
    parser.add_argument("--max-fail-fraction", type=float, default=0.05, metavar="F",
                        help="fail (exit 1) when more than this fraction of utterances cannot "
                             "be computed (default 0.05)")
    parser.add_argument("--name", default=None,
                        help="data name used in archive names (default: DATA_DIR's basename)")
    parser.add_argument("--force", action="store_true",
                        help="recompute every part, even those a previous run completed")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


# ----------------------------------------------------------------------------- one part

_progress_queue = None


def _init_worker(queue, threads: int) -> None:
    global _progress_queue
    _progress_queue = queue
    # one job per process already fills the cores; keep Numba/BLAS from oversubscribing them
    for var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, str(threads))


def _utterance_seed(base: int, utt: str) -> int:
    return (int(base) + zlib.crc32(utt.encode("utf-8", errors="surrogateescape"))) % (2**31 - 1)


def compute_part(task: dict, tick=None) -> dict:
    """Compute the features of one part and write its archive, scp and done marker.

    ``task`` holds ``datadir`` (a DataDir with this part's utterances), ``utts``, ``config``
    (FeatureConfig), ``ark``, ``scp``, ``done`` paths and ``fingerprint``. ``tick()`` is called
    per utterance. Returns the part's record (also written to ``done``): frames, durations and
    failures per utterance.
    """
    import numpy as np

    from asrkit.features import compute, default_options
    from asrkit.io import TableWriter
    from asrkit.utils import atomic_write_text

    if tick is None and _progress_queue is not None:
        tick = lambda: _progress_queue.put(1)  # noqa: E731
    cfg = task["config"]
    defaults = default_options(cfg.kind)
    rate_wanted = cfg.sample_frequency
    base_seed = cfg.options.get("seed", defaults.get("seed", 0))
    num_frames: dict[str, int] = {}
    durations: dict[str, float] = {}
    failures: list[dict] = []
    with TableWriter(f"ark,scp:{task['ark']},{task['scp']}") as writer:
        audio = task["datadir"].audio(task["utts"], scale="int16", channel=cfg.channel,
                                      sample_rate=rate_wanted if cfg.resample else None)
        for u in audio:
            error = u.error
            if error is None and u.sample_rate != rate_wanted:
                error = (f"sample rate {u.sample_rate} Hz but the config expects {rate_wanted} Hz "
                         "(set resample = true in [audio] to resample)")
            if error is None:
                opts = dict(cfg.options)
                if "seed" in defaults:
                    opts["seed"] = _utterance_seed(base_seed, u.utt_id)
                try:
                    feats = np.asarray(compute(cfg.kind, u.waveform, **opts), dtype=np.float32)
                    if feats.shape[0] == 0:
                        error = (f"too short for one frame ({u.waveform.shape[0]} samples)")
                    elif not np.all(np.isfinite(feats)):
                        error = "features are not finite (NaN or inf)"
                except (ValueError, TypeError, FloatingPointError) as e:
                    error = f"feature extraction failed: {e}"
            if error is not None:
                failures.append({"utt": u.utt_id, "source": u.source, "error": error})
            else:
                writer.write(u.utt_id, feats)
                num_frames[u.utt_id] = int(feats.shape[0])
                durations[u.utt_id] = u.waveform.shape[0] / u.sample_rate
            if tick is not None:
                tick()
    record = {"fingerprint": task["fingerprint"], "num_frames": num_frames,
              "durations": durations, "failures": failures}
    atomic_write_text(task["done"], json.dumps(record, indent=1, sort_keys=True) + "\n")
    return record


# ----------------------------------------------------------------------------- planning

def _part_fingerprint(config_fp: str, d, utts: list[str]) -> str:
    """Hash of config, utterances and their audio (entries, and size/mtime of plain files)."""
    import hashlib

    from asrkit.io.wavscp import is_pipe

    h = hashlib.sha256(config_fp.encode())
    wav = d.wav_scp()
    segments = d.table("segments")
    for utt in utts:
        reco = segments[utt].split()[0] if utt in segments else utt
        source = wav.get(reco, "")
        h.update(f"{utt}\t{segments.get(utt, '')}\t{source}\n".encode(errors="surrogateescape"))
        path = re.sub(r":\d+$", "", source.strip()) if not is_pipe(source) else None
        if path:
            try:
                st = os.stat(path)
                h.update(f"{st.st_size}:{st.st_mtime_ns}\n".encode())
            except OSError:
                h.update(b"missing\n")
    return h.hexdigest()[:20]


def _read_done(path: str, fingerprint: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    return record if record.get("fingerprint") == fingerprint else None


def _run_parts(tasks: list[dict], jobs: int, total: int) -> list[dict]:
    """Run ``tasks`` (inline, or in ``jobs`` processes) with a progress bar; return records."""
    from asrkit.utils import progress

    if not tasks:
        return []
    bar = progress(total=total, desc="features", unit="utt")
    try:
        if jobs == 1 or len(tasks) == 1:
            return [compute_part(t, tick=lambda: bar.update(1)) for t in tasks]
        import multiprocessing as mp
        import queue as queue_mod
        from concurrent.futures import ProcessPoolExecutor, wait

        # spawn, not fork: the parent may hold Numba/OpenMP thread pools that fork would break
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        workers = min(jobs, len(tasks))
        threads = max(1, (os.cpu_count() or 1) // workers)
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx,
                                 initializer=_init_worker, initargs=(q, threads)) as pool:
            futures = [pool.submit(compute_part, t) for t in tasks]
            pending = set(futures)
            while pending:
                done, pending = wait(pending, timeout=0.2)
                while True:
                    try:
                        bar.update(q.get_nowait())
                    except queue_mod.Empty:
                        break
            return [f.result() for f in futures]
    finally:
        bar.close()


# ----------------------------------------------------------------------------- CMVN

def _write_cmvn(out: str, name: str, mode: str, feats_scp: str, utt2spk: dict) -> int:
    """Compute and write CMVN stats from the features; returns the number of stats matrices."""
    from asrkit.features import accumulate_cmvn_stats
    from asrkit.io import read_table, write_table
    from asrkit.io.kaldi_tables import write_value
    from asrkit.utils import atomic_open

    for stale in ("cmvn.scp", f"cmvn_{name}.ark", "cmvn_utt.scp", f"cmvn_utt_{name}.ark",
                  "global_cmvn.stats"):
        if os.path.exists(os.path.join(out, stale)):
            os.unlink(os.path.join(out, stale))
    if mode == "none":
        return 0
    stats: dict[str, object] = {}
    for utt, feats in read_table(f"scp:{feats_scp}"):
        key = {"speaker": utt2spk[utt], "utterance": utt, "global": "global"}[mode]
        stats[key] = accumulate_cmvn_stats(stats.get(key), feats)
    if mode == "global":
        if stats:
            with atomic_open(os.path.join(out, "global_cmvn.stats"), "wb") as f:
                write_value(f, stats["global"])
        return len(stats)
    stem = "cmvn" if mode == "speaker" else "cmvn_utt"
    write_table(f"ark,scp:{os.path.join(out, f'{stem}_{name}.ark')},"
                f"{os.path.join(out, f'{stem}.scp')}", dict(sorted(stats.items())))
    return len(stats)


# ----------------------------------------------------------------------------- command

def run(args) -> int:
    """Run compute-features; returns 0 on success, 1 when too many utterances failed."""
    from asrkit.io import (
        ConfigError,
        DataDir,
        DataDirError,
        load_feature_config,
        split_evenly,
        validate_data_dir,
    )
    from asrkit.io.datadir import c_sort_key
    from asrkit.utils import atomic_write_text

    t0 = time.time()
    if args.jobs < 1:
        raise CommandError(f"--jobs must be >= 1, got {args.jobs}")
    if not 0.0 <= args.max_fail_fraction <= 1.0:
        raise CommandError(f"--max-fail-fraction must be in [0, 1], got {args.max_fail_fraction}")
    try:
        cfg = load_feature_config(args.config)
    except ConfigError as e:
        raise CommandError(str(e)) from None
    data_dir = args.data_dir.rstrip("/") or "/"
    problems = validate_data_dir(data_dir, no_text=True, no_feats=True)
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        shown = "\n  ".join(str(p) for p in errors[:10])
        more = f"\n  ... and {len(errors) - 10} more" if len(errors) > 10 else ""
        raise CommandError(f"{data_dir} is not a valid data directory (fix it with "
                           f"'asrkit data fix {data_dir}'):\n  {shown}{more}")
    try:
        d = DataDir.read(data_dir)
    except DataDirError as e:
        raise CommandError(str(e)) from None
    out = os.path.abspath(args.out)
    if os.path.abspath(data_dir) == out:
        raise CommandError("--out must differ from DATA_DIR (it receives a copy of it)")
    os.makedirs(out, exist_ok=True)
    name = args.name or os.path.basename(os.path.abspath(data_dir))
    stem = f"raw_{cfg.kind}_{name}"
    utts = d.utt_ids()
    if not utts:
        raise CommandError(f"{data_dir}/utt2spk: no utterances")

    parts = [p for p in split_evenly(utts, args.jobs) if p]
    config_fp = cfg.fingerprint()
    tasks, records, skipped = [], {}, []
    for j, part in enumerate(parts, 1):
        files = {ext: os.path.join(out, f"{stem}.{j}.{ext}") for ext in ("ark", "scp", "done")}
        fp = _part_fingerprint(config_fp, d, part)
        record = None if args.force else _read_done(files["done"], fp)
        if record is not None and os.path.isfile(files["ark"]) and os.path.isfile(files["scp"]):
            records[j] = record
            skipped.append(j)
            continue
        for path in files.values():
            if os.path.exists(path):
                os.unlink(path)
        tasks.append({"index": j, "datadir": d.subset(part), "utts": part, "config": cfg,
                      "fingerprint": fp, **files})
    # temporaries of a run that was killed, and parts of an earlier run with more jobs
    for path in glob.glob(os.path.join(glob.escape(out), f".{glob.escape(stem)}.*.tmp")):
        os.unlink(path)
    for path in glob.glob(os.path.join(glob.escape(out), f"{glob.escape(stem)}.*.*")):
        m = re.match(rf"^{re.escape(stem)}\.(\d+)\.(ark|scp|done)$", os.path.basename(path))
        if m and int(m.group(1)) > len(parts):
            os.unlink(path)

    total = sum(len(t["utts"]) for t in tasks)
    try:
        for task, record in zip(tasks, _run_parts(tasks, args.jobs, total)):
            records[task["index"]] = record
    except Exception as e:  # a whole job died (disk full, killed worker): not per-utterance
        raise CommandError(f"feature job failed: {type(e).__name__}: {e}") from e

    failures = [f for j in sorted(records) for f in records[j]["failures"]]
    num_frames = {u: n for j in sorted(records) for u, n in records[j]["num_frames"].items()}
    durations = {u: s for j in sorted(records) for u, s in records[j]["durations"].items()}
    fail_fraction = len(failures) / len(utts)
    ok = fail_fraction <= args.max_fail_fraction
    summary = {
        "data_dir": data_dir, "out": out, "type": cfg.kind, "config": args.config,
        "num_utterances": len(utts), "num_done": len(num_frames), "num_failed": len(failures),
        "fail_fraction": fail_fraction, "max_fail_fraction": args.max_fail_fraction,
        "failures": failures, "num_parts": len(parts), "parts_skipped": skipped,
        "parts_computed": [t["index"] for t in tasks], "num_frames": sum(num_frames.values()),
        "cmvn": cfg.cmvn, "success": ok,
    }
    if ok and num_frames:
        keep = [u for u in utts if u in num_frames]
        copy = d.subset(keep)
        for table in REGENERATED:
            copy.tables.pop(table, None)
        copy.write(out)
        scp_lines = []
        for j in range(1, len(parts) + 1):
            with open(os.path.join(out, f"{stem}.{j}.scp"), encoding="utf-8") as f:
                scp_lines += f.readlines()
        scp_lines.sort(key=lambda line: c_sort_key(line.split(" ", 1)[0]))
        atomic_write_text(os.path.join(out, "utt2num_frames"),
                          "".join(f"{u} {num_frames[u]}\n" for u in keep))
        atomic_write_text(os.path.join(out, "utt2dur"),
                          "".join(f"{u} {durations[u]:.4f}\n" for u in keep))
        feats_scp = os.path.join(out, "feats.scp")
        atomic_write_text(feats_scp, "".join(scp_lines))
        summary["num_cmvn_stats"] = _write_cmvn(out, name, cfg.cmvn, feats_scp, d.utt2spk)
        with open(os.path.join(out, "conf.toml"), "w", encoding="utf-8") as f:
            f.write(cfg.to_toml())
    else:
        summary["success"] = ok = False
        stale = os.path.join(out, "feats.scp")
        if os.path.exists(stale):  # from an earlier run; would pass for this run's output
            os.unlink(stale)
    summary["seconds"] = round(time.time() - t0, 3)
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        _print_summary(summary)
    return 0 if ok else 1


def _print_summary(s: dict) -> None:
    for f in s["failures"]:
        error = f["error"]
        if f["source"] and error.startswith(f["source"].strip() + ": "):
            error = error[len(f["source"].strip()) + 2:]
        print(f"compute-features: utterance {f['utt']!r} ({f['source'] or 'no audio'}): "
              f"{error}", file=sys.stderr)
    if s["parts_skipped"]:
        print(f"skipped {len(s['parts_skipped'])} of {s['num_parts']} parts already done "
              f"(parts {', '.join(map(str, s['parts_skipped']))})")
    print(f"{s['type']}: {s['num_done']} of {s['num_utterances']} utterances done, "
          f"{s['num_frames']} frames, {s['num_failed']} failed "
          f"({100 * s['fail_fraction']:.1f}%, limit {100 * s['max_fail_fraction']:.1f}%) "
          f"in {s['seconds']:.1f} s")
    if s["success"]:
        print(f"wrote {s['out']}/feats.scp and CMVN stats ({s['cmvn']}); "
              f"{s['out']} is a Kaldi data directory")
    else:
        print(f"FAILED: too many utterances failed; {s['out']}/feats.scp not written",
              file=sys.stderr)
