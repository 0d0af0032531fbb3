"""Making a model folder (``asrkit package``): model, feature config, graph, tokens, lexicon and
a manifest, so the folder needs nothing else to transcribe audio.

The folder is what a user ships, so only what it needs goes in: from the graph folder the files
decoding reads (``GRAPH_FILES``), and the lexicon the graph names in its ``graph.json``, resolved
against the graph folder; a file that lies (or links) outside the graph folder is refused,
never copied.
"""

from __future__ import annotations

import json
import os
import shutil

from asrkit.recognizer.model_folder import (
    MANIFEST,
    ModelFolderError,
    check_decode,
    check_warps,
    checked_load,
    normalization_settings,
)
from asrkit.recognizer.model_stream import subsampling_of
from asrkit.recognizer.options import RecognizerError, vtln_warps_option

GRAPH_FILES = ("TLG.npz", "words.txt", "graph.json", "tokens.txt", "disambig_tokens.int",
               "disambig_words.int")  # what decoding reads, plus the symbol tables


def _inside_graph(graph_dir: str, name: str, where: str) -> str:
    """``name`` (relative to ``graph_dir``, or absolute) if it lies inside ``graph_dir``."""
    real_root = os.path.realpath(graph_dir)
    real = os.path.realpath(os.path.join(graph_dir, name))
    if os.path.commonpath([real_root, real]) != real_root:
        raise ModelFolderError(f"{where}: {name!r} lies outside the graph folder {graph_dir}; "
                               "refused (give the lexicon with --lexicon)")
    return real


def graph_lexicon(graph_dir: str) -> str | None:
    """The lexicon file ``graph_dir/graph.json`` names, inside the graph folder; None when it
    names none. Raises ModelFolderError for a bad graph.json or a lexicon outside or missing."""
    info_path = os.path.join(graph_dir, "graph.json")
    if not os.path.exists(info_path):
        return None
    try:
        with open(info_path, encoding="utf-8") as f:
            info = json.load(f)
    except json.JSONDecodeError as e:
        raise ModelFolderError(f"{info_path}:{e.lineno}: invalid JSON: {e.msg}") from None
    except (UnicodeDecodeError, OSError) as e:
        raise ModelFolderError(f"{info_path}: cannot read: {e}") from None
    lex = info.get("lexicon") if isinstance(info, dict) else None
    if lex is None:
        return None
    if not isinstance(lex, str) or not lex or "\0" in lex:
        raise ModelFolderError(f"{info_path}: lexicon: expected a file name, got {lex!r}")
    path = _inside_graph(graph_dir, lex, f"{info_path}: lexicon")
    if not os.path.isfile(path):
        raise ModelFolderError(f"{info_path}: lexicon {lex!r} is not in the graph folder "
                               "(give the lexicon with --lexicon)")
    return path


def package_model_folder(out: str, model_path: str, features_path: str,
                         graph_dir: str | None = None, lexicon_path: str | None = None,
                         cmvn: str | None = None, norm_vars: bool | None = None,
                         decode: dict | None = None, vtln_warps=None) -> dict:
    """Write the model folder ``out``; returns its manifest.

    ``model_path``: asrkit train's ``final.mdl``; ``features_path``: the feature config used in
    training; ``graph_dir``: from asrkit graph build (optional: alignment needs none);
    ``lexicon_path``: default the one the graph names; ``cmvn``/``norm_vars``: override the
    model's recorded normalisation; ``decode``: default search options (e.g. a word insertion
    penalty tuned on dev, a transducer's word bonus), checked as ``Recognizer.from_dir``'s;
    ``vtln_warps``: VTLN warp factors (``vtln_warps_option``) under which a recording's
    features are computed and the model's log-probabilities averaged (None: one pass).
    Raises ModelFolderError naming the file at fault.
    """
    from asrkit.io import load_feature_config
    from asrkit.models import load
    from asrkit.utils import atomic_write_text

    model = checked_load("model", model_path, load)  # fail early on a bad model
    fconf = checked_load("feature config", features_path, load_feature_config)
    decode = dict(decode or {})
    check_decode(decode, model)
    try:
        warps = vtln_warps_option(vtln_warps)
    except RecognizerError as e:
        raise ModelFolderError(str(e)) from None
    check_warps(warps, model, fconf, "")
    reader = dict(model.header().get("reader") or {})
    if cmvn is not None:
        reader["cmvn"] = cmvn
    elif "cmvn" not in reader:
        reader["cmvn"] = fconf.cmvn
    if norm_vars is not None:
        reader["norm_vars"] = bool(norm_vars)
    norm = normalization_settings(reader, f"{model_path}: reader")
    sources = []
    if graph_dir:
        if not os.path.isfile(os.path.join(graph_dir, "TLG.npz")):
            raise ModelFolderError(f"{graph_dir}/TLG.npz: no such file (run asrkit graph build)")
        sources = [(os.path.join(graph_dir, name), name) for name in GRAPH_FILES
                   if os.path.exists(os.path.join(graph_dir, name))]
        for src, name in sources:
            _inside_graph(graph_dir, name, src)
        if lexicon_path is None:
            lexicon_path = graph_lexicon(graph_dir)
        from asrkit.decoders.decode import DecodingGraph

        graph = checked_load("decoding graph", graph_dir, DecodingGraph.load)
        n = graph.info.get("num_tokens", model.num_classes)
        if n != model.num_classes:
            raise ModelFolderError(f"{graph_dir}: the graph is built for {n} tokens, the model "
                                   f"{model_path} outputs {model.num_classes}")
    if lexicon_path:
        from asrkit.decoders.graph import read_lexicon
        from asrkit.io.tokens import TokenTable

        tokens = TokenTable(model.tokens, "piece", model.blank)
        checked_load("lexicon", lexicon_path, lambda p: read_lexicon(p, tokens=tokens))
    os.makedirs(out, exist_ok=True)
    shutil.copyfile(model_path, os.path.join(out, "model.mdl"))
    atomic_write_text(os.path.join(out, "features.toml"), fconf.to_toml())
    atomic_write_text(os.path.join(out, "tokens.txt"),
                      "".join(f"{t} {i}\n" for i, t in enumerate(model.tokens)))
    if graph_dir:
        dst = os.path.join(out, "graph")
        if os.path.exists(dst):
            shutil.rmtree(dst)
        os.makedirs(dst)
        for src, name in sources:
            shutil.copyfile(src, os.path.join(dst, name))
    if lexicon_path:
        shutil.copyfile(lexicon_path, os.path.join(out, "lexicon.txt"))
    subsampling = subsampling_of(model.network)
    shift_ms = float(fconf.options.get("frame_shift", 10.0))
    manifest = {
        "model": "model.mdl", "features": "features.toml",
        "graph": "graph" if graph_dir else None,
        "lexicon": "lexicon.txt" if lexicon_path else None, "tokens": "tokens.txt",
        **norm,
        "frame_shift": shift_ms / 1000.0 * subsampling,
        "sample_rate": fconf.sample_frequency,
        "decode": decode,
    }
    if warps:
        manifest["vtln_warps"] = list(warps)
    atomic_write_text(os.path.join(out, MANIFEST), json.dumps(manifest, indent=2) + "\n")
    return manifest
