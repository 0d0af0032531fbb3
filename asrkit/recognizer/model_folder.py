"""A trained model's self-contained folder, as recipes leave it in ``exp/final/``.

::

    manifest.json   what the folder holds: file names, feature normalisation, frame shift,
                    sample rate, default search options (``decode``), and optionally the
                    VTLN warps whose log-probabilities are averaged (``vtln_warps``)
    model.mdl       the acoustic model (asrkit.models)
    features.toml   the feature config (asrkit compute-features format)
    graph/          a decoding graph from asrkit graph build (TLG.npz, words.txt, graph.json)
    tokens.txt      the model's output units; lexicon.txt (word -> tokens) when there is one

The folder is a trust boundary: it is shipped to users and read by ``asrkit transcribe``,
``align`` and ``export``. Every file name the manifest gives must stay inside the folder (no
absolute paths, no ``..``, no symbolic link out of it), every value is checked, and errors
(``ModelFolderError``) name the file and key at fault.

Normalisation settings (``cmvn``, ``norm_vars``, for ``sliding`` ``cmn_window``,
``min_cmn_window``, ``cmn_center``, and for ``global`` the training set's ``global_stats``) are
the training reader's (``ReaderConfig.normalization``), applied by ``asrkit.features.normalize``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os

from asrkit.recognizer.options import RecognizerError, vtln_warps_option

MANIFEST = "manifest.json"
FILES = {"model": "model.mdl", "features": "features.toml", "graph": "graph",
         "lexicon": "lexicon.txt", "tokens": "tokens.txt"}  # manifest key -> default name
NORMALIZATION = {"cmvn": "speaker", "norm_vars": False, "cmn_window": 600,
                 "min_cmn_window": 100, "cmn_center": False}  # key -> default (ReaderConfig's)


class ModelFolderError(RecognizerError):
    """A model folder that cannot be used; the message names the file (and key)."""


def inside(root: str, name, where: str) -> str:
    """The path of ``name`` inside folder ``root``; ModelFolderError (naming ``where``) when
    ``name`` is not a relative file name or resolves (symbolic links followed) outside."""
    if not isinstance(name, str) or not name or "\0" in name:
        raise ModelFolderError(f"{where}: expected a file name inside the folder, got {name!r}")
    if os.path.isabs(name):
        raise ModelFolderError(f"{where}: {name!r} is an absolute path; only names inside the "
                               "folder are allowed")
    real_root = os.path.realpath(root)
    real = os.path.realpath(os.path.join(root, name))
    if os.path.commonpath([real_root, real]) != real_root:
        raise ModelFolderError(f"{where}: {name!r} points outside the folder {root}")
    return os.path.join(root, name)


def normalization_settings(source: dict, where: str) -> dict:
    """The checked normalisation settings in ``source`` (a manifest or a model's ``reader``
    header), defaults filled in; ModelFolderError naming ``where`` and the key."""
    from asrkit.features.cmvn import NormalizeOptionError, check_normalize_options

    out = {}
    for key, default in NORMALIZATION.items():
        value = source.get(key)
        value = default if value is None else value
        if type(value) is not type(default):
            raise ModelFolderError(f"{where}: {key}: expected {type(default).__name__}, got "
                                   f"{value!r}")
        out[key] = value
    try:
        check_normalize_options(out["cmvn"], out["cmn_window"], out["min_cmn_window"],
                                out["cmn_center"])
    except NormalizeOptionError as e:
        key = {"mode": "cmvn", "min_window": "min_cmn_window", "center": "cmn_center"}.get(
            e.option, e.option)
        raise ModelFolderError(f"{where}: {key}: {e.reason}") from None
    out["global_stats"] = None
    if out["cmvn"] == "global":
        out["global_stats"] = _global_stats(source.get("global_stats"), where)
    return out


def _global_stats(value, where: str) -> list:
    """Checked ``global_stats``: Kaldi CMVN stats as nested lists ``[2][D+1]`` of finite
    numbers with a frame count of at least 1."""
    from asrkit.features.cmvn import check_global_stats

    try:
        if not isinstance(value, list) or any(isinstance(v, bool) for row in value
                                              if isinstance(row, list) for v in row):
            raise ValueError("expected nested lists of numbers")
        check_global_stats(value)
    except ValueError as e:
        raise ModelFolderError(f"{where}: global_stats: cmvn \"global\" needs the training "
                               f"set's statistics: {e}") from None
    return value


def read_manifest(folder: str) -> dict:
    """Read and check ``folder/manifest.json``; returns it with the normalisation settings
    filled in. Raises ModelFolderError naming the file, line or key."""
    path = os.path.join(folder, MANIFEST)
    if not os.path.isdir(folder):
        raise ModelFolderError(f"{folder}: no such folder (make one with asrkit package)")
    if not os.path.isfile(path):
        raise ModelFolderError(f"{path}: no such file: not a model folder (make one with "
                               "asrkit package)")
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except json.JSONDecodeError as e:
        raise ModelFolderError(f"{path}:{e.lineno}: invalid JSON: {e.msg}") from None
    except (UnicodeDecodeError, OSError) as e:
        raise ModelFolderError(f"{path}: cannot read: {e}") from None
    if not isinstance(manifest, dict):
        raise ModelFolderError(f"{path}: expected a JSON object")
    for key in FILES:
        if manifest.get(key) is not None:
            inside(folder, manifest[key], f"{path}: {key}")
    shift = manifest.get("frame_shift")
    if isinstance(shift, bool) or not isinstance(shift, (int, float)) or \
            not (math.isfinite(shift) and 0 < shift <= 10):
        raise ModelFolderError(f"{path}: frame_shift: expected seconds in (0, 10], got {shift!r}")
    rate = manifest.get("sample_rate")
    if isinstance(rate, bool) or not isinstance(rate, int) or not 1000 <= rate <= 1_000_000:
        raise ModelFolderError(f"{path}: sample_rate: expected Hz in [1000, 1000000], got "
                               f"{rate!r}")
    decode = manifest.get("decode") or {}
    if not isinstance(decode, dict):
        raise ModelFolderError(f"{path}: decode: expected a table of search options")
    try:
        warps = vtln_warps_option(manifest.get("vtln_warps"), f"{path}: ")
    except RecognizerError as e:
        raise ModelFolderError(str(e)) from None
    return {**manifest, **normalization_settings(manifest, path), "decode": decode,
            "vtln_warps": warps}


def check_warps(warps, model, feature_config, where: str) -> None:
    """ModelFolderError unless ``warps`` (a checked ``vtln_warps``, or None) can be used with
    ``model`` and ``feature_config``: the warps change the mel banks of fbank or mfcc features,
    and their averaged log-probabilities need a per-frame (CTC) model."""
    if not warps or warps == (1.0,):
        return
    if feature_config.kind not in ("fbank", "mfcc"):
        raise ModelFolderError(f"{where}vtln_warps: {feature_config.kind} features have no mel "
                               "banks to warp (fbank or mfcc only)")
    if hasattr(model, "transducer"):
        raise ModelFolderError(f"{where}vtln_warps: a transducer model has no per-frame "
                               "log-probabilities to average (CTC models only)")


def check_decode(decode: dict, model, where: str = "") -> None:
    """Check default search options (a folder's ``decode`` table) as ``Recognizer.from_dir``
    takes them for ``model``: a transducer's (``asrkit.recognizer.transducer``) or a graph
    search's. ``where`` prefixes the option's name in the RecognizerError."""
    from asrkit.recognizer.options import search_options
    from asrkit.recognizer.transducer import transducer_options

    if hasattr(model, "transducer"):
        transducer_options({}, decode, where)
    else:
        search_options({}, decode, defaults_where=where)


def checked_load(what: str, path: str, loader):
    """``loader(path)`` with any error it raises turned into ModelFolderError naming ``path``."""
    try:
        return loader(path)
    except (OSError, ValueError, KeyError, TypeError, MemoryError) as e:
        msg = str(e) if path in str(e) else f"{path}: {e}"
        raise ModelFolderError(f"{msg} ({what})") from None


@dataclasses.dataclass
class ModelFolder:
    """A loaded model folder: its manifest (checked), model, feature config, decoding graph
    (None when absent and not needed), lexicon ``{word: tokens}`` (first pronunciation), and
    the model's TokenTable."""

    path: str
    manifest: dict
    model: object
    feature_config: object
    graph: object | None
    lexicon: dict[str, tuple[str, ...]]
    tokens: object

    @property
    def frame_shift(self) -> float:
        """Seconds per model output frame (feature shift x subsampling)."""
        return float(self.manifest["frame_shift"])

    @property
    def sample_rate(self) -> int:
        """The rate (Hz) the features expect; audio is resampled to it."""
        return int(self.manifest["sample_rate"])

    def file(self, key: str) -> str:
        """Path of the manifest's ``key`` file (``FILES``) inside the folder."""
        return inside(self.path, self.manifest.get(key) or FILES[key],
                      f"{os.path.join(self.path, MANIFEST)}: {key}")


def load_model_folder(path: str | os.PathLike, need_graph: bool = True) -> ModelFolder:
    """Load and check a model folder (see the module docstring). ``need_graph``: a folder
    without a decoding graph is an error (transcription needs one, alignment does not).
    Raises ModelFolderError naming the file at fault."""
    from asrkit.io import load_feature_config
    from asrkit.io.tokens import TokenTable
    from asrkit.models import load

    path = os.fspath(path)
    manifest = read_manifest(path)
    folder = ModelFolder(path, manifest, None, None, None, {}, None)
    mpath = os.path.join(path, MANIFEST)
    model = checked_load("model", folder.file("model"), load)
    try:
        check_decode(manifest["decode"], model, f"{mpath}: decode.")
    except RecognizerError as e:
        raise ModelFolderError(str(e)) from None
    fconf = checked_load("feature config", folder.file("features"), load_feature_config)
    if fconf.sample_frequency != folder.sample_rate:
        raise ModelFolderError(f"{mpath}: sample_rate {folder.sample_rate} differs from the "
                               f"feature config's sample_frequency {fconf.sample_frequency}")
    check_warps(manifest["vtln_warps"], model, fconf, f"{mpath}: ")
    tokens = TokenTable(model.tokens, "piece", model.blank)
    tpath = folder.file("tokens")
    if os.path.exists(tpath):
        listed = checked_load("tokens", tpath, lambda p: TokenTable.read(p, "piece")).symbols
        if listed != tokens.symbols:
            raise ModelFolderError(f"{tpath}: lists {len(listed)} tokens that differ from the "
                                   f"model's {len(tokens.symbols)}")
    graph = None
    gdir = folder.file("graph")
    if manifest.get("graph") is not None or os.path.isdir(gdir):
        from asrkit.decoders.decode import DecodingGraph

        if not os.path.isdir(gdir):
            raise ModelFolderError(f"{gdir}: no such folder (named by {mpath})")
        graph = checked_load("decoding graph", gdir, DecodingGraph.load)
        n = graph.info.get("num_tokens", model.num_classes)
        if n != model.num_classes:
            raise ModelFolderError(f"{gdir}: the graph is built for {n} tokens, the model "
                                   f"outputs {model.num_classes}")
    elif need_graph:
        raise ModelFolderError(f"{gdir}: the model folder has no decoding graph")
    lexicon: dict[str, tuple[str, ...]] = {}
    lpath = folder.file("lexicon")
    if os.path.exists(lpath):
        from asrkit.decoders.graph import read_lexicon

        for p in checked_load("lexicon", lpath, lambda f: read_lexicon(f, tokens=tokens)):
            lexicon.setdefault(p.word, p.tokens)
    folder.model, folder.feature_config, folder.graph = model, fconf, graph
    folder.lexicon, folder.tokens = lexicon, tokens
    return folder
