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

MIN_CHUNK_S = 1.0     # shortest --max-chunk: a chunk must hold words, not cut inside every one
MAX_NBEST = 1000      # n-best lists beyond this cost lattice time and add nothing to confidences


class RecognizerError(ValueError):
    """A model folder, option or input the Recognizer cannot use; the message names the file,
    option or item at fault."""


def search_options(given: dict, defaults: dict | None = None, frame_shift: float = 0.01,
                   defaults_where: str = ""):
    """Return checked ``DecodeOptions``: ``given`` (None values ignored) over ``defaults`` (the
    model folder's ``decode`` table, named ``defaults_where`` in errors) over DecodeOptions'.
    The numbers are checked by DecodeOptions itself (``asrkit.decoders.options``); this adds the
    source to the message, refuses unknown names, and bounds ``nbest`` and ``min_active``.
    Raises RecognizerError."""
    from asrkit.decoders.decode import DecodeOptions

    known = [f.name for f in dataclasses.fields(DecodeOptions) if f.name != "frame_shift"]

    def check(name, value):
        DecodeOptions(**{name: value})
        return value

    values = merged_options(given, defaults, defaults_where, known, check, "search option")
    opts = DecodeOptions(**values, frame_shift=frame_shift)
    if opts.min_active > opts.max_active:
        raise RecognizerError(f"min_active ({opts.min_active}) exceeds max_active "
                              f"({opts.max_active})")
    if opts.nbest > MAX_NBEST:
        raise RecognizerError(f"nbest must be at most {MAX_NBEST}, got {opts.nbest}")
    return opts


def merged_options(given: dict, defaults: dict | None, defaults_where: str, known: list[str],
                   check, what: str) -> dict:
    """``{name: value}`` of ``given`` (None values ignored) over ``defaults`` (named
    ``defaults_where`` in errors): names outside ``known`` are refused, and each value goes
    through ``check(name, value) -> value``, whose ValueError becomes a RecognizerError naming
    where the value came from. ``what`` names the options in the unknown-name message."""
    values = {}
    for source, where in ((defaults or {}, defaults_where), (given, "")):
        for name, value in source.items():
            if value is None:
                continue
            if name not in known:
                raise RecognizerError(f"{where}{name}: unknown {what} (known: "
                                      f"{', '.join(known)})")
            try:
                values[name] = check(name, value)
            except ValueError as e:
                raise RecognizerError(f"{where}{e}") from None
    return values


def chunk_seconds(value) -> float:
    """``max_chunk`` checked: a finite number of seconds, at least ``MIN_CHUNK_S``."""
    from asrkit.decoders.options import finite

    try:
        return finite("max_chunk", value, MIN_CHUNK_S)
    except ValueError as e:
        raise RecognizerError(str(e)) from None


MAX_WARPS = 16        # each warp is one more feature pass and network run per recording
WARP_RANGE = (0.5, 2.0)  # Kaldi's VTLN warps lie near 0.8-1.2; beyond these the banks fold


def vtln_warps_option(value, where: str = "") -> tuple[float, ...] | None:
    """``vtln_warps`` checked: None (one pass, no warping), or 1 to ``MAX_WARPS`` distinct
    finite factors within ``WARP_RANGE`` given as a list/tuple of numbers or a string
    ``"0.9,1,1.1"``; returned as a tuple of floats. Raises RecognizerError prefixed ``where``."""
    if value is None:
        return None
    if isinstance(value, str):
        parts = [p for p in value.replace(",", " ").split() if p]
        try:
            value = [float(p) for p in parts]
        except ValueError:
            raise RecognizerError(f"{where}vtln_warps: expected numbers such as "
                                  f"'0.9,1,1.1', got {', '.join(parts)!r}") from None
    if not isinstance(value, (list, tuple)) or not 1 <= len(value) <= MAX_WARPS:
        raise RecognizerError(f"{where}vtln_warps: expected 1 to {MAX_WARPS} warp factors, "
                              f"got {value!r}")
    lo, hi = WARP_RANGE
    warps = []
    for w in value:
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not lo <= w <= hi:
            raise RecognizerError(f"{where}vtln_warps: each warp factor must be a number in "
                                  f"[{lo:g}, {hi:g}], got {w!r}")
        warps.append(float(w))
    if len(set(warps)) != len(warps):
        raise RecognizerError(f"{where}vtln_warps: {warps} repeats a warp factor")
    return tuple(warps)
