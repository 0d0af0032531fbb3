"""Serve a model folder over HTTP and WebSocket, with a page for the browser.

  POST /v1/transcribe         an audio file (body or form field "file") -> JSON: text, words
                              with start, duration and confidence
  GET  /v1/stream?rate=16000  WebSocket: binary PCM in (s16le, or &format=f32le), partial and
                              final results out as JSON; send {"type": "end"} to finish
  GET  /health                JSON status
  GET  /                      the page: record from the microphone or upload a file and see
                              the transcript live; with --exp-dir, the runs under that folder
                              (live training curves, WER tables, worst utterances, network),
                              and train or recipe-stage jobs started from it

Model work runs in --workers threads (default: one per core); at most --max-queue requests wait
for one and more get 503 at once; --max-streams WebSockets may be open. It listens on
127.0.0.1 unless --host says otherwise (the page can start jobs in --exp-dir: keep it on a
trusted network). Needs aiohttp: pip install 'asrkit[serve]'.

Examples:
  asrkit serve --model-dir recipes/digits/exp/final --exp-dir recipes/digits
  curl -F file=@call.wav http://127.0.0.1:8000/v1/transcribe
"""

from __future__ import annotations

import sys

COMMAND = "serve"
HELP = "serve a model folder over HTTP/WebSocket, with a browser page"


def add_arguments(parser) -> None:
    """Options: --model-dir, --host, --port, limits, --exp-dir, --vad, search options."""
    parser.add_argument("--model-dir", required=True, help="model folder (exp/final)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8000, help="port (0: any free one)")
    parser.add_argument("--workers", type=int, default=None,
                        help="model threads (default: one per core)")
    parser.add_argument("--max-queue", type=int, default=8,
                        help="requests that may wait for a model thread (more get 503)")
    parser.add_argument("--max-streams", type=int, default=16,
                        help="WebSocket streams open at once")
    parser.add_argument("--max-upload-mb", type=float, default=50.0, help="largest upload")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds one upload may take (then 504)")
    parser.add_argument("--idle-timeout", type=float, default=60.0,
                        help="seconds a stream may send nothing before it is closed")
    parser.add_argument("--exp-dir", default=None,
                        help="experiments folder for the page (runs, curves, jobs)")
    parser.add_argument("--vad", choices=["energy", "silero"], default="energy",
                        help="how uploaded long files are cut (see asrkit transcribe)")
    parser.add_argument("--beam", type=float, default=None, help="search beam")
    parser.add_argument("--hotwords", default=None, metavar="FILE",
                        help="hotword phrases for uploads and streams")


def run(args) -> int:
    """Load the model and serve until interrupted."""
    from asrkit.cli.main import CommandError

    try:
        import aiohttp  # noqa: F401
    except ImportError:
        raise CommandError("asrkit serve needs aiohttp: pip install 'asrkit[serve]'") from None
    from asrkit.recognizer import Recognizer, RecognizerError
    from asrkit.serve import ServeOptions, make_app, serve_forever

    if not 0 <= args.port <= 65535:
        raise CommandError(f"--port must be 0 to 65535, got {args.port}")
    try:
        options = ServeOptions(args.workers, args.max_queue, args.max_streams,
                               args.max_upload_mb, args.timeout, args.idle_timeout,
                               exp_dir=args.exp_dir)
    except ValueError as e:
        raise CommandError(str(e)) from e
    try:
        rec = Recognizer.from_dir(args.model_dir, vad=args.vad, hotwords=args.hotwords,
                                  beam=args.beam)
        rec.check_can_transcribe()
        app = make_app(rec, options)
    except RecognizerError as e:
        raise CommandError(str(e)) from e

    def ready(port):
        print(f"asrkit serve: {args.model_dir} on http://{args.host}:{port}/ ({options.workers} "
              f"model threads; Ctrl-C stops)", file=sys.stderr, flush=True)

    try:
        serve_forever(app, args.host, args.port, ready)
    except OSError as e:
        raise CommandError(f"cannot listen on {args.host}:{args.port}: "
                           f"{e.strerror or e}") from e
    return 0
