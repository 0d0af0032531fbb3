"""A trained model's self-contained folder, as recipes leave it in ``exp/final/``.

::

    manifest.json   what the folder holds, feature normalisation, frame shift
    model.mdl       the acoustic model (asrkit.models)
    features.toml   the feature config (asrkit compute-features format)
    graph/          a decoding graph from asrkit graph build (TLG.npz, words.txt, ...)
    tokens.txt      the model's output units; lexicon.txt (word -> tokens) when there is one

Used by ``asrkit transcribe``, ``asrkit align`` and ``asrkit export``. Audio is read at any sample
rate and format soundfile knows, resampled to the features' rate, and long files are cut at quiet
frames into chunks of at most ``max_chunk_s`` seconds; CMVN statistics are those of the whole file
(the file is its own speaker), so chunking does not change the normalisation.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import numpy as np

MANIFEST = "manifest.json"


@dataclasses.dataclass
class ModelDir:
    """A loaded model folder."""

    path: str
    model: object
    feature_config: object
    graph: object | None
    lexicon: dict[str, tuple[str, ...]]
    manifest: dict

    @property
    def frame_shift(self) -> float:
        """Seconds per model output frame (feature shift x subsampling)."""
        return float(self.manifest["frame_shift"])

    def features(self, wave: np.ndarray) -> np.ndarray:
        """float32 [frames, dim] features of int16-scale audio, without dither."""
        from asrkit.features import compute

        opts = dict(self.feature_config.options)
        opts["dither"] = 0.0
        return compute(self.feature_config.kind, wave, **opts)

    def normalise(self, feats_list: list[np.ndarray]) -> list[np.ndarray]:
        """CMVN over all of a file's chunks together (the file is one speaker)."""
        from asrkit.features import accumulate_cmvn_stats, apply_cmvn

        mode = self.manifest.get("cmvn", "speaker")
        if mode == "none":
            return feats_list
        norm_vars = bool(self.manifest.get("norm_vars", False))
        if mode == "utterance":
            from asrkit.features import cmvn_stats

            return [apply_cmvn(f, cmvn_stats(f), norm_vars=norm_vars) for f in feats_list]
        stats = None
        for f in feats_list:
            stats = accumulate_cmvn_stats(stats, f)
        return [apply_cmvn(f, stats, norm_vars=norm_vars) for f in feats_list]

    def log_probs(self, feats: np.ndarray) -> np.ndarray:
        """float32 [T', C] log-posteriors of one utterance's normalised features."""
        logp, _ = self.model(feats)
        return np.ascontiguousarray(logp)


def load_model_dir(path: str, need_graph: bool = True) -> ModelDir:
    """Load a model folder; errors name the missing or bad file."""
    from asrkit.io import load_feature_config
    from asrkit.models import load

    mpath = os.path.join(path, MANIFEST)
    if not os.path.exists(mpath):
        raise FileNotFoundError(f"{mpath}: not a model folder (make one with asrkit package)")
    with open(mpath, encoding="utf-8") as f:
        manifest = json.load(f)
    model = load(os.path.join(path, manifest.get("model") or "model.mdl"))
    fconf = load_feature_config(os.path.join(path, manifest.get("features") or "features.toml"))
    graph = None
    gdir = os.path.join(path, manifest.get("graph") or "graph")
    if os.path.isdir(gdir):
        from asrkit.decoders.decode import DecodingGraph

        graph = DecodingGraph.load(gdir)
    elif need_graph:
        raise FileNotFoundError(f"{gdir}: the model folder has no decoding graph")
    lexicon: dict[str, tuple[str, ...]] = {}
    lpath = os.path.join(path, "lexicon.txt")
    if os.path.exists(lpath):
        from asrkit.decoders.graph import read_lexicon

        for p in read_lexicon(lpath):
            lexicon.setdefault(p.word, p.tokens)
    return ModelDir(path, model, fconf, graph, lexicon, manifest)


def package_model_dir(out: str, model_path: str, features_path: str, graph_dir: str | None,
                      lexicon_path: str | None = None, cmvn: str | None = None,
                      norm_vars: bool | None = None, decode: dict | None = None) -> dict:
    """Copy a model, its feature config, graph and lexicon into ``out``; return the manifest.

    ``decode`` holds default search options for the folder (e.g. a word insertion penalty tuned
    on a dev set), used by ``asrkit transcribe`` unless given on its command line.
    """
    from asrkit.io import load_feature_config
    from asrkit.models import load
    from asrkit.utils import atomic_write_text

    model = load(model_path)  # fail early on a bad model
    fconf = load_feature_config(features_path)
    os.makedirs(out, exist_ok=True)
    shutil.copyfile(model_path, os.path.join(out, "model.mdl"))
    atomic_write_text(os.path.join(out, "features.toml"), fconf.to_toml())
    atomic_write_text(os.path.join(out, "tokens.txt"),
                      "".join(f"{t} {i}\n" for i, t in enumerate(model.tokens)))
    if graph_dir:
        dst = os.path.join(out, "graph")
        if os.path.exists(dst):
            shutil.rmtree(dst)
        shutil.copytree(graph_dir, dst)
        if lexicon_path is None:
            info_path = os.path.join(graph_dir, "graph.json")
            if os.path.exists(info_path):
                with open(info_path, encoding="utf-8") as f:
                    lex = json.load(f).get("lexicon")
                if lex and os.path.exists(lex):
                    lexicon_path = lex
    if lexicon_path:
        shutil.copyfile(lexicon_path, os.path.join(out, "lexicon.txt"))
    reader = model.header().get("reader", {}) or {}
    subsampling = 3000 / max(int(model.output_lengths(np.array([3000], np.int32))[0]), 1)
    shift_ms = float(fconf.options.get("frame_shift", 10.0))
    manifest = {
        "model": "model.mdl", "features": "features.toml",
        "graph": "graph" if graph_dir else None,
        "lexicon": "lexicon.txt" if lexicon_path else None, "tokens": "tokens.txt",
        "cmvn": cmvn or reader.get("cmvn", fconf.cmvn),
        "norm_vars": bool(reader.get("norm_vars", False) if norm_vars is None else norm_vars),
        "frame_shift": shift_ms / 1000.0 * subsampling,
        "sample_rate": fconf.sample_frequency,
        "decode": dict(decode or {}),
    }
    atomic_write_text(os.path.join(out, MANIFEST), json.dumps(manifest, indent=2) + "\n")
    return manifest


def quiet_cuts(wave: np.ndarray, sample_rate: int, max_chunk_s: float) -> list[tuple[int, int]]:
    """Split ``wave`` into (start, end) sample ranges of at most ``max_chunk_s`` seconds each,
    cutting at the quietest 10 ms frame in the last third of each chunk."""
    n = len(wave)
    limit = int(max_chunk_s * sample_rate)
    if n <= limit:
        return [(0, n)]
    hop = max(sample_rate // 100, 1)
    cuts, start = [], 0
    while n - start > limit:
        lo, hi = start + 2 * limit // 3, start + limit
        frames = (hi - lo) // hop
        energy = [float(np.sum(wave[lo + i * hop: lo + (i + 1) * hop].astype(np.float64) ** 2))
                  for i in range(frames)]
        cut = lo + hop * int(np.argmin(energy)) + hop // 2 if frames else hi
        cuts.append((start, cut))
        start = cut
    cuts.append((start, n))
    return cuts
