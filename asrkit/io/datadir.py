"""Kaldi data directories: read, validate, fix, subset and write them, and read their audio.

A data directory holds one table per file, each line ``key value``, sorted by key in C-locale
(byte) order with unique keys:

====================  =========================================  ==============================
file                  line                                        keyed by
====================  =========================================  ==============================
``utt2spk``           ``utt spk``                                  utterance (required)
``spk2utt``           ``spk utt1 utt2 ...``                        speaker (derived from utt2spk)
``wav.scp``           ``rec rxfilename`` (path, ``cmd |``, ark)   recording (= utterance
                                                                  without ``segments``)
``segments``          ``utt rec start end [channel]`` (seconds;   utterance
                      end -1 = end of file)
``text``              ``utt word word ...`` (may be empty)        utterance
``utt2dur``           ``utt seconds``                             utterance
``utt2num_frames``    ``utt frames``                              utterance
``feats.scp``         ``utt feats.ark:offset``                    utterance
``cmvn.scp``          ``spk cmvn.ark:offset``                     speaker
``spk2gender``        ``spk m|f``                                 speaker
====================  =========================================  ==============================

``validate_data_dir`` checks what Kaldi's ``utils/validate_data_dir.sh`` checks and reports every
problem as ``path/file:line: message``; ``fix_data_dir`` does what ``utils/fix_data_dir.sh``
does (sort, keep only utterances present in every file, regenerate spk2utt, back the old files
up in ``.backup/``) and says what it dropped.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
from collections.abc import Iterable, Iterator

import numpy as np

from asrkit.io.audio import AudioError
from asrkit.utils import atomic_write_text

UTT_FILES = ("utt2spk", "text", "segments", "utt2dur", "utt2num_frames", "feats.scp", "utt2uniq",
             "utt2lang", "vad.scp")
SPK_FILES = ("spk2utt", "spk2gender", "cmvn.scp")
RECO_FILES = ("wav.scp", "reco2file_and_channel", "reco2dur")
KNOWN_FILES = UTT_FILES + SPK_FILES + RECO_FILES
# minimum fields per line (key included), and exact count where fixed
_MIN_FIELDS = {"text": 1, "spk2utt": 2, "wav.scp": 2, "feats.scp": 2, "cmvn.scp": 2,
               "vad.scp": 2}
_EXACT_FIELDS = {"utt2spk": 2, "utt2dur": 2, "utt2num_frames": 2,
                 "spk2gender": 2, "utt2uniq": 2, "utt2lang": 2, "reco2file_and_channel": 3,
                 "reco2dur": 2}
MAX_SEGMENT_OVERSHOOT = 0.5  # seconds a segment may run past the end of its recording (Kaldi)


class DataDirError(ValueError):
    """An unreadable or inconsistent data directory; the message names file and line."""


@dataclasses.dataclass
class Problem:
    """One validation finding: ``path:line: message`` (line 0 when it concerns the whole file)."""

    path: str
    line: int
    message: str
    severity: str = "error"  # or "warning"

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        prefix = "" if self.severity == "error" else "warning: "
        return f"{where}: {prefix}{self.message}"


@dataclasses.dataclass
class Utterance:
    """One utterance's audio, or the reason it could not be read.

    ``waveform`` is float32 ``[num_samples]`` (None when ``error`` is set); ``sample_rate`` in Hz;
    ``source`` is the wav.scp value it came from.
    """

    utt_id: str
    waveform: np.ndarray | None
    sample_rate: int | None
    source: str
    error: str | None = None


def segment_times(fields: list[str]) -> tuple[float, float]:
    """``(start, end)`` seconds of a segments line's fields after the utterance id
    (``recording start end [channel]``); end -1 means the end of the recording. Raises
    ValueError saying what is wrong (not numbers, not finite, start < 0, end <= start)."""
    try:
        start, end = float(fields[1]), float(fields[2])
    except (ValueError, IndexError):
        raise ValueError(f"start and end must be numbers, got {fields[1:3]}") from None
    if not (math.isfinite(start) and math.isfinite(end)):
        raise ValueError(f"start and end must be finite, got {fields[1]} {fields[2]}")
    if start < 0 or (end != -1 and end <= start):
        raise ValueError(f"bad segment times: start {start}, end {end} (need 0 <= start < end, "
                         "or end -1)")
    return start, end


def parse_number(value: str, integer: bool = False) -> float | int:
    """A finite number (an integer with ``integer``) from a data-dir field, or ValueError."""
    if integer:
        return int(value)
    x = float(value)
    if not math.isfinite(x):
        raise ValueError(f"not a finite number: {value!r}")
    return x


def c_sort_key(key: str) -> bytes:
    """Sort key giving C-locale order (byte order of UTF-8), as ``LC_ALL=C sort``."""
    return key.encode("utf-8", errors="surrogateescape")


def _split(line: str) -> tuple[str, str]:
    parts = line.split(None, 1)
    if not parts:
        return "", ""
    return parts[0], parts[1].strip() if len(parts) > 1 else ""


def read_lines(path: str) -> list[tuple[int, str]]:
    """Return ``(line_number, line)`` of a text file, line endings stripped (1-based numbers)."""
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        return [(i, raw.rstrip("\n").rstrip("\r")) for i, raw in enumerate(f, 1)]


class DataDir:
    """A Kaldi data directory held in memory as ``{file: {key: value}}`` tables.

    ``DataDir.read(path)`` loads every known file there is; ``DataDir(path=None, **tables)``
    builds one (``wav_scp=`` for wav.scp, ``feats_scp=`` for feats.scp, ...), each a dict of
    ``key -> rest of line``. Values stay strings; typed views are ``segments()``, ``utt2dur()``.
    """

    def __init__(self, path: str | None = None, **tables: dict[str, str]):
        self.path = path
        self.tables: dict[str, dict[str, str]] = {}
        self.line_numbers: dict[str, dict[str, int]] = {}
        for arg, table in tables.items():
            name = arg.replace("_scp", ".scp")
            if name not in KNOWN_FILES:
                raise ValueError(f"unknown data-dir file {name!r}")
            self.tables[name] = {str(k): str(v) for k, v in table.items()}
        if "utt2spk" in self.tables and "spk2utt" not in self.tables:
            self.tables["spk2utt"] = self._spk2utt_text()

    # ------------------------------------------------------------------ reading

    @classmethod
    def read(cls, path: str) -> DataDir:
        """Read the data directory ``path`` (every known file present in it).

        Raises ``DataDirError`` when ``path`` is not a directory or has no utt2spk. Duplicate
        keys keep their first line; ``validate()`` reports them.
        """
        if not os.path.isdir(path):
            raise DataDirError(f"{path}: not a directory")
        if not os.path.isfile(os.path.join(path, "utt2spk")):
            raise DataDirError(f"{path}/utt2spk: no such file (not a Kaldi data directory)")
        d = cls(path)
        for name in KNOWN_FILES:
            fpath = os.path.join(path, name)
            if not os.path.isfile(fpath):
                continue
            table: dict[str, str] = {}
            numbers: dict[str, int] = {}
            for lineno, line in read_lines(fpath):
                key, value = _split(line)
                if key and key not in table:
                    table[key] = value
                    numbers[key] = lineno
            d.tables[name] = table
            d.line_numbers[name] = numbers
        return d

    def where(self, name: str, key: str | None = None) -> str:
        """``path/name:line`` of ``key`` in file ``name`` (for messages)."""
        fpath = os.path.join(self.path, name) if self.path else name
        line = self.line_numbers.get(name, {}).get(key) if key is not None else None
        return f"{fpath}:{line}" if line else fpath

    def has(self, name: str) -> bool:
        """True when the directory has file ``name``."""
        return name in self.tables

    def table(self, name: str) -> dict[str, str]:
        """The table of file ``name`` (``{}`` when absent)."""
        return self.tables.get(name, {})

    # ------------------------------------------------------------------ typed views

    def utt_ids(self) -> list[str]:
        """Utterance ids in C-locale order (the keys of utt2spk)."""
        return sorted(self.table("utt2spk"), key=c_sort_key)

    def speakers(self) -> list[str]:
        """Speaker ids in C-locale order."""
        return sorted(set(self.table("utt2spk").values()), key=c_sort_key)

    @property
    def utt2spk(self) -> dict[str, str]:
        """``utt -> speaker``."""
        return self.table("utt2spk")

    def spk2utt(self) -> dict[str, list[str]]:
        """``speaker -> [utt, ...]`` derived from utt2spk (both sorted)."""
        out: dict[str, list[str]] = {}
        for utt in self.utt_ids():
            out.setdefault(self.utt2spk[utt], []).append(utt)
        return {s: out[s] for s in sorted(out, key=c_sort_key)}

    def _spk2utt_text(self) -> dict[str, str]:
        return {s: " ".join(u) for s, u in self.spk2utt().items()}

    def segments(self) -> dict[str, tuple[str, float, float]]:
        """``utt -> (recording, start_s, end_s)``; end -1 means the end of the recording."""
        out = {}
        for utt, value in self.table("segments").items():
            fields = value.split()
            if len(fields) not in (3, 4):
                raise DataDirError(f"{self.where('segments', utt)}: expected 'utt recording "
                                   f"start end [channel]', got {utt} {value!r}")
            try:
                out[utt] = (fields[0], *segment_times(fields))
            except ValueError as e:
                raise DataDirError(f"{self.where('segments', utt)}: {e}") from None
        return out

    def segment_channels(self) -> dict[str, int]:
        """``utt -> channel`` for segments lines with Kaldi's optional 5th field (0-based)."""
        out = {}
        for utt, value in self.table("segments").items():
            fields = value.split()
            if len(fields) == 4:
                try:
                    out[utt] = int(fields[3])
                except ValueError:
                    raise DataDirError(f"{self.where('segments', utt)}: channel must be an "
                                       f"integer, got {fields[3]!r}") from None
        return out

    def _number_table(self, name: str, integer: bool = False) -> dict:
        out = {}
        for key, value in self.table(name).items():
            try:
                out[key] = parse_number(value, integer)
            except ValueError:
                kind = "an integer" if integer else "a finite number"
                raise DataDirError(f"{self.where(name, key)}: {key}: expected {kind}, got "
                                   f"{value!r}") from None
        return out

    def utt2dur(self) -> dict[str, float]:
        """``utt -> duration in seconds`` from utt2dur."""
        return self._number_table("utt2dur")

    def utt2num_frames(self) -> dict[str, int]:
        """``utt -> number of feature frames`` from utt2num_frames."""
        return self._number_table("utt2num_frames", integer=True)

    def text(self) -> dict[str, str]:
        """``utt -> transcript``."""
        return self.table("text")

    def wav_scp(self) -> dict[str, str]:
        """``recording (or utt) -> rxfilename``."""
        return self.table("wav.scp")

    # ------------------------------------------------------------------ audio

    def recording_of(self, utt: str) -> tuple[str, float, float]:
        """``(recording, start_s, end_s)`` of ``utt`` (whole recording: start 0, end -1)."""
        if self.has("segments"):
            seg = self.segments().get(utt)
            if seg is None:
                raise DataDirError(f"{self.where('segments')}: no segment for utterance {utt!r}")
            return seg
        return utt, 0.0, -1.0

    def audio(self, utt_ids: Iterable[str] | None = None, sample_rate: int | None = None,
              scale: str = "float", channel: int | None = None) -> Iterator[Utterance]:
        """Yield an ``Utterance`` per utterance (default: all, sorted), errors included.

        Segments are cut from their recording as Kaldi's ``extract-segments`` does (sample
        index = int(seconds * rate), an end up to 0.5 s past the recording is clipped, a
        segment's 5th field picks its channel). A recording shared by consecutive utterances is
        read once. Audio options are those of ``asrkit.io.load_audio``.
        """
        from asrkit.io.wavscp import load_rxfilename

        wav = self.wav_scp()
        segments = self.segments() if self.has("segments") else None
        seg_channels = self.segment_channels() if self.has("segments") else {}
        cache: tuple[tuple, np.ndarray | None, int | None, str | None] | None = None
        for utt in self.utt_ids() if utt_ids is None else utt_ids:
            if segments is not None:
                if utt not in segments:
                    yield Utterance(utt, None, None, "", "no line in segments")
                    continue
                reco, start, end = segments[utt]
            else:
                reco, start, end = utt, 0.0, -1.0
            source = wav.get(reco)
            if source is None:
                yield Utterance(utt, None, None, "", f"recording {reco!r} not in wav.scp")
                continue
            ch = seg_channels.get(utt, channel)
            if cache is None or cache[0] != (reco, ch):
                try:
                    samples, rate = load_rxfilename(source, sample_rate=sample_rate, scale=scale,
                                                    channel=ch)
                    cache = ((reco, ch), samples, rate, None)
                except AudioError as e:
                    cache = ((reco, ch), None, None, str(e))
            _, samples, rate, error = cache
            if error is not None:
                yield Utterance(utt, None, None, source, error)
                continue
            if segments is None:
                yield Utterance(utt, samples, rate, source)
                continue
            num = samples.shape[0]
            first = int(start * rate)
            last = int(end * rate) if end != -1 else num
            if last > num:
                if last - num < int(MAX_SEGMENT_OVERSHOOT * rate):
                    last = num
                else:
                    yield Utterance(utt, None, None, source,
                                    f"segment ends at {end} s but recording {reco!r} has only "
                                    f"{num / rate:.3f} s")
                    continue
            if first < 0 or first >= last:
                yield Utterance(utt, None, None, source,
                                f"empty segment {start}-{end} s of recording {reco!r}")
                continue
            yield Utterance(utt, samples[first:last].copy(), rate, source)

    def utterances(self, utt_ids: Iterable[str] | None = None, sample_rate: int | None = None,
                   scale: str = "float",
                   channel: int | None = None) -> Iterator[tuple[str, np.ndarray, int]]:
        """Iterate ``(utt_id, waveform float32 [num_samples], sample_rate)`` with segments applied.

        Raises ``asrkit.io.AudioError`` naming the utterance and its wav.scp entry at the first
        utterance whose audio cannot be read (``audio()`` yields such failures instead).
        """
        for u in self.audio(utt_ids, sample_rate=sample_rate, scale=scale, channel=channel):
            if u.error is not None:
                raise AudioError(f"utterance {u.utt_id!r} ({u.source or 'no audio'}): {u.error}")
            yield u.utt_id, u.waveform, u.sample_rate

    # ------------------------------------------------------------------ editing and writing

    def subset(self, utt_ids: Iterable[str]) -> DataDir:
        """A new DataDir with only ``utt_ids`` (and their speakers and recordings)."""
        keep = set(utt_ids) & set(self.utt2spk)
        speakers = {self.utt2spk[u] for u in keep}
        recordings = ({self.segments()[u][0] for u in keep if u in self.table("segments")}
                      if self.has("segments") else keep)
        out = DataDir(None)
        for name, table in self.tables.items():
            if name in UTT_FILES:
                ids = keep
            elif name in SPK_FILES:
                ids = speakers
            else:
                ids = recordings
            out.tables[name] = {k: v for k, v in table.items() if k in ids}
        out.tables["spk2utt"] = out._spk2utt_text()
        return out

    def write(self, path: str) -> None:
        """Write every table to ``path`` (created if needed), sorted, spk2utt regenerated.

        Each file is written atomically. Files of ``path`` this DataDir does not hold are left.
        """
        os.makedirs(path, exist_ok=True)
        self.tables["spk2utt"] = self._spk2utt_text()
        for name, table in self.tables.items():
            lines = []
            for key in sorted(table, key=c_sort_key):
                value = table[key]
                lines.append(f"{key} {value}\n" if value or name != "text" else f"{key}\n")
            atomic_write_text(os.path.join(path, name), "".join(lines), encoding="utf-8")
        self.path = path

    # ------------------------------------------------------------------ checks

    def validate(self, no_text: bool = False, no_wav: bool = False,
                 no_feats: bool = False) -> list[Problem]:
        """Problems of this directory as ``validate_data_dir`` reports them (see there)."""
        if self.path is None:
            raise ValueError("validate() needs a DataDir read from disk; use validate_data_dir")
        return validate_data_dir(self.path, no_text=no_text, no_wav=no_wav, no_feats=no_feats)


