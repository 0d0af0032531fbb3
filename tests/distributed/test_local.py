"""1-bit quantisation, error feedback, block momentum and sharding on one rank."""

import numpy as np
import pytest

from asrkit.distributed import (
    BlockMomentum,
    LocalCommunicator,
    OneBitAggregator,
    get_communicator,
    shard_by_duration,
)
from asrkit.distributed.onebit import dequantize, quantize


def test_quantize_reconstructs_column_means_and_keeps_the_error(rng):
    m = rng.normal(size=(50, 4)).astype(np.float32)
    res = np.zeros_like(m)
    packed, pos, neg = quantize(m, res)
    q = dequantize(packed, pos, neg, m.shape)
    for c in range(4):
        col = m[:, c]
        assert pos[c] == pytest.approx(col[col >= 0].mean(), rel=1e-5)
        assert neg[c] == pytest.approx(col[col < 0].mean(), rel=1e-5)
    np.testing.assert_allclose(q + res, m, rtol=1e-6, atol=1e-6)
    assert packed.nbytes == 50 * 4 // 8


def test_error_feedback_delays_but_never_drops_gradient(rng):
    agg = OneBitAggregator(LocalCommunicator(), min_size=1)
    true_sum = np.zeros((20, 5), np.float32)
    applied = np.zeros((20, 5), np.float32)
    for _ in range(200):
        g = rng.normal(size=(20, 5)).astype(np.float32) + 0.1
        true_sum += g
        q = [g.copy()]
        agg.aggregate_(q)
        applied += q[0]
    # what is missing is exactly the residual still held back
    np.testing.assert_allclose(applied + agg.residuals[0], true_sum, rtol=1e-4, atol=1e-3)
    assert np.abs(agg.residuals[0]).max() < 10  # bounded, not growing with steps


def test_residuals_are_shaped_like_the_gradients_and_checked_against_them(rng):
    agg = OneBitAggregator(LocalCommunicator(), min_size=1)
    grads = [rng.normal(size=s).astype(np.float32) for s in ((32,), (4, 8), (2, 3, 4))]
    agg.aggregate_(grads)
    assert [r.shape for r in agg.state_dict()["residuals"]] == [(32,), (4, 8), (2, 3, 4)]
    agg.load_state_dict({"residuals": [np.zeros((32, 1), np.float32), *agg.residuals[1:]]})
    with pytest.raises(ValueError, match=r"do not match the gradients' \[\(32,\)"):
        agg.aggregate_(grads)


def test_block_momentum_single_worker_without_momentum_is_local_training():
    params = [np.zeros(3, np.float32)]
    bm = BlockMomentum(LocalCommunicator(), params, block_size=3, block_momentum=0.0)
    for _ in range(6):
        params[0] += 1.0
        bm.step(params)
    np.testing.assert_allclose(params[0], 6.0)
    np.testing.assert_allclose(bm.final_params()[0], 6.0)
    assert bm.block_momentum == 0.0
    state = bm.state_dict()
    bm2 = BlockMomentum(LocalCommunicator(), [np.zeros(3, np.float32)], block_size=3)
    bm2.load_state_dict(state)
    np.testing.assert_allclose(bm2.global_params[0], 6.0)


def test_shards_partition_the_corpus_and_balance_duration(rng):
    durs = {f"u{i:04d}": float(d) for i, d in enumerate(rng.uniform(0.5, 20, size=1001))}
    shards = [shard_by_duration(durs, r, 4) for r in range(4)]
    assert sorted(sum(shards, [])) == sorted(durs)
    loads = [sum(durs[u] for u in s) for s in shards]
    assert max(loads) - min(loads) < 20.0
    with pytest.raises(ValueError):
        shard_by_duration(durs, 4, 4)


def test_without_a_launcher_the_communicator_is_local(monkeypatch):
    for v in ("PMI_SIZE", "PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS",
              "HYDRA_CONTROL_FD", "SLURM_PROCID"):
        monkeypatch.delenv(v, raising=False)
    comm = get_communicator()
    assert isinstance(comm, LocalCommunicator) and comm.size == 1 and comm.is_main


def test_allreduce_rejects_what_it_cannot_reduce_in_place():
    comm = LocalCommunicator()
    comm.allreduce_(np.zeros(3), op="max")  # one bare array is a list of one
    with pytest.raises(TypeError, match="list of numpy arrays"):
        comm.allreduce_(list(np.zeros(2)), op="max")  # numpy scalars: nothing to write back
    with pytest.raises(ValueError, match="unknown reduction"):
        comm.allreduce_([np.zeros(2)], op="prod")
