"""MPI data parallelism: a communicator, 1-bit SGD with error feedback, block momentum, sharding.

Launch N ranks with ``mpiexec -n N asrkit train CONFIG.toml``; one rank needs no MPI at all.
"""

from asrkit.distributed.bmuf import BlockMomentum
from asrkit.distributed.communicator import (
    Communicator,
    LocalCommunicator,
    MPICommunicator,
    abort_on_error,
    all_finite,
    get_communicator,
)
from asrkit.distributed.onebit import OneBitAggregator
from asrkit.distributed.sharding import shard_by_duration

__all__ = ["BlockMomentum", "Communicator", "LocalCommunicator", "MPICommunicator",
           "OneBitAggregator", "abort_on_error", "all_finite", "get_communicator",
           "shard_by_duration"]