# ---------------------------------------------------------------------------- validation

def _check_file_format(path: str, name: str, problems: list[Problem]) -> None:
    """Line-level checks: newline at end, no blank lines, field counts, sorted unique keys."""
    fpath = os.path.join(path, name)
    with open(fpath, "rb") as f:
        raw = f.read()
    if raw and not raw.endswith(b"\n"):
        problems.append(Problem(fpath, raw.count(b"\n") + 1, "no newline at end of file"))
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        problems.append(Problem(fpath, raw[:e.start].count(b"\n") + 1, "not valid UTF-8"))
    if b"\r" in raw:
        first = raw[:raw.index(b"\r")].count(b"\n") + 1
        count = raw.count(b"\r")
        problems.append(Problem(fpath, first, f"carriage return (CR) in {count} "
                                              "line(s): a DOS/Windows file? (convert it with "
                                              "dos2unix or tr -d '\\r')"))
    prev: str | None = None
    seen: dict[str, int] = {}
    for lineno, line in read_lines(fpath):
        if not line.strip():
            problems.append(Problem(fpath, lineno, "empty line"))
            continue
        if line != line.strip() and name != "text":
            problems.append(Problem(fpath, lineno, "leading or trailing whitespace"))
        fields = line.split()
        key = fields[0]
        want = _EXACT_FIELDS.get(name)
        if name == "segments" and len(fields) not in (4, 5):
            problems.append(Problem(fpath, lineno, f"expected 4 or 5 fields (utt recording start "
                                                   f"end [channel]), got {len(fields)}"))
        elif want is not None and len(fields) != want:
            problems.append(Problem(fpath, lineno, f"expected {want} fields, got {len(fields)}"))
        elif len(fields) < _MIN_FIELDS.get(name, 1):
            problems.append(Problem(fpath, lineno, f"expected at least {_MIN_FIELDS[name]} "
                                                   f"fields, got {len(fields)}"))
        if key in seen:
            problems.append(Problem(fpath, lineno, f"duplicate key {key!r} (first on line "
                                                   f"{seen[key]})"))
        elif prev is not None and c_sort_key(key) < c_sort_key(prev):
            problems.append(Problem(fpath, lineno, f"not sorted: {key!r} comes after {prev!r} "
                                                   "(sort with LC_ALL=C, or run asrkit data fix)"))
        seen.setdefault(key, lineno)
        prev = key


