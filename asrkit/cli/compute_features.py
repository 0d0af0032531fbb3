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

Nothing a published feats.scp points at is overwritten or deleted before a new feats.scp
replaces it: a part recomputed while an earlier output is in place is written to its other
name (raw_<type>_<data>.<job>.alt.ark, and back again the next time), and the files the new
output no longer uses are removed only after it is published. An interrupted or failed run
leaves the previous output whole. Worker processes (--jobs N) end with the command, however it
ends; a wav.scp pipe that runs past --pipe-timeout fails its utterance.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import signal
import sys
import time
import zlib

from asrkit.cli.main import CommandError, check_workers

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
    parser.add_argument("--pipe-timeout", type=float, default=None, metavar="S",
                        help="seconds a wav.scp 'cmd |' may run before its utterance fails "
                             "(default: $ASRKIT_PIPE_TIMEOUT, else 300)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


# ----------------------------------------------------------------------------- one part

_progress_queue = None


def _die_with_parent(parent: int) -> None:
    """End this worker when the process ``parent`` ends, however it ends (a killed parent must
    not leave workers writing): the kernel's parent-death signal on Linux, and a thread that
    watches the parent id everywhere."""
    import signal
    import threading

    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    if os.getppid() != parent:
        os._exit(1)
    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _init_worker(queue, threads: int, parent: int) -> None:
    global _progress_queue
    _die_with_parent(parent)
    _progress_queue = queue
    queue.put(("pid", os.getpid()))
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
        tick = lambda: _progress_queue.put(("tick", 1))  # noqa: E731
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
        pids: set[int] = set()

        def drain():
            while True:
                try:
                    kind, value = q.get_nowait()
                except queue_mod.Empty:
                    return
                if kind == "pid":
                    pids.add(value)
                else:
                    bar.update(value)

        pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init_worker,
                                   initargs=(q, threads, os.getpid()))
        try:
            futures = [pool.submit(compute_part, t) for t in tasks]
            pending = set(futures)
            while pending:
                done, pending = wait(pending, timeout=0.2)
                drain()
                for f in done:
                    if f.exception() is not None:  # one job failed: stop the others now
                        raise f.exception()
            results = [f.result() for f in futures]
        except BaseException:
            # an error, Ctrl-C or SIGTERM: no worker may go on writing once we are gone
            pool.shutdown(wait=False, cancel_futures=True)
            drain()
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            raise
        pool.shutdown(wait=True)
        return results
    finally:
        bar.close()


# ----------------------------------------------------------------------------- CMVN

def _referenced_paths(scp: str) -> set[str]:
    """The files the ``key file:offset`` lines of a script file point into (empty if none)."""
    paths = set()
    try:
        with open(scp, encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                parts = line.split(None, 1)
                if len(parts) == 2:
                    paths.add(os.path.abspath(re.sub(r":\d+(\[[^\]]*\])?$", "", parts[1].strip())))
    except OSError:
        pass
    return paths


def _free_name(out: str, names: list[str], in_use: set[str]) -> str:
    """The first of ``names`` (files in ``out``) that the published output does not use."""
    for n in names:
        if os.path.join(out, n) not in in_use:
            return n
    raise AssertionError("both names in use")  # pragma: no cover: two names, one output


def _write_cmvn(out: str, name: str, mode: str, feats_scp: str, utt2spk: dict) -> int:
    """Compute and write CMVN stats from the features; returns the number of stats matrices.

    The stats archive goes to a name the published cmvn.scp (or cmvn_utt.scp) does not point
    at, then the script file replaces the old one; stats files of other modes are removed.
    """
    from asrkit.features import accumulate_cmvn_stats
    from asrkit.io import read_table, write_table
    from asrkit.io.kaldi_tables import write_value
    from asrkit.utils import atomic_open

    stem = {"speaker": "cmvn", "utterance": "cmvn_utt"}.get(mode)
    stats: dict[str, object] = {}
    if mode != "none":
        for utt, feats in read_table(f"scp:{feats_scp}"):
            key = {"speaker": utt2spk[utt], "utterance": utt, "global": "global"}[mode]
            stats[key] = accumulate_cmvn_stats(stats.get(key), feats)
    keep: set[str] = set()
    if mode == "global" and stats:
        with atomic_open(os.path.join(out, "global_cmvn.stats"), "wb") as f:
            write_value(f, stats["global"])
        keep.add("global_cmvn.stats")
    elif stem is not None:
        scp = os.path.join(out, f"{stem}.scp")
        ark = _free_name(out, [f"{stem}_{name}.ark", f"{stem}_{name}.alt.ark"],
                         _referenced_paths(scp))
        write_table(f"ark,scp:{os.path.join(out, ark)},{scp}", dict(sorted(stats.items())))
        keep |= {f"{stem}.scp", ark}
    for stale in ("cmvn.scp", f"cmvn_{name}.ark", f"cmvn_{name}.alt.ark", "cmvn_utt.scp",
                  f"cmvn_utt_{name}.ark", f"cmvn_utt_{name}.alt.ark", "global_cmvn.stats"):
        if stale not in keep:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(out, stale))
    return len(stats)


# ----------------------------------------------------------------------------- command

def _part_files(out: str, stem: str, j: int, alt: bool) -> dict[str, str]:
    base = f"{stem}.{j}.alt" if alt else f"{stem}.{j}"
    return {ext: os.path.join(out, f"{base}.{ext}") for ext in ("ark", "scp", "done")}


