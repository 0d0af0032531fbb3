"""The keys of a ``[[network.layers]]`` table: types, defaults and ranges, checked with errors
that name the file and the key (``x.toml: [network.layers] #2.hidden: must be >= 1, got 0``).

A layer type declares ``KEYS = {"hidden": Key(int, min=1), "dropout": Key(float, 0.0,
interval="[0, 1)"), ...}``; :func:`fill` validates a table against it and completes the
defaults.
"""

from __future__ import annotations

import dataclasses
import math

# upper bounds of sizes that only a typo reaches (memory is checked separately, with the figure)
MAX_FRAMES_FACTOR = 1024     # stack_frames, subsample_frames, a TDNN's context/dilation/stride
MAX_NUM_LAYERS = 128         # layers (blocks) in one [[network.layers]] table


class ConfigError(ValueError):
    """A bad training/network config; the message names the file and the key at fault."""


@dataclasses.dataclass(frozen=True)
class Key:
    """One key of a layer table: its type, default (None: required) and allowed values.

    ``min``/``max``: bounds of an int; ``interval``: of a float, as :func:`check_interval`
    writes it; ``choices``: the allowed strings (or ints).
    """

    type: type
    default: object = None
    min: int | None = None
    max: int | None = None
    interval: str | None = None
    choices: tuple | None = None


def check_value(value, typ, where: str):
    """``value`` as ``typ`` (an int is accepted for a float), or ConfigError naming ``where``."""
    if typ is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if typ is int and isinstance(value, bool) or not isinstance(value, typ):
        raise ConfigError(f"{where}: expected {typ.__name__}, got {value!r}")
    if typ is float and not math.isfinite(value):
        raise ConfigError(f"{where}: must be a finite number, got {value!r}")
    return value


def check_interval(value, interval: str, where: str, error=ConfigError) -> None:
    """Raise ``error`` naming ``where`` unless ``value`` is finite and inside ``interval``,
    written as in mathematics: ``"(0, inf)"``, ``"[0, 1)"``, ``"[1, inf)"``."""
    lo_text, hi_text = interval[1:-1].split(",")
    lo, hi = float(lo_text), float(hi_text)
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
          and math.isfinite(value)
          and (value >= lo if interval[0] == "[" else value > lo)
          and (value <= hi if interval[-1] == "]" else value < hi))
    if not ok:
        if math.isinf(lo) and math.isinf(hi):
            want = "a finite number"
        elif math.isinf(hi):
            want = f">= {lo_text.strip()}" if interval[0] == "[" else f"> {lo_text.strip()}"
        else:
            want = f"in {interval}"
        raise error(f"{where}: must be {want}, got {value!r}")


def fill(section: dict, keys: dict, where: str, ignore=()) -> dict:
    """Validate the table ``section`` against ``keys`` (``{name: Key or (type, default)}``);
    returns it completed with defaults. Raises ConfigError naming ``where`` and the key."""
    if not isinstance(section, dict):
        raise ConfigError(f"{where}: expected a table, got {section!r}")
    for k in section:
        if k not in keys and k not in ignore:
            raise ConfigError(f"{where}: unknown key '{k}' (known: {', '.join(sorted(keys))})")
    keys = {k: key if isinstance(key, Key) else Key(*key) for k, key in keys.items()}
    out = {}
    for k, key in keys.items():
        if k in section:
            out[k] = check_value(section[k], key.type, f"{where}.{k}")
        elif key.default is None:
            raise ConfigError(f"{where}: missing required key '{k}'")
        else:
            out[k] = key.default
    for k, key in keys.items():
        v = out[k]
        if key.min is not None and v < key.min:
            raise ConfigError(f"{where}.{k}: must be >= {key.min}, got {v}")
        if key.max is not None and v > key.max:
            raise ConfigError(f"{where}.{k}: must be at most {key.max}, got {v}")
        if key.interval is not None:
            check_interval(v, key.interval, f"{where}.{k}")
        if key.choices is not None and v not in key.choices:
            raise ConfigError(f"{where}.{k}: unknown {v!r} (known: "
                              f"{', '.join(map(str, key.choices))})")
    return out
