"""Running the application: in the foreground (``asrkit serve``) or in a background thread
(tests, ``asrkit bench serve``)."""

from __future__ import annotations

import asyncio
import threading

from aiohttp import web


async def _start(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    sockets = runner.addresses
    return runner, sockets[0][1] if sockets else port


def serve_forever(app: web.Application, host: str, port: int, ready=None) -> None:
    """Serve ``app`` on ``host:port`` until Ctrl-C / SIGTERM; ``ready(port)`` is called once
    the socket listens (the port is the one bound when ``port`` is 0)."""
    asyncio.run(_forever(app, host, port, ready or (lambda bound: None)))


async def _forever(app, host, port, ready):
    import signal

    runner, bound = await _start(app, host, port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    ready(bound)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


class BackgroundServer:
    """``app`` served on ``host`` (port chosen by the system) in a thread of its own::

        with BackgroundServer(app) as server:
            requests to server.url ...
    """

    def __init__(self, app: web.Application, host: str = "127.0.0.1"):
        self.app, self.host = app, host
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="asrkit-serve",
                                       daemon=True)
        self.runner = None
        self.port = None

    @property
    def url(self) -> str:
        """``http://HOST:PORT``."""
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> BackgroundServer:
        self.thread.start()
        future = asyncio.run_coroutine_threadsafe(_start(self.app, self.host, 0), self.loop)
        self.runner, self.port = future.result(timeout=600)
        return self

    def __exit__(self, *exc) -> None:
        if self.runner is not None:
            asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(60)
        self.loop.close()
