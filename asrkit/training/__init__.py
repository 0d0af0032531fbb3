"""Training (``asrkit.training``): reader/minibatcher, Trainer, checkpoints, training configs;
the learners (update rules, schedules, ``[learner]``) are ``asrkit.learners``.

    from asrkit.training import Trainer, load_train_config
    Trainer(load_train_config("data/conf/blstm_ctc.toml")).train()

is what ``asrkit train CONFIG.toml`` runs (under ``mpiexec -n N`` for N data-parallel ranks).
"""

from asrkit.io.tokens import TokenError, TokenTable, make_token_table
from asrkit.training.checkpoint import latest_checkpoint, read_checkpoint
from asrkit.training.config import (
    CriterionConfig,
    DistributedConfig,
    TrainConfig,
    TrainSection,
    load_train_config,
    parse_train_config,
)
from asrkit.training.reader import Batch, Reader, ReaderConfig, ReaderError, pad_batch
from asrkit.training.trainer import Trainer, TrainingError

__all__ = [
    "Batch", "CriterionConfig", "DistributedConfig", "Reader", "ReaderConfig", "ReaderError",
    "TokenError", "TokenTable", "TrainConfig", "TrainSection", "Trainer", "TrainingError",
    "latest_checkpoint",
    "load_train_config", "make_token_table", "pad_batch", "parse_train_config",
    "read_checkpoint",
]