def _check_numbers(d: DataDir, name: str, problems: list[Problem], integer: bool = False):
    for key, value in d.table(name).items():
        try:
            x = parse_number(value, integer)
            ok = x > 0 if name != "reco2dur" else x >= 0
        except ValueError:
            ok = False
        if not ok:
            kind = "positive integer" if integer else "positive number"
            problems.append(Problem(d.where(name), d.line_numbers[name][key],
                                    f"{key}: expected a {kind}, got {value!r}"))


def _check_table_targets(d: DataDir, name: str, problems: list[Problem]) -> None:
    """Every ``key rxfilename`` of a script file must point into an existing file, at an offset
    inside it (pipes are not run)."""
    from asrkit.io.kaldi_tables import TableError, _split_rxfilename

    sizes: dict[str, int | None] = {}
    for key, rx in d.table(name).items():
        line = d.line_numbers[name][key]
        if rx.rstrip().endswith("|") or rx.strip() == "-":
            continue
        try:
            path, offset, _ = _split_rxfilename(rx)
        except TableError as e:
            problems.append(Problem(d.where(name), line, f"{key}: {e}"))
            continue
        if path not in sizes:
            sizes[path] = os.path.getsize(path) if os.path.isfile(path) else None
        size = sizes[path]
        if size is None:
            what = "is a directory" if os.path.isdir(path) else "does not exist"
            problems.append(Problem(d.where(name), line, f"{key}: archive {path} {what}"))
        elif offset is not None and offset >= size:
            problems.append(Problem(d.where(name), line, f"{key}: offset {offset} is past the end "
                                                        f"of {path} ({size} bytes)"))


