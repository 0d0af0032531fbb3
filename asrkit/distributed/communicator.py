"""A small communicator over MPI (mpi4py), as CNTK's: rank, number of workers, barrier, allreduce.

``get_communicator()`` returns an ``MPICommunicator`` when the process was started by an MPI
process manager (``mpiexec``/``mpirun``/Slurm's ``srun``) and a ``LocalCommunicator`` otherwise, so
one rank runs the same training code with no MPI at all. All collectives work on numpy arrays and
count the bytes this rank sends, for the benchmarks' bytes-per-step figures.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Sequence

import numpy as np

# Environment variables that the common process managers set in every rank they start.
_LAUNCHER_VARS = ("PMI_SIZE", "PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE",
                  "MPI_LOCALNRANKS", "HYDRA_CONTROL_FD", "SLURM_PROCID")


class Communicator:
    """Interface of a communicator; see ``LocalCommunicator`` and ``MPICommunicator``."""

    rank: int = 0
    size: int = 1
    bytes_sent: int = 0

    @property
    def num_workers(self) -> int:
        """Number of ranks (CNTK's name)."""
        return self.size

    @property
    def is_main(self) -> bool:
        """True on rank 0, the only rank that writes checkpoints, logs and models."""
        return self.rank == 0

    def barrier(self) -> None:
        """Wait until every rank gets here."""

    def allreduce_(self, arrays: Sequence[np.ndarray], op: str = "sum") -> None:
        """Sum (``op="sum"``), average (``"mean"``), min or max ``arrays`` over ranks, in place.

        ``arrays``: a list of C-contiguous numpy arrays (a single array is taken as a list of
        one; numpy scalars or other objects raise TypeError: a reduction is never silently
        lost).
        """
        raise NotImplementedError

    def allgather(self, array: np.ndarray) -> np.ndarray:
        """Stack every rank's ``array`` (same shape and dtype on all): ``[size, *shape]``."""
        raise NotImplementedError

    def bcast(self, obj, root: int = 0):
        """Return ``root``'s ``obj`` on every rank (any picklable object)."""
        raise NotImplementedError

    def abort(self, message: str, code: int = 1) -> None:
        """Print ``message`` and end every rank of the job with exit status ``code``."""
        raise NotImplementedError


def _as_array_list(arrays) -> list[np.ndarray]:
    """``arrays`` as a list of ndarrays; a bare ndarray is one array, not its elements.

    (Iterating a bare ``np.array([n])`` yields numpy scalars: the reduction would be written
    into temporaries and each rank would silently keep its own value.)
    """
    if isinstance(arrays, np.ndarray):
        return [arrays]
    arrays = list(arrays)
    for a in arrays:
        if not isinstance(a, np.ndarray):
            raise TypeError(f"allreduce_ takes a list of numpy arrays, got a "
                            f"{type(a).__name__} in it ({a!r:.40})")
    return arrays


class LocalCommunicator(Communicator):
    """One rank, no MPI: every collective is the identity."""

    def allreduce_(self, arrays, op="sum"):
        if op not in ("sum", "mean", "min", "max"):
            raise ValueError(f"unknown reduction {op!r}")
        _as_array_list(arrays)  # the same argument checks as under MPI

    def allgather(self, array):
        return np.asarray(array)[None]

    def bcast(self, obj, root=0):
        return obj

    def abort(self, message, code=1):
        print(message, file=sys.stderr, flush=True)
        raise SystemExit(code)


class MPICommunicator(Communicator):
    """Collectives over ``MPI.COMM_WORLD`` (or a given communicator) through mpi4py."""

    def __init__(self, comm=None):
        from mpi4py import MPI

        self._mpi = MPI
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.bytes_sent = 0
        self._buffers: dict = {}

    def barrier(self):
        self.comm.Barrier()

    def allreduce_(self, arrays, op="sum"):
        MPI = self._mpi
        mpi_op = {"sum": MPI.SUM, "mean": MPI.SUM, "min": MPI.MIN, "max": MPI.MAX}.get(op)
        if mpi_op is None:
            raise ValueError(f"unknown reduction {op!r}")
        arrays = _as_array_list(arrays)
        if not arrays:
            return
        # one message for all arrays of a dtype: fewer latency-bound calls
        by_dtype: dict = {}
        for a in arrays:
            if not a.flags.c_contiguous:
                raise ValueError("allreduce_ needs C-contiguous arrays (it reduces in place)")
            by_dtype.setdefault(a.dtype, []).append(a)
        for dtype, group in by_dtype.items():
            if len(group) == 1:
                flat = group[0].reshape(-1)  # a view: reduced in place, no copies
            else:
                flat = self._buffer(dtype, sum(a.size for a in group))
                np.concatenate([a.reshape(-1) for a in group], out=flat)
            self.comm.Allreduce(MPI.IN_PLACE, flat, op=mpi_op)
            # ring allreduce sends about 2 (size-1)/size of the buffer per rank
            self.bytes_sent += int(2 * flat.nbytes * (self.size - 1) / self.size)
            if op == "mean":
                flat /= self.size
            if len(group) > 1:
                offset = 0
                for a in group:
                    a.reshape(-1)[:] = flat[offset:offset + a.size]
                    offset += a.size

    def _buffer(self, dtype, size: int) -> np.ndarray:
        """A reused flat buffer: a fresh 10-MB array every step costs its page faults again."""
        key = (np.dtype(dtype).str, size)
        buf = self._buffers.pop(key, None)
        if buf is None:
            buf = np.empty(size, dtype)
        self._buffers[key] = buf  # most recently used last
        while len(self._buffers) > 4:
            del self._buffers[next(iter(self._buffers))]
        return buf

    def allgather(self, array):
        array = np.ascontiguousarray(array)
        out = np.empty((self.size,) + array.shape, array.dtype)
        self.comm.Allgather(array, out)
        self.bytes_sent += array.nbytes * (self.size - 1)
        return out

    def bcast(self, obj, root=0):
        return self.comm.bcast(obj, root=root)

    def abort(self, message, code=1):
        print(message, file=sys.stderr, flush=True)
        # mpiexec kills every rank at Abort, the forwarder of this rank's stderr too: give it
        # a moment to pass the message on (CI once lost it whole)
        time.sleep(0.5)
        self.comm.Abort(code)


def launched_by_mpi() -> bool:
    """True when an MPI process manager started this process (its variables are set)."""
    return any(v in os.environ for v in _LAUNCHER_VARS)


def get_communicator(force_mpi: bool | None = None) -> Communicator:
    """An ``MPICommunicator`` under an MPI launcher (or with ``force_mpi=True``), else local."""
    use_mpi = launched_by_mpi() if force_mpi is None else force_mpi
    if not use_mpi:
        return LocalCommunicator()
    try:
        comm = MPICommunicator()
    except ImportError as e:
        raise RuntimeError("started under an MPI launcher but mpi4py is missing: "
                           "pip install mpi4py mpich") from e
    return comm if comm.size > 1 else LocalCommunicator()


class abort_on_error:
    """Context manager: an exception on any rank prints it with the rank and aborts the whole job.

    Without it, one dead rank leaves the others blocked in a collective forever.
    """

    def __init__(self, comm: Communicator):
        self.comm = comm

    def __enter__(self):
        return self.comm

    def __exit__(self, exc_type, exc, tb):
        if exc is None or isinstance(exc, SystemExit) and not exc.code:
            return False
        if self.comm.size == 1:
            return False
        text = "".join(traceback.format_exception(exc_type, exc, tb))
        self.comm.abort(f"asrkit: rank {self.comm.rank} of {self.comm.size} failed; aborting "
                        f"all ranks (no checkpoint is torn: they are written atomically)\n{text}")
        return False


def all_finite(comm: Communicator, loss: float, grads: Sequence[np.ndarray]) -> bool:
    """True when the loss and every gradient are finite on every rank (one tiny allreduce).

    A minibatch with NaN/inf anywhere is then skipped on all ranks alike.
    """
    ok = np.array([1.0 if np.isfinite(loss) and all(np.isfinite(g).all() for g in grads)
                   else 0.0])
    comm.allreduce_([ok], op="min")
    return bool(ok[0] == 1.0)
