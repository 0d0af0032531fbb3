"""Acoustic models: a network description, its parameters and its token inventory, in one file.

``save(path, model)`` writes an ``.npz`` archive (see :mod:`asrkit.utils.archive`) whose JSON
header holds the network description (``[network]`` of the training config), the input
dimension, the tokens and the blank id, and whose arrays are the parameters by name. ``load``
rebuilds the graph from the description: no recipe or training code is needed.
"""

from __future__ import annotations

import os

import numpy as np

from asrkit import ops
from asrkit.config.acoustic_net import (
    ConfigError,
    build_network,
    check_parameter_memory,
    output_lengths,
    parameter_shapes,
    parse_network,
)
from asrkit.graph import Sequence, evaluate
from asrkit.utils.archive import Archive, ArchiveError, check_format, save_archive

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

    def copy_with(self, params: dict) -> Model:
        """A new model of the same description with ``params`` ``{name: array}``."""
        return Model(self.network, self.input_dim, self.tokens, self.blank, params=params,
                     reader=self.reader)

    def output_lengths(self, lengths) -> np.ndarray:
        """Output frames per sequence for input ``lengths`` (after stacking/subsampling)."""
        return output_lengths(self.network, lengths)

    def __call__(self, feats, lengths=None, device: str = "cpu"):
        """Log-posteriors of a padded batch.

        feats: float32 ``[T, B, input_dim]`` (or ``[T, input_dim]`` for one utterance, or a
        Sequence); lengths: int ``[B]`` (default: all T). Returns ``(log_probs [T', B, C],
        out_lengths int32 [B])`` (``[T', C]`` and ``[1]`` for a single utterance).
        """
        return self._evaluate(self.log_probs, feats, lengths, device)

    def _evaluate(self, node, feats, lengths, device: str):
        """``node`` (a graph output over ``self.feats``) of a padded batch, with ``__call__``'s
        argument conventions: ``(data [T', B, ...], out_lengths int32 [B])``, the batch axis
        dropped for a single ``[T, input_dim]`` utterance."""
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
        (out,) = evaluate([node], {self.feats: (feats, lengths)}, device=device)
        if single:
            return out.data[:, 0], out.lengths
        return out.data, out.lengths

    def header(self) -> dict:
        """The JSON header of this model's file."""
        return {"format": FORMAT, "version": VERSION, "network": self.network,
                "input_dim": self.input_dim, "tokens": self.tokens, "blank": self.blank,
                "reader": self.reader, "params": list(self.params)}


def save(path: str | os.PathLike, model: Model) -> None:
    """Write ``model`` (description + parameters) to ``path`` atomically.

    Raises ArchiveError (nothing is written) if a parameter holds NaN or inf: such a model
    only ever outputs NaN, so it is never written as if it were a result.
    """
    values = model.state_dict()
    bad = non_finite(values)
    if bad:
        raise ArchiveError(f"{os.fspath(path)}: not written: the parameters are not finite "
                           f"({bad})")
    save_archive(path, model.header(), values)


def non_finite(values: dict[str, np.ndarray]) -> str:
    """``""`` when every array of ``{name: array}`` is finite, else a short description of
    the first few that are not (name and count of NaN/inf entries)."""
    bad = []
    for name, v in values.items():
        n = int(v.size - np.count_nonzero(np.isfinite(v)))
        if n:
            bad.append(f"{name}: {n} NaN/inf of {v.size}")
    if len(bad) > 3:
        bad = bad[:3] + [f"{len(bad) - 3} more"]
    return "; ".join(bad)


