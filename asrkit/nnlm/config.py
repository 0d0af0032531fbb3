"""The LSTM LM's architecture, as a dataclass stored in every model file."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class LstmLMConfig:
    """Network shape: embedding -> stacked LSTM -> affine -> softmax over the vocabulary."""

    vocab_size: int                 # |V|, the three specials included
    embed_dim: int = 128            # word embedding size
    hidden_dim: int = 256           # LSTM cell size H
    num_layers: int = 1             # stacked LSTM layers
    tie_embeddings: bool = False    # output weights = embedding table (Press & Wolf 2017)
    dropout: float = 0.0            # on the embeddings, between layers and before the output

    def __post_init__(self):
        for name in ("vocab_size", "embed_dim", "hidden_dim", "num_layers"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.vocab_size < 4:
            raise ValueError(f"vocab_size {self.vocab_size} leaves no room for words besides "
                             "<unk>, <s> and </s>")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")

    @property
    def proj_dim(self) -> int | None:
        """LSTM projection size: the embedding size when tied weights need it (LSTMP), else
        None (the output sees the H-dim hidden state)."""
        if self.tie_embeddings and self.embed_dim != self.hidden_dim:
            return self.embed_dim
        return None

    @property
    def output_input_dim(self) -> int:
        """Feature size entering the output layer."""
        return self.proj_dim or self.hidden_dim

    def as_dict(self) -> dict:
        """JSON-ready dict (the model file header's ``config``)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> LstmLMConfig:
        """Inverse of :meth:`as_dict`; unknown keys are errors."""
        names = {f.name for f in dataclasses.fields(cls)}
        extra = set(d) - names
        if extra:
            raise ValueError(f"unknown LSTM LM config keys: {sorted(extra)}")
        return cls(**d)
