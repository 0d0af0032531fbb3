"""WebSocket streaming: ``GET /v1/stream?rate=16000[&format=s16le|f32le][&partial_interval=S]``.

Protocol (JSON text messages, binary audio)::

    server -> {"type": "ready", "sample_rate": 16000, "model_rate": 8000, "format": "s16le"}
    client -> binary messages: little-endian PCM, mono, at ``rate`` (s16le: int16; f32le:
              float32 in [-1, 1]), any size
    server -> {"type": "partial" | "final", "segment", "start", "end", "text", "words": [...]}
    client -> {"type": "end"}     (or the text "EOF"): no more audio
    server -> the last events, then {"type": "done", "seconds": audio seconds} and closes

A malformed message (bad JSON, an unknown type, a binary message that is not a whole number of
samples, NaN samples) gets ``{"type": "error", "message": ...}`` and the stream goes on;
a stream that sends nothing for ``idle_timeout`` seconds, sends more than ``max_stream_s``
seconds of audio, or cannot be opened (bad rate, too many streams: close code 1013) gets the
error and is closed. Audio is decoded in the server's model threads: messages that arrive
while a chunk is being decoded are joined into the next one, so a slow moment adds latency
instead of a backlog of small jobs.
"""

from __future__ import annotations

import asyncio
import json
import logging

import numpy as np
from aiohttp import WSMsgType, web

from asrkit.serve.app import OPTIONS, POOL, RECOGNIZER, STATE

FORMATS = {"s16le": np.dtype("<i2"), "f32le": np.dtype("<f4")}
MIN_RATE, MAX_RATE = 1000, 384000
log = logging.getLogger("asrkit.serve")


