"""Acoustic models: a network description, its parameters and its token inventory, in one file.

``save(path, model)`` writes an ``.npz`` archive (see :mod:`asrkit.models.archive`) whose JSON
header holds the network description (``[network]`` of the training config), the input
dimension, the tokens and the blank id, and whose arrays are the parameters by name. ``load``
rebuilds the graph from the description: no recipe or training code is needed.
"""

from __future__ import annotations

import os

import numpy as np

from asrkit import ops
from asrkit.config.acoustic_net import build_network, output_lengths
from asrkit.graph import Sequence, evaluate
from asrkit.models.archive import ArchiveError, load_archive, save_archive

FORMAT = "asrkit-model"
VERSION = 1


class Model:
    """A CTC/frame-level acoustic model.

    network: a ``[network]`` description (dict); input_dim: features per frame; tokens: the
    output symbols by id (``tokens[blank]`` is the CTC blank); params: optional ``{name: array}``
    (default: freshly initialised from the description's seed); reader: how the training
    features were prepared (``cmvn``, ``norm_vars``, ``unit``), kept in the file so decoders
    normalise features the same way.

    ``model(feats, lengths)`` -> ``(log_probs float32 [T', B, C], out_lengths int32 [B])``.
    """

    def __init__(self, network: dict, input_dim: int, tokens: list[str], blank: int = 0,
                 params: dict | None = None, reader: dict | None = None):
        self.tokens = list(tokens)
        self.reader = dict(reader or {})
        self.blank = int(blank)
        if not 0 <= self.blank < len(self.tokens):
            raise ValueError(f"blank id {blank} is not a token id (0..{len(self.tokens) - 1})")
        self.net = build_network(network, int(input_dim), len(self.tokens), values=params)
        self.network = self.net.description
        self.input_dim = int(input_dim)
        self.feats = self.net.feats
        self.logits = self.net.logits
        self.log_probs = ops.log_softmax(self.logits)

    @property
    def num_classes(self) -> int:
        """Number of output tokens (blank included)."""
        return len(self.tokens)

    @property
    def params(self) -> dict:
        """``{name: Parameter}`` in creation order."""
        return self.net.params

    def state_dict(self) -> dict[str, np.ndarray]:
        """Copies of the parameter values by name."""
        return {k: p.value.copy() for k, p in self.params.items()}

    def load_state_dict(self, values: dict, strict: bool = True) -> None:
        """Set parameters from ``{name: array}`` (shapes must match; ``strict``: all names)."""
        missing = set(self.params) - set(values)
        unknown = set(values) - set(self.params)
        if strict and (missing or unknown):
            raise KeyError(f"state dict mismatch: missing {sorted(missing)}, unknown "
                           f"{sorted(unknown)}")
        for k, v in values.items():
            if k in self.params:
                self.params[k].set_value(v)

    def output_lengths(self, lengths) -> np.ndarray:
        """Output frames per sequence for input ``lengths`` (after stacking/subsampling)."""
        return output_lengths(self.network, lengths)

    def __call__(self, feats, lengths=None, device: str = "cpu"):
        """Log-posteriors of a padded batch.

        feats: float32 ``[T, B, input_dim]`` (or ``[T, input_dim]`` for one utterance, or a
        Sequence); lengths: int ``[B]`` (default: all T). Returns ``(log_probs [T', B, C],
        out_lengths int32 [B])`` (``[T', C]`` and ``[1]`` for a single utterance).
        """
        single = False
        if isinstance(feats, Sequence):
            feats, lengths = feats.data, feats.lengths
        feats = np.asarray(feats, np.float32)
        if feats.ndim == 2:
            single = True
            feats = feats[:, None]
        if feats.ndim != 3 or feats.shape[2] != self.input_dim:
            raise ValueError(f"model input must be [T, B, {self.input_dim}]; got "
                             f"{list(feats.shape)}")
        if lengths is None:
            lengths = np.full(feats.shape[1], feats.shape[0], np.int32)
        (out,) = evaluate([self.log_probs], {self.feats: (feats, lengths)}, device=device)
        if single:
            return out.data[:, 0], out.lengths
        return out.data, out.lengths

    def header(self) -> dict:
        """The JSON header of this model's file."""
        return {"format": FORMAT, "version": VERSION, "network": self.network,
                "input_dim": self.input_dim, "tokens": self.tokens, "blank": self.blank,
                "reader": self.reader, "params": list(self.params)}


def save(path: str | os.PathLike, model: Model) -> None:
    """Write ``model`` (description + parameters) to ``path`` atomically."""
    save_archive(path, model.header(), model.state_dict())


def model_from_archive(header: dict, arrays: dict, where: str = "<model>") -> Model:
    """Rebuild a Model from an archive's header and arrays (see :func:`load`)."""
    if header.get("format") != FORMAT:
        raise ArchiveError(f"{where}: not an asrkit model (format {header.get('format')!r})")
    if int(header.get("version", 0)) > VERSION:
        raise ArchiveError(f"{where}: model format version {header['version']} is newer than "
                           f"this asrkit reads ({VERSION})")
    names = header["params"]
    missing = [n for n in names if n not in arrays]
    if missing:
        raise ArchiveError(f"{where}: parameters missing from the file: {', '.join(missing)}")
    return Model(header["network"], header["input_dim"], header["tokens"], header["blank"],
                 params={n: arrays[n] for n in names}, reader=header.get("reader"))


def load(path: str | os.PathLike) -> Model:
    """Read a model written by :func:`save`; returns a :class:`Model` ready for inference."""
    header, arrays = load_archive(path)
    return model_from_archive(header, arrays, os.fspath(path))