def _check_keys(d: DataDir, name: str, expected: set[str], what: str, against: str,
                problems: list[Problem], both_ways: bool = True) -> None:
    """Keys of ``name`` must be in ``expected`` (and, both_ways, every expected key in it)."""
    table = d.table(name)
    for key in table:
        if key not in expected:
            problems.append(Problem(d.where(name), d.line_numbers[name][key],
                                    f"{what} id {key!r} not in {against}"))
    if both_ways:
        against_lines = d.line_numbers.get(against, {})
        for key in sorted(expected - set(table), key=c_sort_key):
            problems.append(Problem(d.where(against), against_lines.get(key, 0),
                                    f"{what} id {key!r} has no line in {name}"))


def validate_data_dir(path: str, no_text: bool = False, no_wav: bool = False,
                      no_feats: bool = False) -> list[Problem]:
    """Check the data directory ``path`` as Kaldi's ``utils/validate_data_dir.sh`` does.

    Checks every known file for a final newline, blank lines, field counts, UTF-8, and keys
    unique and in C-locale order; then that utt2spk, spk2utt, text, wav.scp / segments,
    utt2dur, utt2num_frames, feats.scp, cmvn.scp and spk2gender agree on the utterances,
    speakers and recordings, that segment times are valid, and that utt2spk sorted by speaker
    keeps utterance order. ``no_text``/``no_wav``/``no_feats`` drop the checks of those files.
    Returns the problems (errors, then warnings); an empty list means the directory is valid.
    """
    problems: list[Problem] = []
    if not os.path.isdir(path):
        return [Problem(path, 0, "not a directory")]
    required = ["utt2spk", "spk2utt"] + ([] if no_text else ["text"]) + (
        [] if no_wav else ["wav.scp"])
    for name in required:
        if not os.path.isfile(os.path.join(path, name)):
            problems.append(Problem(os.path.join(path, name), 0, "no such file"))
    if problems and not os.path.isfile(os.path.join(path, "utt2spk")):
        return problems
    d = DataDir.read(path)
    if no_text:
        d.tables.pop("text", None)
    if no_wav:
        for name in ("wav.scp", "segments", "reco2file_and_channel", "reco2dur"):
            d.tables.pop(name, None)
    if no_feats:
        d.tables.pop("feats.scp", None)
    for name in d.tables:
        _check_file_format(path, name, problems)

    utts = set(d.utt2spk)
    speakers = set(d.utt2spk.values())

    # utt2spk sorted by speaker must keep utterance order (speaker ids prefix utterance ids)
    by_utt = d.utt_ids()
    by_spk = sorted(by_utt, key=lambda u: (c_sort_key(d.utt2spk[u]), c_sort_key(u)))
    for a, b in zip(by_utt, by_spk):
        if a != b:
            problems.append(Problem(d.where("utt2spk"), d.line_numbers["utt2spk"][a],
                                    "utt2spk is not in sorted order when sorted first on speaker "
                                    f"id (utterance {a!r}, speaker {d.utt2spk[a]!r}); make "
                                    "speaker ids prefixes of utterance ids"))
            break

    if d.has("spk2utt"):
        derived = d.spk2utt()
        for spk, value in d.table("spk2utt").items():
            line = d.line_numbers["spk2utt"][spk]
            if spk not in derived:
                problems.append(Problem(d.where("spk2utt"), line,
                                        f"speaker id {spk!r} not in utt2spk"))
            elif value.split() != derived[spk]:
                problems.append(Problem(d.where("spk2utt"), line,
                                        f"utterances of speaker {spk!r} do not match utt2spk "
                                        "(regenerate spk2utt from utt2spk: asrkit data fix)"))
        for spk in sorted(speakers - set(d.table("spk2utt")), key=c_sort_key):
            problems.append(Problem(d.where("spk2utt"), 0,
                                    f"speaker id {spk!r} of utt2spk has no line in spk2utt"))

    if d.has("text"):
        _check_keys(d, "text", utts, "utterance", "utt2spk", problems)

    recordings: set[str] = set()
    if d.has("segments"):
        _check_keys(d, "segments", utts, "utterance", "utt2spk", problems)
        wav = d.wav_scp()
        for utt, value in d.table("segments").items():
            line = d.line_numbers["segments"][utt]
            fields = value.split()
            if len(fields) not in (3, 4):
                continue  # reported by the format check
            if len(fields) == 4 and not (fields[3].isdigit()):
                problems.append(Problem(d.where("segments"), line,
                                        f"channel must be an integer >= 0, got {fields[3]!r}"))
            reco = fields[0]
            recordings.add(reco)
            if d.has("wav.scp") and reco not in wav:
                problems.append(Problem(d.where("segments"), line,
                                        f"recording id {reco!r} not in wav.scp"))
            try:
                segment_times(fields)
            except ValueError as e:
                problems.append(Problem(d.where("segments"), line, str(e)))
        for reco in sorted(set(wav) - recordings, key=c_sort_key):
            problems.append(Problem(d.where("wav.scp"), d.line_numbers["wav.scp"][reco],
                                    f"recording id {reco!r} has no segments", "warning"))
        for name in ("reco2file_and_channel", "reco2dur"):
            if d.has(name):
                _check_keys(d, name, set(wav), "recording", "wav.scp", problems)
    elif d.has("wav.scp"):
        _check_keys(d, "wav.scp", utts, "utterance", "utt2spk", problems)
        if d.has("text"):
            wav = d.wav_scp()
            for utt in d.table("text"):
                if utt in utts and utt not in wav:
                    problems.append(Problem(d.where("text"), d.line_numbers["text"][utt],
                                            f"utterance id {utt!r} not in wav.scp"))

    for name in ("utt2dur", "utt2num_frames", "feats.scp", "utt2uniq", "utt2lang", "vad.scp"):
        if d.has(name):
            _check_keys(d, name, utts, "utterance", "utt2spk", problems)
    for name in ("cmvn.scp", "spk2gender"):
        if d.has(name):
            _check_keys(d, name, speakers, "speaker", "spk2utt", problems)
    for name in ("feats.scp", "cmvn.scp", "vad.scp"):
        if d.has(name):
            _check_table_targets(d, name, problems)
    if d.has("utt2dur"):
        _check_numbers(d, "utt2dur", problems)
    if d.has("reco2dur"):
        _check_numbers(d, "reco2dur", problems)
    if d.has("utt2num_frames"):
        _check_numbers(d, "utt2num_frames", problems, integer=True)
    if d.has("spk2gender"):
        for spk, g in d.table("spk2gender").items():
            if g not in ("m", "f"):
                problems.append(Problem(d.where("spk2gender"), d.line_numbers["spk2gender"][spk],
                                        f"gender of {spk!r} must be 'm' or 'f', got {g!r}"))
    if d.has("text"):
        for utt, words in d.table("text").items():
            bad = sorted({c for c in words if ord(c) < 32 and c != "\t"})
            if bad:
                problems.append(Problem(d.where("text"), d.line_numbers["text"][utt],
                                        f"control characters {bad!r} in transcript"))
    problems.sort(key=lambda p: (p.severity != "error", p.path, p.line))
    return problems


