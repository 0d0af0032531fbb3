"""The ``asrkit`` command.

Every module in ``asrkit.cli`` that defines ``COMMAND`` (its name on the command line), ``HELP``
(one line), ``add_arguments(parser)`` and ``run(args) -> int`` is a subcommand; adding a file adds
a command. Modules import their heavy dependencies inside ``run`` so ``asrkit --help`` is fast.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

import asrkit


class CommandError(Exception):
    """A user-facing error: printed as ``asrkit: error: MESSAGE`` with exit status 2."""


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
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in _command_modules():
        p = sub.add_parser(mod.COMMAND, help=mod.HELP, description=getattr(mod, "__doc__", None),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except CommandError as e:
        print(f"asrkit {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("asrkit: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
