"""The LSTM LM as one graph: ids -> embedding -> LSTM -> affine -> cross-entropy per token.

Inputs are two int32 sequences ``[T, B]`` on the same axis with one length per sentence:
``words`` (``<s> w1 .. wn``) and ``targets`` (``w1 .. wn </s>``). ``cost`` is
``-ln p(target_t | words_<=t)`` per token, zero on padding (the output layer and the softmax
cross-entropy fused in one op, ``asrkit.nnlm.ops.output_xent``); its sum is the training
criterion and, evaluated without dropout, it scores sentences. ``<s>`` is never a target, so
its logit is pinned to -1e9 (a constant, no gradient) and the softmax spreads over the words
that can occur.
"""

from __future__ import annotations

import numpy as np

import asrkit.ops as O
from asrkit.graph import Parameter, constant, input_variable, parameter, set_seed
from asrkit.graph.init import glorot_uniform, uniform
from asrkit.layers import LSTM, Embedding
from asrkit.lm.vocab import BOS_ID
from asrkit.nnlm.config import LstmLMConfig
from asrkit.nnlm.ops import affine, output_xent

NEVER = -1e9  # logit of <s>: exp(NEVER - max) underflows to exactly 0 in float32


def output_mask(vocab_size: int) -> np.ndarray:
    """float32 ``[V]`` added to the logits: 0, and ``NEVER`` at ``<s>``."""
    mask = np.zeros(vocab_size, np.float32)
    mask[BOS_ID] = NEVER
    return mask


class LMNetwork:
    """The graph of one LSTM LM; parameters are named ``embedding.E``, ``lstm.weight_ih_l0``
    ... (torch.nn.LSTM's names), ``output.W`` ``[P, V]`` and ``output.b`` ``[V]``."""

    def __init__(self, config: LstmLMConfig, seed: int = 0):
        set_seed(seed)
        c = config
        self.config = c
        self.words = input_variable((), np.int32, name="words")
        self.targets = input_variable((), np.int32, name="targets")
        # small uniform embeddings (Zaremba et al.): N(0, 1) rows would saturate the gates
        self.embedding = Embedding(c.vocab_size, c.embed_dim, init=uniform(0.1), name="embedding")
        self.lstm = LSTM(c.hidden_dim, c.num_layers, proj_dim=c.proj_dim, dropout=c.dropout,
                         name="lstm")
        x = self.embedding(self.words)
        if c.dropout:
            x = O.dropout(x, c.dropout)
        h = self.lstm(x)
        if c.dropout:
            h = O.dropout(h, c.dropout)
        bias = parameter((c.vocab_size,), init=0.0, name="output.b")
        if c.tie_embeddings:
            weight = O.transpose(self.embedding.E)
        else:
            weight = parameter((c.output_input_dim, c.vocab_size), init=glorot_uniform(),
                               name="output.W")
        mask = constant(output_mask(c.vocab_size))
        self.cost = output_xent(h, weight, bias, mask, self.targets, name="cost")
        # the same logits as a node of their own, for inspection (not part of the criterion)
        self.logits = affine(h, weight, bias, name="output") + mask
        self.parameters: dict[str, Parameter] = {p.name: p for p in self.cost.parameters}

    def values(self) -> dict[str, np.ndarray]:
        """Parameter values by name (the live arrays, not copies)."""
        return {name: p.value for name, p in self.parameters.items()}

    def load_values(self, values: dict[str, np.ndarray], source: str = "") -> None:
        """Copy ``{name: array}`` into the parameters; every name must be present, with the
        parameter's shape."""
        where = f"{source}: " if source else ""
        missing = sorted(set(self.parameters) - set(values))
        if missing:
            raise ValueError(f"{where}missing parameters {missing}")
        extra = sorted(set(values) - set(self.parameters))
        if extra:
            raise ValueError(f"{where}unexpected parameters {extra}")
        for name, p in self.parameters.items():
            v = np.asarray(values[name])
            if v.shape != p.shape:
                raise ValueError(f"{where}parameter {name} has shape {list(v.shape)}, the "
                                 f"config needs {list(p.shape)}")
            p.set_value(v)
