"""A bounded load test on 127.0.0.1: concurrent streams and uploads at once all get the right
words. The latency, RTF and memory figures are printed (``pytest -s``), never asserted: speed is
measured by ``asrkit bench serve`` (see its docstring), not by tests on a shared machine."""

import asyncio

import numpy as np
import pytest

from tests.serve.fixtures import RATE, WORDS, run

aiohttp = pytest.importorskip("aiohttp")

from asrkit.bench.sides import rss_bytes  # noqa: E402
from asrkit.serve.client import percentile, stream_audio, upload  # noqa: E402

STREAMS = 4
UPLOADS = 4
SPEED = 2.0          # the streams send at twice real time
LIMIT_S = 180        # the whole test stops by itself after this


def test_concurrent_streams_and_uploads(server, wav):
    path, x, _ = wav
    audio = np.concatenate([x, x])  # each stream says the words twice
    expected = " ".join(WORDS + WORDS)

    async def load():
        async with aiohttp.ClientSession() as s:
            streams = [stream_audio(server.url, audio, RATE, chunk_s=0.1, realtime=True,
                                    speed=SPEED, session=s) for _ in range(STREAMS)]
            uploads = [upload(server.url, path, session=s) for _ in range(UPLOADS)]
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            out = await asyncio.wait_for(asyncio.gather(*streams, *uploads), LIMIT_S)
            return out, loop.time() - t0

    results, wall = run(load())
    streams, uploads = results[:STREAMS], results[STREAMS:]
    for r in streams:
        assert not r.errors and r.text == expected
        words = [w["word"] for e in r.finals for w in e["words"]]
        assert words == WORDS + WORDS
    for status, body, _ in uploads:
        assert status == 200 and body["text"] == " ".join(WORDS)
    lags = [v for r in streams for v in r.partial_lags]
    finals = [r.final_latency for r in streams]
    took = [t for _, _, t in uploads]
    audio_s = STREAMS * len(audio) / RATE + UPLOADS * len(x) / RATE
    print(f"\nload: {STREAMS} streams at {SPEED:g}x real time + {UPLOADS} uploads in "
          f"{wall:.2f} s; lag p50/p95 {percentile(lags, 50):.3f}/{percentile(lags, 95):.3f} s, "
          f"final latency p50/p95 {percentile(finals, 50):.3f}/{percentile(finals, 95):.3f} s, "
          f"upload p50/p95 {percentile(took, 50):.3f}/{percentile(took, 95):.3f} s, "
          f"{audio_s / wall:.1f} s of audio per second, RSS {rss_bytes() / 2**20:.0f} MB")
    status, health = run(_health(server.url))
    assert health["streams"] == 0 and health["running"] == 0 and health["refused"] == 0


async def _health(url):
    async with aiohttp.ClientSession() as s, s.get(url + "/health") as r:
        return r.status, await r.json()
