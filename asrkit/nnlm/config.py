"""The LSTM LM's architecture, as a dataclass stored in every model file."""

from __future__ import annotations

import dataclasses

from asrkit.utils.memory import format_bytes, memory_limit_bytes

MAX_LAYERS = 128  # stacked LSTM layers beyond this are typos


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
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.vocab_size < 4:
            raise ValueError(f"vocab_size {self.vocab_size} leaves no room for words besides "
                             "<unk>, <s> and </s>")
        if self.num_layers > MAX_LAYERS:
            raise ValueError(f"num_layers must be at most {MAX_LAYERS}, got {self.num_layers}")
        if not isinstance(self.tie_embeddings, bool):
            raise ValueError(f"tie_embeddings must be true or false, got "
                             f"{self.tie_embeddings!r}")
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) or \
                not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")
        need, memory = 4 * self.parameter_count(), memory_limit_bytes()
        if need > memory:
            raise ValueError(f"vocab_size {self.vocab_size}, embed_dim {self.embed_dim}, "
                             f"hidden_dim {self.hidden_dim}, num_layers {self.num_layers}: "
                             f"{self.parameter_count():,} parameters need {format_bytes(need)}, "
                             f"more than this machine's {format_bytes(memory)} of memory")

    def parameter_count(self) -> int:
        """Number of parameters (embedding, LSTM layers with their projection, output)."""
        V, E, H, P = self.vocab_size, self.embed_dim, self.hidden_dim, self.proj_dim
        out = P or H
        lstm = sum(4 * H * ((E if k == 0 else out) + out) + 8 * H + (P * H if P else 0)
                   for k in range(self.num_layers))
        return V * E + lstm + (0 if self.tie_embeddings else out * V) + V

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
        if not isinstance(d, dict):
            raise ValueError(f"the LSTM LM config must be an object, got {d!r}")
        names = {f.name for f in dataclasses.fields(cls)}
        extra = set(d) - names
        if extra:
            raise ValueError(f"unknown LSTM LM config keys: {sorted(extra)}")
        return cls(**d)