def _query_options(query) -> tuple[int, str, dict]:
    """(rate, format, stream options) from the query; ValueError naming the parameter."""
    raw = query.get("rate")
    if raw is None:
        raise ValueError("rate: give the sample rate of the PCM you will send, e.g. "
                         "/v1/stream?rate=16000")
    try:
        rate = int(raw)
    except ValueError:
        raise ValueError(f"rate: expected a whole number of Hz, got {raw!r}") from None
    if not MIN_RATE <= rate <= MAX_RATE:
        raise ValueError(f"rate: expected {MIN_RATE} to {MAX_RATE} Hz, got {rate}")
    fmt = query.get("format", "s16le")
    if fmt not in FORMATS:
        raise ValueError(f"format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    options = {}
    if "partial_interval" in query:
        try:
            options["partial_interval"] = float(query["partial_interval"])
        except ValueError:
            raise ValueError(f"partial_interval: expected seconds, got "
                             f"{query['partial_interval']!r}") from None
    return rate, fmt, options


def _failure(e: Exception) -> str:
    """The message of a failed step: a RecognizerError's own, else a logged internal error."""
    from asrkit.recognizer import RecognizerError

    if isinstance(e, RecognizerError):
        return str(e)
    log.error("stream step failed", exc_info=e)
    return f"internal error: {type(e).__name__}: {e}"


def _event(e) -> dict:
    return {"type": e.kind, **e.as_dict()}


async def _send(ws: web.WebSocketResponse, message: dict) -> None:
    if not ws.closed:
        await ws.send_str(json.dumps(message))


async def handle(request: web.Request) -> web.WebSocketResponse:
    """GET /v1/stream: one recognition stream over a WebSocket (see the module docstring)."""
    from asrkit.recognizer import RecognizerError

    app = request.app
    rec, opts, pool, state = app[RECOGNIZER], app[OPTIONS], app[POOL], app[STATE]
    ws = web.WebSocketResponse(max_msg_size=4 * 1024 * 1024, heartbeat=30.0)
    await ws.prepare(request)
    if state["streams"] >= opts.max_streams:
        await _send(ws, {"type": "error", "message": f"the server is busy ({opts.max_streams} "
                                                     "streams open): try again later"})
        await ws.close(code=1013, message=b"busy")
        return ws
    try:
        rate, fmt, options = _query_options(request.query)
        stream = rec.stream(**{**opts.stream_options, **options})
    except (ValueError, RecognizerError) as e:
        await _send(ws, {"type": "error", "message": str(e)})
        await ws.close(code=1008, message=b"bad request")
        return ws
    state["streams"] += 1
    try:
        await _run(ws, stream, rate, FORMATS[fmt], pool, opts, rec.sample_rate, fmt)
    finally:
        state["streams"] -= 1
        if not ws.closed:
            await ws.close()
    return ws


async def _run(ws, stream, rate: int, dtype, pool, opts, model_rate: int, fmt: str) -> None:
    """Read messages into a queue; decode whatever audio has arrived, in order, until the end
    message, the close of the socket, or a limit."""
    await _send(ws, {"type": "ready", "sample_rate": rate, "model_rate": model_rate,
                     "format": fmt})
    audio: list[np.ndarray] = []
    arrived = asyncio.Event()
    ended = False
    closed = False
    samples_in = 0
    max_samples = int(opts.max_stream_s * rate)

    async def reader():
        nonlocal ended, closed, samples_in
        while not ended:
            try:
                msg = await ws.receive(timeout=opts.idle_timeout)
            except TimeoutError:
                await _send(ws, {"type": "error", "message": f"no message for "
                                                             f"{opts.idle_timeout:g} s: closing"})
                closed = True
                break
            if msg.type == WSMsgType.BINARY:
                if len(msg.data) % dtype.itemsize:
                    await _send(ws, {"type": "error", "message":
                                     f"a binary message of {len(msg.data)} bytes is not a whole "
                                     f"number of {dtype.itemsize}-byte samples: ignored"})
                    continue
                x = np.frombuffer(msg.data, dtype)
                if x.dtype.kind == "f" and not np.all(np.isfinite(x)):
                    await _send(ws, {"type": "error", "message":
                                     "the message holds NaN or infinite samples: ignored"})
                    continue
                if samples_in + len(x) > max_samples:
                    await _send(ws, {"type": "error", "message": f"the stream is longer than "
                                     f"the limit of {opts.max_stream_s:g} s: ending it"})
                    ended = True
                    break
                samples_in += len(x)
                audio.append(x)
            elif msg.type == WSMsgType.TEXT:
                if msg.data.strip() == "EOF":
                    ended = True
                    break
                try:
                    message = json.loads(msg.data)
                    kind = message.get("type") if isinstance(message, dict) else None
                except json.JSONDecodeError as e:
                    await _send(ws, {"type": "error", "message": f"not JSON: {e.msg}: ignored"})
                    continue
                if kind == "end":
                    ended = True
                    break
                await _send(ws, {"type": "error", "message": f"unknown message {msg.data[:80]!r}"
                                 " (send binary PCM, or {\"type\": \"end\"}): ignored"})
            else:  # CLOSE, CLOSING, CLOSED, ERROR: the client has gone
                closed = True
                break
            arrived.set()
        arrived.set()

    reading = asyncio.create_task(reader())
    try:
        while True:
            await arrived.wait()
            arrived.clear()
            if audio:
                chunk = np.concatenate(audio)
                audio.clear()
                try:
                    events = await pool.run(stream.accept, chunk, rate, admit=False)
                except Exception as e:  # noqa: BLE001 - this stream ends, the server goes on
                    await _send(ws, {"type": "error", "message": _failure(e)})
                    closed = True
                    break
                for e in events:
                    await _send(ws, _event(e))
                if audio:
                    arrived.set()
                    continue
            if ended or closed:  # set by the reader before its last arrived.set()
                break
        if ended and not closed:
            try:
                events = await pool.run(stream.finish, admit=False)
            except Exception as e:  # noqa: BLE001 - as above
                await _send(ws, {"type": "error", "message": _failure(e)})
                return
            for e in events:
                await _send(ws, _event(e))
            await _send(ws, {"type": "done", "seconds": round(samples_in / rate, 3)})
    finally:
        reading.cancel()
