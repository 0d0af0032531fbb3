"""The ``asrkit`` command.

Every module in ``asrkit.cli`` that defines ``COMMAND`` (its name on the command line), ``HELP``
(one line), ``add_arguments(parser)`` and ``run(args) -> int`` is a subcommand; adding a file adds
a command. Modules import their heavy dependencies inside ``run`` so ``asrkit --help`` is fast.

Errors: a command raises :class:`CommandError` with a message naming the file, line, key or
utterance at fault; it is printed as ``asrkit CMD: error: MESSAGE`` with exit status 2. Anything
a command lets escape (a bug, MemoryError) meets the last line of defence in :func:`main`: the
same one-line form and status 2, the traceback only with ``asrkit --debug`` (or
``ASRKIT_DEBUG=1``); Ctrl-C prints one line and exits 130; a closed stdout pipe
(``asrkit ... | head``) ends the command quietly with status 141, as SIGPIPE ends other tools.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
import traceback

import asrkit


class CommandError(Exception):
    """A user-facing error: printed as ``asrkit: error: MESSAGE`` with exit status 2."""


MAX_WORKERS = 256  # more worker processes than this is a typo, not a machine


def check_workers(value, option: str) -> None:
    """Raise CommandError unless ``value`` (an ``--nj``/``--jobs`` count; None = the default)
    is an int in [1, MAX_WORKERS]; ``option`` is the flag named in the message."""
    if value is not None and not 1 <= value <= MAX_WORKERS:
        raise CommandError(f"{option} must be a number of processes in [1, {MAX_WORKERS}], "
                           f"got {value}")


def _command_modules():
    import asrkit.cli as pkg

    mods = []
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if info.name.startswith("_") or info.name == "main":
            continue
        mod = importlib.import_module(f"asrkit.cli.{info.name}")
        if hasattr(mod, "COMMAND"):
            mods.append(mod)
    return mods


def build_parser() -> argparse.ArgumentParser:
    """Return the top-level parser with one subparser per command module."""
    parser = argparse.ArgumentParser(
        prog="asrkit", description="asrkit: speech recognition toolkit (features, training, "
        "language models, WFST decoding).")
    parser.add_argument("--version", action="version", version=f"asrkit {asrkit.__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="print the Python traceback of an unexpected error (also "
                             "ASRKIT_DEBUG=1)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in _command_modules():
        p = sub.add_parser(mod.COMMAND, help=mod.HELP, description=getattr(mod, "__doc__", None),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    try:
        return _main(argv)
    except BrokenPipeError:  # e.g. ``asrkit CMD --help | head -1``
        _silence_stdout()
        return 141


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    debug = args.debug or os.environ.get("ASRKIT_DEBUG", "") not in ("", "0")
    prefix = f"asrkit {args.command}"
    if args.command != "warmup":
        _start_warmup()
    try:
        status = int(args._run(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return status
    except CommandError as e:
        _error(f"{prefix}: error: {e}")
        return 2
    except BrokenPipeError:
        raise  # handled in main
    except KeyboardInterrupt:
        _error(f"{prefix}: interrupted")
        return 130
    except MemoryError as e:
        if debug:
            traceback.print_exc()
        detail = _one_line(e)
        _error(f"{prefix}: error: out of memory{': ' + detail if detail else ''}")
        return 2
    except Exception as e:  # noqa: BLE001 - the last line of defence: one line, never a trace
        if debug:
            traceback.print_exc()
        hint = "" if debug else " (asrkit --debug shows the traceback)"
        _error(f"{prefix}: error: {_describe(e)}{hint}")
        return 2


def _start_warmup() -> None:
    """On a cold compile cache, compile every kernel in the background (asrkit.utils.jit)."""
    try:
        from asrkit.utils.jit import start_background_warmup

        start_background_warmup()
    except Exception:  # noqa: BLE001 - a convenience; never a reason for a command to fail
        pass


def _one_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    text = " ".join(lines)
    return text if len(text) <= 500 else text[:497] + "..."


def _describe(e: BaseException) -> str:
    """An unexpected exception in one line; OS errors name their file."""
    if isinstance(e, OSError) and e.filename is not None:
        target = f" -> {e.filename2}" if e.filename2 is not None else ""
        return f"{e.filename}{target}: {e.strerror or _one_line(e)}"
    text = _one_line(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _error(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass  # stderr is gone: nothing more to say


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush of a closed pipe is silent."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


if __name__ == "__main__":
    sys.exit(main())