def check_model_header(header: dict, where: str) -> tuple[dict, int, list[str], int, dict,
                                                     dict[str, tuple]]:
    """Validate a model header; returns ``(network, input_dim, tokens, blank, reader,
    {parameter name: shape})``. Raises ArchiveError naming ``where`` and the key."""
    check_format(header, where, FORMAT, VERSION, "asrkit model")
    for key in ("network", "input_dim", "tokens", "blank", "params"):
        if key not in header:
            raise ArchiveError(f"{where}: header key '{key}' is missing")
    input_dim, tokens, blank = header["input_dim"], header["tokens"], header["blank"]
    if not isinstance(input_dim, int) or isinstance(input_dim, bool) or input_dim < 1:
        raise ArchiveError(f"{where}: header key 'input_dim': expected a positive integer, got "
                           f"{input_dim!r}")
    if not isinstance(tokens, list) or not tokens or not all(
            isinstance(t, str) and t for t in tokens):
        raise ArchiveError(f"{where}: header key 'tokens': expected a list of token strings")
    if not isinstance(blank, int) or isinstance(blank, bool) or not 0 <= blank < len(tokens):
        raise ArchiveError(f"{where}: header key 'blank': {blank!r} is not a token id "
                           f"(0..{len(tokens) - 1})")
    reader = header.get("reader") or {}
    if not isinstance(reader, dict):
        raise ArchiveError(f"{where}: header key 'reader': expected an object, got {reader!r}")
    try:
        network = parse_network(header["network"], where)
        check_parameter_memory(network, input_dim, len(tokens), where)
    except ConfigError as e:
        raise ArchiveError(str(e)) from None
    if "transducer" in header:
        from asrkit.models.transducer import transducer_parameter_shapes

        try:
            _, shapes = transducer_parameter_shapes(
                lambda dim: parameter_shapes(network, input_dim, dim), header, len(tokens), where)
        except ValueError as e:
            raise ArchiveError(str(e)) from None
    else:
        shapes = parameter_shapes(network, input_dim, len(tokens))
    names = header["params"]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ArchiveError(f"{where}: header key 'params': expected a list of names")
    if sorted(names) != sorted(shapes):
        missing = sorted(set(shapes) - set(names))
        unknown = sorted(set(names) - set(shapes))
        raise ArchiveError(f"{where}: header key 'params' does not match the network: "
                           f"missing {missing}, unknown {unknown}")
    return network, input_dim, list(tokens), blank, reader, shapes


def _model_from(header: dict, where: str, read) -> Model:
    """A Model from a header and ``read(name, shape) -> float array`` (checked header first,
    then each parameter, then that all are finite)."""
    network, input_dim, tokens, blank, reader, shapes = check_model_header(header, where)
    values = {name: read(name, shape) for name, shape in shapes.items()}
    bad = non_finite(values)
    if bad:
        raise ArchiveError(f"{where}: parameters are not finite ({bad})")
    if "transducer" in header:
        from asrkit.models.transducer import TransducerModel

        return TransducerModel(network, input_dim, tokens, blank, params=values, reader=reader,
                               transducer=header["transducer"])
    return Model(network, input_dim, tokens, blank, params=values, reader=reader)


def model_from_archive(header: dict, arrays: dict, where: str = "<model>") -> Model:
    """Rebuild a Model from an archive's header and arrays (see :func:`load`)."""
    def read(name, shape):
        if name not in arrays:
            raise ArchiveError(f"{where}: parameter {name!r} is missing")
        v = np.asarray(arrays[name])
        if v.shape != shape or v.dtype.kind != "f":
            raise ArchiveError(f"{where}: parameter {name!r} is {v.dtype} {list(v.shape)}, "
                               f"the network needs float {list(shape)}")
        return v

    return _model_from(header, where, read)


def load(path: str | os.PathLike) -> Model:
    """Read a model written by :func:`save`; returns a :class:`Model` ready for inference.

    Only the parameters the header names are read, each checked against the shape the network
    description gives it before its data is. Raises ArchiveError naming the file.
    """
    with Archive(path) as archive:
        def read(name, shape):
            if name not in archive:
                raise ArchiveError(f"{archive.path}: parameter {name!r} is missing from the "
                                   "file")
            return archive.read(name, shape=shape, kinds="f").astype(np.float32, copy=False)

        return _model_from(archive.header, archive.path, read)
