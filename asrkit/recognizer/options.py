"""Search and chunking options of a Recognizer, every number checked.

The search options are those of ``asrkit.decoders.decode.DecodeOptions`` (Kaldi's names). A value
comes from the caller (``Recognizer.from_dir(path, beam=...)``, ``asrkit transcribe --beam``),
else from the model folder's ``manifest.json`` ``decode`` table (defaults a recipe tuned, e.g. the
word insertion penalty on a dev set), else from ``DecodeOptions``. A NaN, an infinity or a value
out of range is a ``RecognizerError`` naming the option (and the file when it came from one),
never a search that silently finds nothing or never ends.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

MIN_CHUNK_S = 1.0     # shortest --max-chunk: a chunk must hold words, not cut inside every one
MAX_NBEST = 1000      # n-best lists beyond this cost lattice time and add nothing to confidences


class RecognizerError(ValueError):
    """A model folder, option or input the Recognizer cannot use; the message names the file,
    option or item at fault."""


def _number(name: str, value, where: str, low: float | None = None, low_open: bool = False,
            integer: bool = False):
    """``value`` (a JSON or Python number) checked: finite, a whole number if ``integer``, at
    least (or above, ``low_open``) ``low``. RecognizerError naming ``where`` + ``name``."""
    label = f"{where}{name}"
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise RecognizerError(f"{label}: expected a number, got {value!r}")
    if not math.isfinite(value):
        raise RecognizerError(f"{label}: expected a finite number, got {value!r}")
    if integer and value != int(value):
        raise RecognizerError(f"{label}: expected a whole number, got {value!r}")
    if low is not None and (value <= low if low_open else value < low):
        raise RecognizerError(f"{label}: must be {'>' if low_open else '>='} {low:g}, got "
                              f"{value!r}")
    return int(value) if integer else float(value)


# name -> (lower bound, bound excluded, whole number)
SEARCH_RULES = {
    "beam": (0.0, True, False),
    "max_active": (1, False, True),
    "min_active": (0, False, True),
    "beam_delta": (0.0, False, False),
    "acoustic_scale": (0.0, True, False),
    "word_insertion_penalty": (None, False, False),
    "lattice_beam": (0.0, True, False),
    "nbest": (1, False, True),
}


def search_options(given: dict, defaults: dict | None = None, frame_shift: float = 0.01,
                   defaults_where: str = ""):
    """Return checked ``DecodeOptions``: ``given`` (None values ignored) over ``defaults`` (the
    model folder's ``decode`` table, named ``defaults_where`` in errors) over DecodeOptions'.
    Raises RecognizerError on an unknown option or a bad value."""
    from asrkit.decoders.decode import DecodeOptions

    values = {}
    for source, where in ((defaults or {}, defaults_where), (given, "")):
        for name, value in source.items():
            if value is None:
                continue
            if name not in SEARCH_RULES:
                raise RecognizerError(f"{where}{name}: unknown search option (known: "
                                      f"{', '.join(SEARCH_RULES)})")
            low, low_open, integer = SEARCH_RULES[name]
            values[name] = _number(name, value, where, low, low_open, integer)
    opts = dataclasses.replace(DecodeOptions(), frame_shift=frame_shift, **values)
    if opts.min_active > opts.max_active:
        raise RecognizerError(f"min_active ({opts.min_active}) exceeds max_active "
                              f"({opts.max_active})")
    if opts.nbest > MAX_NBEST:
        raise RecognizerError(f"nbest: at most {MAX_NBEST}, got {opts.nbest}")
    return opts


def chunk_seconds(value) -> float:
    """``max_chunk`` checked: finite and at least ``MIN_CHUNK_S`` seconds."""
    return _number("max_chunk", value, "", MIN_CHUNK_S)
