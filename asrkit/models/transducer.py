"""Transducer (RNN-T) acoustic models: an encoder network, a prediction network and a joiner, in
one model file.

The encoder is a ``[network]`` description as for CTC, its output layer projecting to the
joiner dimension H instead of the tokens (icefall's ``encoder_proj``); the prediction network and
the joiner follow the ``transducer`` description (``asrkit.layers.transducer``), which the file's
header keeps beside the network so that ``asrkit.models.load`` rebuilds the whole model.
"""

from __future__ import annotations

import numpy as np

from asrkit.config.acoustic_net import _Params, build_network
from asrkit.graph import input_variable
from asrkit.layers import parameter_source
from asrkit.layers.transducer import Joiner, Predictor, parse_transducer, transducer_shapes
from asrkit.models.model import Model

_PREFIXES = ("predictor.", "joiner.")


class TransducerModel(Model):
    """A transducer: ``Model``'s network as the encoder (``enc [T', B, H]``), a prediction
    network over the ``labels`` input (``pred [U+1, B, H]``) and the joiner's output layer
    (``joiner.weight [V, H]``, ``joiner.bias [V]``).

    network, input_dim, tokens, blank, params, reader: as ``Model``; transducer: the
    description (``asrkit.layers.transducer.parse_transducer``). ``encode(feats, lengths)`` runs
    the encoder; ``asrkit.decoders.transducer`` searches its output.
    """

    def __init__(self, network: dict, input_dim: int, tokens: list[str], blank: int = 0,
                 params: dict | None = None, reader: dict | None = None,
                 transducer: dict | None = None):
        self.tokens = list(tokens)
        self.reader = dict(reader or {})
        self.blank = int(blank)
        if not 0 <= self.blank < len(self.tokens):
            raise ValueError(f"blank id {blank} is not a token id (0..{len(self.tokens) - 1})")
        self.transducer = parse_transducer(transducer or {}, "transducer")
        spec, V = self.transducer, len(self.tokens)
        enc_values = rest = None
        if params is not None:
            enc_values = {k: v for k, v in params.items() if not k.startswith(_PREFIXES)}
            rest = {k: v for k, v in params.items() if k.startswith(_PREFIXES)}
        self.net = build_network(network, int(input_dim), spec["joiner_dim"], values=enc_values)
        self.network = self.net.description
        self.input_dim = int(input_dim)
        self.feats = self.net.feats
        self.enc = self.logits = self.net.logits
        self.log_probs = None  # a transducer has no per-frame posteriors: see encode()
        self.labels = input_variable((), dtype=np.int32, dynamic_axes=("labels", "batch"),
                                     name="labels")
        make = _Params(self.network["seed"] + 1, rest)
        with parameter_source(make):
            self.predictor = Predictor(spec, V)
            self.pred = self.predictor(self.labels)
            self.joiner = Joiner(V, spec["joiner_dim"])
            self.joiner.build()
        if rest is not None:
            extra = set(rest) - set(make.params)
            if extra:
                raise ValueError(f"values for unknown parameters: {', '.join(sorted(extra))}")
        self._params = {**self.net.params, **make.params}

    @property
    def params(self) -> dict:
        """``{name: Parameter}``: the encoder's, the prediction network's, the joiner's."""
        return self._params

    def copy_with(self, params: dict) -> TransducerModel:
        """A new model of the same description with ``params`` ``{name: array}``."""
        return TransducerModel(self.network, self.input_dim, self.tokens, self.blank,
                               params=params, reader=self.reader, transducer=self.transducer)

    def predictor_arrays(self) -> list[np.ndarray]:
        """The prediction network's parameter values in ``asrkit.ops.predictor_step``'s order."""
        return [np.asarray(p.value, np.float32) for p in self.predictor.step_params()]

    def search_parts(self):
        """What ``asrkit.decoders.transducer``'s searches take from the model: ``(predictor,
        weight, bias, joiner)``: the prediction network's step object
        (``asrkit.ops.transducer.predictor_step``), the joiner's output layer ``weight`` float32
        ``[V, H]`` and ``bias`` ``[V]``, and None for the joiner function (the searches run
        ``joiner_logits`` over weight and bias; an exported model,
        ``asrkit.export.OnnxTransducer``, gives its joiner file instead)."""
        from asrkit.ops.transducer import predictor_step

        step = predictor_step(self.transducer["predictor"], self.predictor_arrays(), self.blank)
        return (step, np.asarray(self.joiner.weight.value, np.float32),
                np.asarray(self.joiner.bias.value, np.float32), None)

    def encode(self, feats, lengths=None, device: str = "cpu"):
        """The encoder output of a padded batch: feats float32 ``[T, B, input_dim]`` (or
        ``[T, input_dim]``, or a Sequence) -> ``(enc float32 [T', B, H], out_lengths int32
        [B])`` (``[T', H]`` for a single utterance)."""
        return self._evaluate(self.enc, feats, lengths, device)

    def __call__(self, feats, lengths=None, device: str = "cpu"):
        raise TypeError("a transducer model has no per-frame log-probabilities: decode its "
                        "encode() output with asrkit.decoders.transducer")

    def header(self) -> dict:
        """The JSON header of this model's file (``Model``'s plus ``transducer``)."""
        return {**super().header(), "transducer": self.transducer}


def transducer_parameter_shapes(network_shapes, header: dict, num_tokens: int, where: str):
    """``(description, {name: shape})`` of a transducer model file's parameters: the encoder's
    ``network_shapes(joiner_dim)`` and the prediction network's and joiner's."""
    from asrkit.layers.spec import ConfigError

    try:
        spec = parse_transducer(header["transducer"], f"{where}: header key 'transducer'")
    except ConfigError as e:
        raise ValueError(str(e)) from None
    return spec, {**network_shapes(spec["joiner_dim"]), **transducer_shapes(spec, num_tokens)}
