"""The HTTP application of ``asrkit serve`` (aiohttp): routes, limits and error handling.

Routes::

    GET  /                       the browser page (``asrkit/serve/static``)
    GET  /health                 JSON: model, sample rate, pool and stream counts
    POST /v1/transcribe          a file (raw body, or a multipart form field "file") -> JSON:
                                 text, words (start, duration, confidence), duration, seconds
    GET  /v1/stream?rate=16000   WebSocket: binary PCM in, partial/final JSON out (streaming.py)
    /api/...                     experiments (with --exp-dir; experiments.py)

Every error is JSON ``{"error": MESSAGE}`` with a 4xx/5xx status (or an ``error`` message on a
WebSocket); nothing a client sends stops the server. Uploads larger than ``max_upload_mb`` get
413, a full pool 503 (at once), a transcription past ``timeout`` seconds 504.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time

from aiohttp import web

from asrkit.serve.pool import Busy, ModelPool

STATIC = os.path.join(os.path.dirname(__file__), "static")
log = logging.getLogger("asrkit.serve")

RECOGNIZER = web.AppKey("recognizer", object)
OPTIONS = web.AppKey("options", object)
POOL = web.AppKey("pool", ModelPool)
STATE = web.AppKey("state", dict)


@dataclasses.dataclass
class ServeOptions:
    """Limits and settings of the server (``asrkit serve`` flags of the same names).

    workers: model threads (None: one per core); max_queue: jobs that may wait for a thread
    (more get 503); max_streams: WebSocket streams open at once; max_upload_mb: largest upload;
    timeout: seconds one upload may take; idle_timeout: seconds a stream may send nothing;
    max_stream_s: seconds of audio in one stream; exp_dir: experiments folder for the page
    (None: no experiments view); stream_options: defaults of ``Recognizer.stream``.
    """

    workers: int | None = None
    max_queue: int = 8
    max_streams: int = 16
    max_upload_mb: float = 50.0
    timeout: float = 120.0
    idle_timeout: float = 60.0
    max_stream_s: float = 3600.0
    exp_dir: str | None = None
    stream_options: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if self.workers is None:
            self.workers = os.cpu_count() or 1
        for name in ("workers", "max_queue", "max_streams"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (
                    0 if name == "max_queue" else 1):
                raise ValueError(f"{name} must be a whole number >= "
                                 f"{0 if name == 'max_queue' else 1}, got {value!r}")
        for name in ("max_upload_mb", "timeout", "idle_timeout", "max_stream_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                    not 0 < value < float("inf"):
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        if self.exp_dir is not None and not os.path.isdir(self.exp_dir):
            raise ValueError(f"{self.exp_dir}: no such experiments folder")


def error(status: int, message: str) -> web.Response:
    """A JSON error response ``{"error": message}``."""
    return web.json_response({"error": message}, status=status)


@web.middleware
async def _errors(request: web.Request, handler):
    """Every failure becomes a JSON error; an unexpected one is logged, the server goes on."""
    try:
        return await handler(request)
    except web.HTTPException as e:
        if e.status < 400 or e.content_type == "application/json":
            raise
        return error(e.status, e.reason if e.status != 413 else (
            f"the upload is larger than the limit of "
            f"{request.app[OPTIONS].max_upload_mb:g} MB"))
    except Exception as e:  # noqa: BLE001 - a bug must cost one request, not the server
        log.exception("%s %s failed", request.method, request.path)
        return error(500, f"internal error: {type(e).__name__}: {e}")


async def health(request: web.Request) -> web.Response:
    """GET /health: JSON status of the model, the pool and the streams."""
    app = request.app
    rec, state = app[RECOGNIZER], app[STATE]
    s = app[POOL].stats
    return web.json_response({
        "status": "ok", "model": os.path.abspath(rec.folder.path),
        "sample_rate": rec.sample_rate, "frame_shift": rec.frame_shift,
        "workers": s.workers, "running": s.running, "waiting": s.waiting,
        "max_queue": s.max_queue, "done": s.done, "refused": s.refused,
        "timed_out": s.timed_out, "streams": state["streams"],
        "max_streams": app[OPTIONS].max_streams, "uptime": round(time.time() - state["start"], 1),
        "experiments": app[OPTIONS].exp_dir is not None})


async def _upload(request: web.Request) -> tuple[bytes, str]:
    """The uploaded file's bytes and name: a multipart form's "file" field, or the raw body."""
    if request.content_type.startswith("multipart/"):
        reader = await request.multipart()
        while True:
            part = await reader.next()
            if part is None:
                raise web.HTTPBadRequest(reason="the form has no 'file' field")
            if part.name == "file":
                return bytes(await part.read()), part.filename or "upload"
    return await request.read(), request.query.get("name", "upload")


async def transcribe(request: web.Request) -> web.Response:
    """POST /v1/transcribe: the file's Result as JSON, plus ``seconds`` (wall time) and
    ``rtf``."""
    from asrkit.recognizer import RecognizerError

    app = request.app
    rec, opts = app[RECOGNIZER], app[OPTIONS]
    data, name = await _upload(request)
    if not data:
        return error(400, f"{name}: empty upload: send the audio file as the body or as a "
                          "form field 'file'")
    t0 = time.perf_counter()
    try:
        result = await app[POOL].run(rec.transcribe, data, None, name, timeout=opts.timeout)
    except Busy as e:
        return error(503, str(e))
    except TimeoutError:
        return error(504, f"{name}: transcription took longer than {opts.timeout:g} s")
    except RecognizerError as e:
        return error(400, str(e))
    seconds = time.perf_counter() - t0
    out = result.as_dict()
    out.update(name=name, seconds=round(seconds, 3),
               rtf=round(seconds / result.duration, 4) if result.duration else None)
    return web.json_response(out)


async def index(request: web.Request) -> web.FileResponse:
    """GET /: the page."""
    return web.FileResponse(os.path.join(STATIC, "index.html"))


def _warm_up(rec) -> None:
    """Run the model, the search and a stream once, so that the first request does not pay
    for loading compiled kernels."""
    import numpy as np

    x = np.zeros(rec.sample_rate, np.float32)
    x[rec.sample_rate // 4: rec.sample_rate // 2] = 0.1 * np.sin(np.arange(rec.sample_rate // 4))
    rec.transcribe(x, rec.sample_rate)
    stream = rec.stream()
    stream.accept(x, rec.sample_rate)
    stream.finish()


def make_app(recognizer, options: ServeOptions | None = None, warm_up: bool = True
             ) -> web.Application:
    """The aiohttp Application serving ``recognizer`` (an ``asrkit.Recognizer`` that can
    transcribe) with ``options``."""
    from asrkit.serve import experiments, streaming

    options = options or ServeOptions()
    recognizer.check_can_transcribe()
    app = web.Application(middlewares=[_errors],
                          client_max_size=int(options.max_upload_mb * 1024 * 1024))
    app[RECOGNIZER] = recognizer
    app[OPTIONS] = options
    app[POOL] = ModelPool(options.workers, options.max_queue)
    app[STATE] = {"streams": 0, "start": time.time()}
    app.router.add_get("/", index)
    app.router.add_get("/health", health)
    app.router.add_post("/v1/transcribe", transcribe)
    app.router.add_get("/v1/stream", streaming.handle)
    app.router.add_static("/static/", STATIC, show_index=False, follow_symlinks=False)
    experiments.add_routes(app, options.exp_dir)

    async def start(app):
        if warm_up:
            await asyncio.get_running_loop().run_in_executor(app[POOL].executor, _warm_up,
                                                             recognizer)

    async def stop(app):
        app[POOL].shutdown()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    return app
