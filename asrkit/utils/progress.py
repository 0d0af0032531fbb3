"""Progress bars for long work, written to stderr and silent when stderr is not a terminal."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable


def progress(iterable: Iterable | None = None, total: int | None = None, desc: str = "",
             unit: str = "it", disable: bool | None = None):
    """Wrap ``iterable`` in a tqdm progress bar on stderr.

    ``disable=None`` hides the bar when stderr is not a TTY or ``ASRKIT_NO_PROGRESS`` is set, so
    logs and tests stay clean. Returns the tqdm object (iterable, with ``update``/``close``).
    """
    from tqdm.auto import tqdm

    if disable is None:
        disable = bool(os.environ.get("ASRKIT_NO_PROGRESS")) or not sys.stderr.isatty()
    return tqdm(iterable, total=total, desc=desc, unit=unit, disable=disable, file=sys.stderr,
                dynamic_ncols=True)