# ---------------------------------------------------------------------------- fixing

@dataclasses.dataclass
class FixReport:
    """What ``fix_data_dir`` changed: ids dropped per file, and malformed lines removed."""

    dropped: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    malformed: list[str] = dataclasses.field(default_factory=list)
    num_utterances: int = 0
    num_speakers: int = 0
    backup: str | None = None

    def summary(self) -> str:
        """Human-readable lines, as fix_data_dir.sh prints."""
        lines = [f"kept {self.num_utterances} utterances of {self.num_speakers} speakers"]
        for line in self.malformed:
            lines.append(f"removed malformed line {line}")
        for name, ids in self.dropped.items():
            if ids:
                shown = ", ".join(ids[:10]) + (" ..." if len(ids) > 10 else "")
                lines.append(f"{name}: dropped {len(ids)} entries: {shown}")
        if self.backup:
            lines.append(f"old files backed up in {self.backup}")
        return "\n".join(lines)


def _well_formed(name: str, value: str) -> bool:
    nfields = 1 + len(value.split())
    if name in _EXACT_FIELDS and nfields != _EXACT_FIELDS[name]:
        return False
    if nfields < _MIN_FIELDS.get(name, 1):
        return False
    try:
        if name == "segments":
            f = value.split()
            if len(f) not in (3, 4) or (len(f) == 4 and not f[3].isdigit()):
                return False
            segment_times(f)
            return True
        if name in ("utt2dur", "utt2num_frames"):
            return parse_number(value, integer=name == "utt2num_frames") > 0
    except ValueError:
        return False
    return True


