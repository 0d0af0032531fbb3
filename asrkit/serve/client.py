"""A Python client of ``asrkit serve`` (aiohttp), with the timings a load test needs.

::

    import asyncio
    from asrkit.serve.client import stream_audio, upload

    result = asyncio.run(upload("http://127.0.0.1:8000", "call.wav"))
    run = asyncio.run(stream_audio("http://127.0.0.1:8000", samples, 16000, realtime=True))
    run.finals, run.final_latency, run.partial_lags

``stream_audio`` sends int16 PCM in ``chunk_s`` pieces (at real time when asked) and records, for
every event, how far the recognised audio lags behind the audio sent (``partial_lags``), and the
time from the end message to the last final result (``final_latency``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import time

import numpy as np


@dataclasses.dataclass
class StreamRun:
    """What one stream sent and received.

    events: every JSON message after "ready"; finals: the final events; errors: the error
    messages; partial_lags: seconds between the wall time of each partial/final event and the
    wall time its ``end`` (seconds of audio) was sent; final_latency: seconds from the end
    message to the "done" message; audio_s: seconds of audio sent; wall_s: the stream's
    duration.
    """

    events: list[dict]
    finals: list[dict]
    errors: list[str]
    partial_lags: list[float]
    final_latency: float
    audio_s: float
    wall_s: float

    @property
    def text(self) -> str:
        """The final results' texts joined."""
        return " ".join(e["text"] for e in self.finals if e["text"])


def stream_url(url: str, rate: int, fmt: str = "s16le", **query) -> str:
    """The WebSocket URL of ``/v1/stream`` under server ``url`` (http -> ws)."""
    base = "ws" + url[4:] if url.startswith("http") else url
    extra = "".join(f"&{k}={v}" for k, v in query.items())
    return f"{base}/v1/stream?rate={rate}&format={fmt}{extra}"


async def stream_audio(url: str, samples: np.ndarray, rate: int, chunk_s: float = 0.1,
                       realtime: bool = False, speed: float = 1.0, session=None,
                       timeout: float = 300.0, **query) -> StreamRun:
    """Stream float samples ``[n]`` in [-1, 1] (sent as s16le) at ``rate`` to server ``url``.

    realtime: pace the chunks at ``speed`` x real time (else as fast as the socket takes them).
    query: stream options (``partial_interval``). Raises RuntimeError when the stream cannot
    open, and TimeoutError past ``timeout`` seconds.
    """
    import aiohttp

    own = session is None
    session = session or aiohttp.ClientSession()
    pcm = (np.clip(np.asarray(samples, np.float32), -1, 1) * 32767).astype("<i2")
    step = max(int(chunk_s * rate), 1)
    sent_at: list[tuple[float, float]] = []  # (seconds of audio sent, wall time)
    events, errors, lags = [], [], []
    try:
        async with asyncio.timeout(timeout), session.ws_connect(stream_url(url, rate,
                                                                           **query)) as ws:
            ready = json.loads((await ws.receive()).data)
            if ready.get("type") != "ready":
                raise RuntimeError(f"the stream did not open: {ready}")
            t0 = time.perf_counter()
            done = asyncio.get_running_loop().create_future()
            end_sent = [None]

            async def receive():
                async for msg in ws:
                    e = json.loads(msg.data)
                    now = time.perf_counter()
                    if e["type"] in ("partial", "final"):
                        events.append(e)
                        sent = next((w for s, w in sent_at if s >= e["end"] - 1e-6), None)
                        if sent is not None:
                            lags.append(now - sent)
                    elif e["type"] == "error":
                        errors.append(e["message"])
                    elif e["type"] == "done":
                        done.set_result(now)
                        return
                if not done.done():
                    done.set_result(None)

            reader = asyncio.create_task(receive())
            for i in range(0, len(pcm), step):
                if realtime:
                    due = t0 + i / rate / speed
                    await asyncio.sleep(max(0.0, due - time.perf_counter()))
                await ws.send_bytes(pcm[i: i + step].tobytes())
                sent_at.append((min(i + step, len(pcm)) / rate, time.perf_counter()))
            end_sent[0] = time.perf_counter()
            await ws.send_str(json.dumps({"type": "end"}))
            finished = await done
            await reader
    finally:
        if own:
            await session.close()
    if finished is None:
        raise RuntimeError(f"the stream closed without 'done' (errors: {errors})")
    return StreamRun(events, [e for e in events if e["type"] == "final"], errors, lags,
                     finished - end_sent[0], len(pcm) / rate, finished - t0)


async def upload(url: str, audio, name: str | None = None, session=None,
                 timeout: float = 300.0) -> tuple[int, dict, float]:
    """POST a file (a path or its bytes) to ``url/v1/transcribe``; returns (HTTP status, JSON
    body, seconds the request took)."""
    import aiohttp

    if isinstance(audio, (str, os.PathLike)):
        name = name or os.path.basename(audio)
        with open(audio, "rb") as f:
            audio = f.read()
    own = session is None
    session = session or aiohttp.ClientSession()
    try:
        t0 = time.perf_counter()
        async with session.post(f"{url}/v1/transcribe", data=audio,
                                params={"name": name or "upload"},
                                timeout=aiohttp.ClientTimeout(total=timeout)) as r:
            body = await r.json()
            return r.status, body, time.perf_counter() - t0
    finally:
        if own:
            await session.close()


def percentile(values, q: float) -> float | None:
    """The ``q``-th percentile (0-100) of ``values``, None when empty."""
    return float(np.percentile(values, q)) if len(values) else None
