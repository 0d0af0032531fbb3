"""Run under ``mpiexec -n 2`` by test_mpi.py: exercises the collectives and writes JSON results."""

import json
import sys

import numpy as np

from asrkit.distributed import (
    BlockMomentum,
    OneBitAggregator,
    abort_on_error,
    all_finite,
    get_communicator,
)


def rank_grads(rank, step):
    rng = np.random.default_rng(100 * rank + step)
    return [rng.normal(size=(40, 30)).astype(np.float32), rng.normal(size=(7,)).astype(np.float32)]


def main(out_path, mode):
    comm = get_communicator()
    with abort_on_error(comm):
        if mode == "die":
            comm.barrier()
            if comm.rank == 1:
                raise RuntimeError("simulated failure on rank 1")
            comm.barrier()  # rank 0 would hang here without the abort
            return
        result = {"size": comm.size, "rank": comm.rank}
        g = rank_grads(comm.rank, 0)
        comm.allreduce_(g, op="mean")
        result["allreduce"] = [x.tolist() for x in g]
        n = np.array([float(comm.rank + 1)])
        comm.allreduce_(n, op="max")  # a bare array is one array (it once reduced nothing)
        result["bare_max"] = n.tolist()
        agg = OneBitAggregator(comm, min_size=10)
        steps = []
        for step in range(3):
            g = rank_grads(comm.rank, step)
            agg.aggregate_(g)
            steps.append([x.tolist() for x in g])
        result["onebit"] = steps
        result["onebit_bytes"] = agg.bytes_per_step
        params = [np.full((3, 2), float(comm.rank), np.float32)]
        bm = BlockMomentum(comm, params, block_size=2, block_momentum=0.5, block_lr=1.0)
        result["bmuf_start"] = params[0].tolist()
        for _ in range(2):
            params[0] += 1.0 + comm.rank  # local "training": rank-dependent moves
            bm.step(params)
        result["bmuf_after"] = params[0].tolist()
        result["bmuf_global"] = bm.final_params()[0].tolist()
        result["finite"] = all_finite(comm, 1.0, [np.array([np.nan if comm.rank else 0.0])])
        if comm.is_main:
            with open(out_path, "w") as f:
                json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