def fix_data_dir(path: str, backup: bool = True) -> FixReport:
    """Repair the data directory ``path`` in place as Kaldi's ``utils/fix_data_dir.sh`` does.

    Sorts every file (C locale), keeps the first line of a duplicated key, removes malformed
    lines, keeps only utterances present in utt2spk and in every other utterance file (text,
    segments or wav.scp, feats.scp, utt2dur, ...), speakers present in cmvn.scp and spk2gender
    where those exist, and recordings with segments; regenerates spk2utt from utt2spk. With
    ``backup`` the old files go to ``path/.backup/``. Returns a ``FixReport``.
    """
    d = DataDir.read(path)
    report = FixReport()
    for name, table in d.tables.items():
        for key in list(table):
            if name != "spk2utt" and not _well_formed(name, table[key]):
                report.malformed.append(f"{d.where(name, key)}: {key} {table[key]}")
                del table[key]
    before = {name: set(t) for name, t in d.tables.items()}
    segments = d.segments() if d.has("segments") else None
    while True:
        utts = set(d.utt2spk)
        for name in UTT_FILES:
            if d.has(name):
                utts &= set(d.table(name))
        if segments is not None:
            recordings = set(d.wav_scp()) & {segments[u][0] for u in utts}
            for name in ("reco2file_and_channel", "reco2dur"):
                if d.has(name):
                    recordings &= set(d.table(name))
            utts = {u for u in utts if segments[u][0] in recordings}
        elif d.has("wav.scp"):
            utts &= set(d.wav_scp())
            recordings = utts
        else:
            recordings = set()
        speakers = {d.utt2spk[u] for u in utts}
        for name in ("cmvn.scp", "spk2gender"):
            if d.has(name):
                speakers &= set(d.table(name))
        utts = {u for u in utts if d.utt2spk[u] in speakers}
        changed = False
        for name in list(d.tables):
            if name == "spk2utt":
                continue
            ids = utts if name in UTT_FILES else speakers if name in SPK_FILES else recordings
            table = d.tables[name]
            drop = [k for k in table if k not in ids]
            for k in drop:
                del table[k]
            changed |= bool(drop)
        if not changed:
            break
    d.tables["spk2utt"] = d._spk2utt_text()
    for name, keys in before.items():
        if name != "spk2utt":
            report.dropped[name] = sorted(keys - set(d.tables[name]), key=c_sort_key)
    report.num_utterances = len(d.utt2spk)
    report.num_speakers = len(d.speakers())
    if backup:
        folder = os.path.join(path, ".backup")
        os.makedirs(folder, exist_ok=True)
        for name in d.tables:
            src = os.path.join(path, name)
            if os.path.isfile(src):
                shutil.copy2(src, os.path.join(folder, name))
        report.backup = folder
    d.write(path)
    return report


# ---------------------------------------------------------------------------- subsets

def split_evenly(items: list, num_parts: int) -> list[list]:
    """Split ``items`` into ``num_parts`` contiguous parts whose sizes differ by at most one."""
    if num_parts < 1:
        raise ValueError("num_parts must be >= 1")
    bounds = np.linspace(0, len(items), num_parts + 1).round().astype(int)
    return [items[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def evenly_spaced(items: list, n: int) -> list:
    """``n`` items spread evenly over ``items`` (Kaldi's subset_scp.pl default)."""
    if n >= len(items):
        return list(items)
    idx = (np.arange(n) * len(items)) // n
    return [items[i] for i in idx]
