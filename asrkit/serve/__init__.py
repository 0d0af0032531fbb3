"""``asrkit serve``: a model folder behind HTTP and WebSocket, with the browser page.

::

    from asrkit import Recognizer
    from asrkit.serve import ServeOptions, make_app, serve_forever

    app = make_app(Recognizer.from_dir("exp/final"), ServeOptions(workers=2, exp_dir="."))
    serve_forever(app, "127.0.0.1", 8000)

``app`` (routes, limits, errors), ``streaming`` (the WebSocket protocol), ``experiments`` (the
page's experiments view and jobs), ``pool`` (bounded model threads), ``runner`` (foreground and
background serving), ``static/`` (the page: plain HTML, JavaScript and CSS, no build step).
Needs aiohttp (``pip install 'asrkit[serve]'``). Names are imported lazily.
"""

from asrkit._lazy import lazy_exports

_EXPORTS = {
    "ServeOptions": "asrkit.serve.app",
    "make_app": "asrkit.serve.app",
    "ModelPool": "asrkit.serve.pool",
    "Busy": "asrkit.serve.pool",
    "BackgroundServer": "asrkit.serve.runner",
    "serve_forever": "asrkit.serve.runner",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