def _check_paths(args, data_dir: str) -> str:
    """Paths of the wrong kind are errors before any work; returns the absolute --out."""
    from asrkit.cli.main import CommandError

    out = os.path.abspath(args.out)
    if os.path.exists(out) and not os.path.isdir(out):
        raise CommandError(f"{args.out}: exists and is not a directory (--out is a folder)")
    if os.path.abspath(data_dir) == out:
        raise CommandError("--out must differ from DATA_DIR (it receives a copy of it)")
    if args.name is not None and (not args.name or args.name in (".", "..")
                                  or any(c in args.name for c in "/\\") or
                                  any(c.isspace() for c in args.name)):
        raise CommandError(f"--name {args.name!r} must be a plain name (no '/', no spaces); it "
                           "becomes part of the archive names")
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise CommandError(f"{args.out}: cannot create the output folder: "
                           f"{e.strerror or e}") from None
    return out


def run(args) -> int:
    """Run compute-features; returns 0 on success, 1 when too many utterances failed."""
    import math

    from asrkit.io import (
        ConfigError,
        DataDir,
        DataDirError,
        load_feature_config,
        set_pipe_timeout,
        split_evenly,
        validate_data_dir,
    )
    from asrkit.io.datadir import c_sort_key
    from asrkit.utils import atomic_write_text

    t0 = time.time()
    check_workers(args.jobs, "--jobs")
    if not 0.0 <= args.max_fail_fraction <= 1.0:
        raise CommandError(f"--max-fail-fraction must be in [0, 1], got {args.max_fail_fraction}")
    if args.pipe_timeout is not None:
        if not (math.isfinite(args.pipe_timeout) and args.pipe_timeout > 0):
            raise CommandError(f"--pipe-timeout must be a number of seconds > 0, got "
                               f"{args.pipe_timeout}")
        set_pipe_timeout(args.pipe_timeout)
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
    out = _check_paths(args, data_dir)
    name = args.name or os.path.basename(os.path.abspath(data_dir))
    stem = f"raw_{cfg.kind}_{name}"
    utts = d.utt_ids()
    if not utts:
        raise CommandError(f"{data_dir}/utt2spk: no utterances")

    # what the published feats.scp points at stays untouched until a new one replaces it
    published = _referenced_paths(os.path.join(out, "feats.scp"))
    parts = [p for p in split_evenly(utts, args.jobs) if p]
    config_fp = cfg.fingerprint()
    tasks, records, skipped, chosen = [], {}, [], {}
    for j, part in enumerate(parts, 1):
        fp = _part_fingerprint(config_fp, d, part)
        slots = [_part_files(out, stem, j, alt) for alt in (False, True)]
        slots.sort(key=lambda f: f["ark"] not in published)  # a published slot first
        done = None
        if not args.force:
            for files in slots:
                record = _read_done(files["done"], fp)
                if record is not None and all(os.path.isfile(files[e]) for e in ("ark", "scp")):
                    done = (files, record)
                    break
        if done is not None:
            chosen[j], records[j] = done
            skipped.append(j)
            continue
        files = next(f for f in slots if f["ark"] not in published)
        for path in files.values():  # an unpublished leftover of an earlier run
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        chosen[j] = files
        tasks.append({"index": j, "datadir": d.subset(part), "utts": part, "config": cfg,
                      "fingerprint": fp, **files})
    # temporaries of a run that was killed
    for path in glob.glob(os.path.join(glob.escape(out), f".{glob.escape(stem)}.*.tmp")):
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
        scp_lines = []
        for j in range(1, len(parts) + 1):
            with open(chosen[j]["scp"], encoding="utf-8", errors="surrogateescape") as f:
                scp_lines += f.readlines()
        scp_lines.sort(key=lambda line: c_sort_key(line.split(" ", 1)[0]))
        # publish: the data-dir copy and per-utterance tables, then feats.scp (each file
        # atomically; all archives it names are complete), then the CMVN stats
        copy = d.subset(keep)
        for table in REGENERATED:
            copy.tables.pop(table, None)
        copy.write(out)
        atomic_write_text(os.path.join(out, "utt2num_frames"),
                          "".join(f"{u} {num_frames[u]}\n" for u in keep))
        atomic_write_text(os.path.join(out, "utt2dur"),
                          "".join(f"{u} {durations[u]:.4f}\n" for u in keep))
        feats_scp = os.path.join(out, "feats.scp")
        with atomic_open_text(feats_scp) as f:
            f.writelines(scp_lines)
        summary["num_cmvn_stats"] = _write_cmvn(out, name, cfg.cmvn, feats_scp, d.utt2spk)
        atomic_write_text(os.path.join(out, "conf.toml"), cfg.to_toml())
        # only now may the parts the new output does not use go
        used = {os.path.abspath(p) for f in chosen.values() for p in f.values()}
        for path in glob.glob(os.path.join(glob.escape(out), f"{glob.escape(stem)}.*")):
            if re.match(rf"^{re.escape(stem)}\.\d+(\.alt)?\.(ark|scp|done)$",
                        os.path.basename(path)) and os.path.abspath(path) not in used:
                os.unlink(path)
    else:
        summary["success"] = ok = False
    summary["seconds"] = round(time.time() - t0, 3)
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        _print_summary(summary)
    return 0 if ok else 1


def atomic_open_text(path: str):
    """``atomic_open`` for a UTF-8 text file whose lines may carry undecodable bytes."""
    from asrkit.utils import atomic_open

    return atomic_open(path, "w", encoding="utf-8", errors="surrogateescape")


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
        print(f"FAILED: too many utterances failed; {s['out']}/feats.scp not written (an "
              "earlier complete output there is left as it was)", file=sys.stderr)
