"""Compile asrkit's kernels into numba's cache now, so that no later command waits for them.

Runs each usual command once on tiny made-up data (compute-features, lm train, graph build,
train, decode, package, transcribe, align), two at a time, and prints how long each took. Run
it once after installing or upgrading asrkit; afterwards every command starts in about a second
instead of compiling for 20-30 s on its first run. The first command run on a cold cache also
starts this in the background, at the lowest priority (ASRKIT_WARMUP=0 turns that off). The
cache is numba's: NUMBA_CACHE_DIR when set, else __pycache__ beside asrkit's sources when
writable, else ~/.cache/numba.

Examples:
  asrkit warmup
  NUMBA_CACHE_DIR=/opt/asrkit-cache asrkit warmup --json
"""

from __future__ import annotations

import json
import os
import sys

COMMAND = "warmup"
HELP = "compile the kernels into numba's cache ahead of first use"


def add_arguments(parser) -> None:
    """Options: --jobs, --json, --background (internal: the automatic warm-up)."""
    parser.add_argument("--jobs", type=int, default=None,
                        help="commands at once (default: 2 on 2+ cores)")
    parser.add_argument("--json", action="store_true", help="print a JSON summary")
    parser.add_argument("--background", action="store_true",
                        help="run at the lowest CPU priority (what the automatic warm-up does)")


def run(args) -> int:
    """Warm the cache; exit 1 if any warm-up command failed."""
    from asrkit.cli.main import CommandError, check_workers
    from asrkit.utils.jit import cache_location, warm

    check_workers(args.jobs, "--jobs")
    if args.background and hasattr(os, "nice"):
        try:
            os.nice(19)
        except OSError:
            pass
    if cache_location() is None:
        raise CommandError("no writable place for numba's cache: set NUMBA_CACHE_DIR to a "
                           "writable folder")

    def log(rec):
        if not args.json:
            state = "ok" if rec["status"] == 0 else f"failed ({rec.get('error', '')})"
            print(f"{rec['command']:45s} {rec['seconds']:7.1f} s  {state}", flush=True)

    if not args.json:
        print(f"compiling into {cache_location()} ...", flush=True)
    summary = warm(args.jobs, log)
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        print(f"done in {summary['seconds']:.1f} s" if summary["ok"] else
              f"finished with failures in {summary['seconds']:.1f} s", file=sys.stdout)
    return 0 if summary["ok"] else 1
