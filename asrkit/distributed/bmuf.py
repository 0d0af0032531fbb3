"""Blockwise model-update filtering, i.e. block momentum (Chen and Huo, ICASSP 2016), as CNTK's.

Each rank trains its own copy of the model for a block of minibatches with its local learner. At
the end of a block the models are averaged (one allreduce), and the global model moves by a
filtered step::

    G(t)     = mean_k W_k(t) - W_start(t)           the block's average update
    Delta(t) = block_momentum * Delta(t-1) + block_lr * G(t)
    W_g(t)   = W_g(t-1) + Delta(t)
    W_start(t+1) = W_g(t) + block_momentum * Delta(t)     Nesterov-style look-ahead (default)

The paper's defaults: ``block_momentum = 1 - 1/num_workers`` and ``block_lr = 1``. With one worker
and ``block_momentum = 0`` this is plain local training.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from asrkit.distributed.communicator import Communicator


class BlockMomentum:
    """Block momentum over a list of parameter arrays that the local learner updates in place.

    Call ``step(params)`` after every local minibatch; every ``block_size`` calls it synchronises
    and rewrites ``params`` with the next block's starting point. ``bytes_per_step`` is the average
    traffic per minibatch of the last block.
    """

    def __init__(self, comm: Communicator, params: Sequence[np.ndarray], block_size: int,
                 block_momentum: float | None = None, block_lr: float = 1.0,
                 nesterov: bool = True):
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.comm = comm
        self.block_size = block_size
        self.block_momentum = (1.0 - 1.0 / comm.size) if block_momentum is None \
            else block_momentum
        self.block_lr = block_lr
        self.nesterov = nesterov
        self.steps_in_block = 0
        # every rank starts from rank 0's model
        for p in params:
            p[...] = comm.bcast(p if comm.is_main else None)
        self.global_params = [p.copy() for p in params]
        self.start_params = [p.copy() for p in params]
        self.delta = [np.zeros_like(p) for p in params]
        self.bytes_per_step = 0

    def state_dict(self) -> dict:
        """Everything a checkpoint needs to resume the filter exactly."""
        return {"global": [p.copy() for p in self.global_params],
                "start": [p.copy() for p in self.start_params],
                "delta": [d.copy() for d in self.delta], "steps_in_block": self.steps_in_block}

    def load_state_dict(self, state: dict) -> None:
        """Restore what ``state_dict`` saved."""
        self.global_params = [np.array(p) for p in state["global"]]
        self.start_params = [np.array(p) for p in state["start"]]
        self.delta = [np.array(d) for d in state["delta"]]
        self.steps_in_block = int(state["steps_in_block"])

    def step(self, params: Sequence[np.ndarray]) -> bool:
        """Count one local minibatch; at a block's end synchronise. Returns True if it synced."""
        self.steps_in_block += 1
        if self.steps_in_block < self.block_size:
            return False
        self.sync(params)
        return True

    def sync(self, params: Sequence[np.ndarray]) -> None:
        """Average the local models and apply the block-momentum update (all ranks alike)."""
        before = self.comm.bytes_sent
        averaged = [np.ascontiguousarray(p, dtype=p.dtype).copy() for p in params]
        self.comm.allreduce_(averaged, op="mean")
        for i, p in enumerate(params):
            g = averaged[i] - self.start_params[i]
            self.delta[i] = self.block_momentum * self.delta[i] + self.block_lr * g
            self.global_params[i] = self.global_params[i] + self.delta[i]
            start = self.global_params[i] + self.block_momentum * self.delta[i] \
                if self.nesterov else self.global_params[i]
            self.start_params[i] = start.astype(p.dtype)
            p[...] = self.start_params[i]
        self.bytes_per_step = (self.comm.bytes_sent - before) // max(self.steps_in_block, 1)
        self.steps_in_block = 0

    def final_params(self) -> list[np.ndarray]:
        """The global model (what to save at the end of training, not the look-ahead point)."""
        return [p.copy() for p in self.global_params]
