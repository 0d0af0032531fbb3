"""Feature-extraction configs: TOML files read with the standard library's ``tomllib``.

A config has a ``[features]`` table with ``type`` ("fbank", "mfcc" or "spectrogram") and Kaldi
options by the names ``asrkit.features.default_options(type)`` lists; an optional ``[cmvn]``
table with ``mode`` ("speaker" (default, as Kaldi's compute_cmvn_stats.sh), "utterance",
"global" or "none"); and an optional ``[audio]`` table with ``channel`` (0-based; default: mix
down to mono) and ``resample`` (true: resample audio to ``sample_frequency``; default false:
a rate mismatch is an error for that utterance, as in Kaldi). Example (data/conf/fbank.toml)::

    [features]
    type = "fbank"
    num_mel_bins = 80
    dither = 0.0

    [cmvn]
    mode = "speaker"
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import os
import tomllib

CMVN_MODES = ("speaker", "utterance", "global", "none")
# Bounds far beyond any speech front end, so a typo (1e12 ms frames, 10^8 mel bins) is an error
# naming the key instead of a job that allocates terabytes.
MAX_FRAME_SAMPLES = 1 << 20       # a frame of 65 s at 16 kHz
MAX_SAMPLE_FREQUENCY = 1_000_000  # Hz
MAX_BINS = 4096                   # num_mel_bins, num_ceps
_TOP_TABLES = ("features", "cmvn", "audio")
_CMVN_KEYS = ("mode",)
_AUDIO_KEYS = ("channel", "resample")


class ConfigError(ValueError):
    """A bad config file; the message names the file, the table and the key."""


@dataclasses.dataclass
class FeatureConfig:
    """A validated feature config.

    ``kind``: "fbank" / "mfcc" / "spectrogram"; ``options``: the Kaldi options the file sets
    (not the defaults); ``cmvn``: one of ``CMVN_MODES``; ``channel``: int or None (mix);
    ``resample``: resample audio whose rate differs from ``sample_frequency``.
    """

    kind: str
    options: dict
    cmvn: str = "speaker"
    channel: int | None = None
    resample: bool = False
    path: str | None = None

    @property
    def sample_frequency(self) -> int:
        """The sample rate the features expect, in Hz."""
        from asrkit.features import default_options

        return int(self.options.get("sample_frequency",
                                    default_options(self.kind)["sample_frequency"]))

    def fingerprint(self) -> str:
        """A hash of everything that changes the features, to tell stale outputs apart."""
        import asrkit

        blob = json.dumps({"kind": self.kind, "options": self.options, "channel": self.channel,
                           "resample": self.resample, "asrkit": asrkit.__version__},
                          sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def to_toml(self) -> str:
        """The config as TOML text (what ``load_feature_config`` reads back)."""
        lines = ["[features]", f'type = "{self.kind}"']
        lines += [f"{k} = {_toml_value(v)}" for k, v in self.options.items()]
        lines += ["", "[cmvn]", f'mode = "{self.cmvn}"']
        audio = []
        if self.channel is not None:
            audio.append(f"channel = {self.channel}")
        if self.resample:
            audio.append("resample = true")
        if audio:
            lines += ["", "[audio]", *audio]
        return "\n".join(lines) + "\n"


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    return repr(v)


def _type_name(default) -> str | None:
    if isinstance(default, bool):
        return "true or false"
    if isinstance(default, int):
        return "an integer"
    if isinstance(default, float):
        return "a number"
    if isinstance(default, str):
        return "a string"
    return None


def _has_type(value, default) -> bool:
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if isinstance(default, int):
        return isinstance(value, int)
    if isinstance(default, float):
        return isinstance(value, (int, float))
    return isinstance(value, str)


def _suggest(name: str, choices) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _check_feature_values(kind: str, feats: dict, path: str) -> None:
    """Ranges of the [features] numbers: the extractor's own checks (a plan is built once,
    here, not per utterance) plus bounds that keep an absurd value from allocating terabytes."""
    import math

    from asrkit.features import default_options
    from asrkit.features._pipeline import make_plan

    opts = {**default_options(kind), **feats}
    for key, value in feats.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{path}: [features] {key} = {value} must be a finite number")
    rate = opts["sample_frequency"]
    if not 0 < rate <= MAX_SAMPLE_FREQUENCY:
        raise ConfigError(f"{path}: [features] sample_frequency = {rate} must be in "
                          f"(0, {MAX_SAMPLE_FREQUENCY}] Hz")
    for key in ("frame_length", "frame_shift"):
        samples = opts[key] * rate / 1000.0
        if samples > MAX_FRAME_SAMPLES:
            raise ConfigError(f"{path}: [features] {key} = {opts[key]} ms is {samples:.3g} "
                              f"samples at {rate:g} Hz (at most {MAX_FRAME_SAMPLES})")
    for key in ("num_mel_bins", "num_ceps"):
        if key in opts and opts[key] > MAX_BINS:
            raise ConfigError(f"{path}: [features] {key} = {opts[key]} is absurd (at most "
                              f"{MAX_BINS})")
    for key in ("dither", "blackman_coeff", "cepstral_lifter"):
        if key in opts and opts[key] < 0:
            raise ConfigError(f"{path}: [features] {key} = {opts[key]} must be >= 0")
    try:
        make_plan(kind, feats)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{path}: [features] {e}") from None


def parse_feature_config(data: dict, path: str = "<config>") -> FeatureConfig:
    """Validate a parsed TOML dict and return a ``FeatureConfig``; ``path`` names it in errors."""
    from asrkit.features import default_options

    for table in data:
        if table not in _TOP_TABLES:
            raise ConfigError(f"{path}: unknown table [{table}]{_suggest(table, _TOP_TABLES)}; "
                              f"expected {', '.join('[' + t + ']' for t in _TOP_TABLES)}")
    feats = data.get("features")
    if not isinstance(feats, dict):
        raise ConfigError(f"{path}: no [features] table")
    feats = dict(feats)
    kind = feats.pop("type", None)
    if kind is None:
        raise ConfigError(f"{path}: [features] has no 'type' (fbank, mfcc or spectrogram)")
    try:
        defaults = default_options(kind)
    except ValueError as e:
        raise ConfigError(f"{path}: [features] type: {e}") from None
    for key in feats:
        if key not in defaults:
            raise ConfigError(f"{path}: [features] unknown {kind} option {key!r}"
                              f"{_suggest(key, defaults)}")
        expected = _type_name(defaults[key])
        if expected and not _has_type(feats[key], defaults[key]):
            raise ConfigError(f"{path}: [features] {key} = {feats[key]!r} must be {expected}")

    _check_feature_values(kind, feats, path)

    cmvn = data.get("cmvn", {})
    if not isinstance(cmvn, dict):
        raise ConfigError(f"{path}: [cmvn] must be a table")
    for key in cmvn:
        if key not in _CMVN_KEYS:
            raise ConfigError(f"{path}: [cmvn] unknown key {key!r}{_suggest(key, _CMVN_KEYS)}")
    mode = cmvn.get("mode", "speaker")
    if mode not in CMVN_MODES:
        raise ConfigError(f"{path}: [cmvn] mode must be one of {', '.join(CMVN_MODES)}, "
                          f"got {mode!r}")

    audio = data.get("audio", {})
    if not isinstance(audio, dict):
        raise ConfigError(f"{path}: [audio] must be a table")
    for key in audio:
        if key not in _AUDIO_KEYS:
            raise ConfigError(f"{path}: [audio] unknown key {key!r}{_suggest(key, _AUDIO_KEYS)}")
    channel = audio.get("channel")
    if channel is not None and (isinstance(channel, bool) or not isinstance(channel, int)
                                or channel < 0):
        raise ConfigError(f"{path}: [audio] channel must be a channel index >= 0, got "
                          f"{channel!r}")
    resample = audio.get("resample", False)
    if not isinstance(resample, bool):
        raise ConfigError(f"{path}: [audio] resample must be true or false, got {resample!r}")
    return FeatureConfig(kind=kind, options=feats, cmvn=mode, channel=channel,
                         resample=resample, path=path)


def load_feature_config(path: str | os.PathLike) -> FeatureConfig:
    """Read and validate the TOML feature config at ``path``.

    Raises ``ConfigError`` naming the file (and line, for TOML syntax errors, or the table and
    key for an unknown option).
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a config file") from None
    except OSError as e:
        raise ConfigError(f"{path}: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: not UTF-8 text (byte {raw[e.start]:#04x} at offset "
                          f"{e.start}); TOML files are UTF-8") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: {e}") from None
    return parse_feature_config(data, path)
