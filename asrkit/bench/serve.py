"""Load on ``asrkit serve``: how many real-time streams (and concurrent uploads) one machine
holds.

The server runs as ``asrkit serve`` in its own process on 127.0.0.1 (port chosen by the system);
the clients run here, one asyncio task per stream (light next to the model work). For each level
of ``--streams``, that many streams send the same audio at real time (0.1 s chunks, start times
spread over one chunk) after an unmeasured warm-up of two short streams, and the figures
are:

* lag: for every partial and final result, wall time from sending the audio up to the result's
  end to receiving the result (p50, p95): how far recognition trails the speaker;
* final latency: from the end message to the last final result (p50, p95);
* server CPU RTF: the server's CPU seconds / (streams x audio seconds), and its memory (RSS
  after the level, and the peak);
* real time held: p95 lag below ``--max-lag`` seconds and no error.

Then ``--uploads`` files at once: request latency (p50, p95) and throughput (seconds of audio
per wall second). Figures depend on the machine's load; run it on an idle machine.

Example:
  asrkit bench serve --model-dir recipes/digits/exp/final --audio data/test/wav/a.wav \
      --streams 1,2,4,8 --uploads 8
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

from asrkit.bench import Case

NAME = "serve"
HELP = "asrkit serve under load: real-time streams held, lag and latency, uploads"


def add_arguments(parser) -> None:
    """Options: model folder, audio, levels, limits."""
    parser.add_argument("--model-dir", required=True, help="model folder to serve")
    parser.add_argument("--audio", nargs="+", required=True,
                        help="audio files, joined into the audio every stream sends")
    parser.add_argument("--streams", default="1,2,4", help="concurrent streams per level")
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="seconds of audio per stream (the audio repeats to fill it)")
    parser.add_argument("--uploads", type=int, default=8, help="concurrent uploads (0: none)")
    parser.add_argument("--workers", type=int, default=None,
                        help="server model threads (default: its default, one per core)")
    parser.add_argument("--max-lag", type=float, default=1.0,
                        help="p95 lag (s) under which a level counts as real time")


def _proc(pid: int) -> dict:
    """CPU seconds, RSS and peak RSS (bytes) of process ``pid`` (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    mem = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS", "VmHWM")):
                mem[line.split(":")[0]] = int(line.split()[1]) * 1024
    return {"cpu_s": cpu, "rss": mem.get("VmRSS", 0), "peak_rss": mem.get("VmHWM", 0)}


def start_server(model_dir: str, workers: int | None = None, max_streams: int = 64):
    """``(process, url)`` of an ``asrkit serve`` child on 127.0.0.1 (any free port)."""
    argv = [sys.executable, "-m", "asrkit", "serve", "--model-dir", model_dir, "--port", "0",
            "--max-streams", str(max_streams), "--max-queue", "64"]
    if workers:
        argv += ["--workers", str(workers)]
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    if " on http://" not in line:
        proc.kill()
        rest = proc.stderr.read()
        raise RuntimeError(f"asrkit serve did not start: {line}{rest}".strip())
    return proc, line.split(" on ")[1].split("/ ")[0]


def _audio(paths: list[str], rate: int, seconds: float):
    """float32 samples at ``rate``: the files joined and repeated to ``seconds``."""
    import numpy as np

    from asrkit.io import load_audio

    parts = [load_audio(p, sample_rate=rate)[0] for p in paths]
    x = np.concatenate(parts)
    reps = max(int(np.ceil(seconds * rate / len(x))), 1)
    return np.tile(x, reps)[: int(seconds * rate)]


async def _streams(url: str, x, rate: int, n: int):
    import aiohttp

    from asrkit.serve.client import stream_audio

    async def one(k):
        await asyncio.sleep(0.1 * k / n)
        return await stream_audio(url, x, rate, chunk_s=0.1, realtime=True, session=session,
                                  timeout=60 + 4 * len(x) / rate)

    async with aiohttp.ClientSession() as session:
        return await asyncio.gather(*[one(k) for k in range(n)], return_exceptions=True)


async def _uploads(url: str, path: str, n: int):
    import aiohttp

    from asrkit.serve.client import upload

    async with aiohttp.ClientSession() as session:
        t0 = time.perf_counter()
        out = await asyncio.gather(*[upload(url, path, session=session) for _ in range(n)])
        return out, time.perf_counter() - t0


def run(args) -> list[Case]:
    """Start the server, load it level by level, return one Case per level."""
    from asrkit.recognizer import Recognizer
    from asrkit.serve.client import percentile

    rate = Recognizer.from_dir(args.model_dir).sample_rate
    x = _audio(args.audio, rate, args.seconds)
    audio_s = len(x) / rate
    proc, url = start_server(args.model_dir, args.workers)
    cases, held = [], 0
    try:
        asyncio.run(_streams(url, x[: 3 * rate], rate, 2))  # warm-up: compiled code, windows
        for n in [int(v) for v in args.streams.split(",")]:
            before = _proc(proc.pid)
            t0 = time.perf_counter()
            runs = asyncio.run(_streams(url, x, rate, n))
            wall = time.perf_counter() - t0
            after = _proc(proc.pid)
            failed = [r for r in runs if isinstance(r, BaseException)]
            ok = [r for r in runs if not isinstance(r, BaseException)]
            lags = [v for r in ok for v in r.partial_lags]
            finals = [r.final_latency for r in ok]
            errors = sum(len(r.errors) for r in ok) + len(failed)
            p95 = percentile(lags, 95)
            realtime = not errors and p95 is not None and p95 < args.max_lag
            if realtime:
                held = max(held, n)
            cpu = after["cpu_s"] - before["cpu_s"]
            cases.append(Case(f"streams={n} ({audio_s:.0f} s each, real time)",
                              percentile(finals, 50) or float("nan"), "-", None, {
                                  "lag p50/p95 s": f"{percentile(lags, 50):.3f} / {p95:.3f}"
                                  if lags else "-",
                                  "final latency p50/p95 s": f"{percentile(finals, 50):.3f} / "
                                  f"{percentile(finals, 95):.3f}" if finals else "-",
                                  "server CPU RTF": round(cpu / (n * audio_s), 4),
                                  "server RSS / peak MB": f"{after['rss'] / 2**20:.0f} / "
                                  f"{after['peak_rss'] / 2**20:.0f}",
                                  "wall s": round(wall, 1), "errors": errors,
                                  "real time held": realtime}))
        if args.uploads:
            results, wall = asyncio.run(_uploads(url, args.audio[0], args.uploads))
            times = [t for status, _, t in results if status == 200]
            statuses = sorted({status for status, _, _ in results})
            dur = sum(body.get("duration", 0) for status, body, _ in results if status == 200)
            cases.append(Case(f"uploads={args.uploads} at once", percentile(times, 50) or
                              float("nan"), "-", None, {
                                  "latency p50/p95 s": f"{percentile(times, 50):.3f} / "
                                  f"{percentile(times, 95):.3f}" if times else "-",
                                  "statuses": statuses,
                                  "throughput (audio s per wall s)": round(dur / wall, 2),
                                  "server peak RSS MB": round(_proc(proc.pid)["peak_rss"]
                                                              / 2**20)}))
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    cases.append(Case(f"most real-time streams held (of {args.streams}): {held}", 0.0, "-",
                      None, {"cores": os.cpu_count(), "max lag": args.max_lag}))
    return cases
