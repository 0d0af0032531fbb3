"""Two ranks under ``mpiexec -n 2`` against the same computation done in one process."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from asrkit.distributed.onebit import as_matrix, dequantize, quantize

pytestmark = pytest.mark.mpi
WORKER = os.path.join(os.path.dirname(__file__), "mpi_worker.py")


def _mpiexec():
    exe = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return exe if os.path.exists(exe) else shutil.which("mpiexec")


def _run(tmp_path, mode):
    out = tmp_path / "result.json"
    r = subprocess.run([_mpiexec(), "-n", "2", sys.executable, WORKER, str(out), mode],
                       capture_output=True, text=True, timeout=120)
    return r, out


def _rank_grads(rank, step):
    rng = np.random.default_rng(100 * rank + step)
    return [rng.normal(size=(40, 30)).astype(np.float32), rng.normal(size=(7,)).astype(np.float32)]


def test_two_ranks_match_single_process(tmp_path):
    r, out = _run(tmp_path, "ok")
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert res["size"] == 2
    g0, g1 = _rank_grads(0, 0), _rank_grads(1, 0)
    for got, a, b in zip(res["allreduce"], g0, g1):
        np.testing.assert_allclose(got, (a + b) / 2, rtol=1e-6)
    assert res["bare_max"] == [2.0]
    # 1-bit: each rank quantises with its own residual; the result is the mean of the
    # reconstructions, and small tensors (7 values < min_size 10) are exact means
    residuals = {k: np.zeros((40, 30), np.float32) for k in (0, 1)}
    for step, got in enumerate(res["onebit"]):
        recon = []
        for k in (0, 1):
            m = as_matrix(_rank_grads(k, step)[0])
            packed, pos, neg = quantize(m, residuals[k])
            recon.append(dequantize(packed, pos, neg, m.shape))
        np.testing.assert_allclose(got[0], (recon[0] + recon[1]) / 2, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got[1], (_rank_grads(0, step)[1] + _rank_grads(1, step)[1])
                                   / 2, rtol=1e-6)
    # bits plus two floats per column for the matrix, about 32x less than float32
    assert res["onebit_bytes"] < 40 * 30 * 4 / 8
    # BMUF: both start at rank 0's model (0); local moves +2 and +4 -> mean G = 3
    assert np.allclose(res["bmuf_start"], 0.0)
    assert np.allclose(res["bmuf_global"], 3.0)  # W_g = 0 + Delta, Delta = 0.5*0 + 1*3
    assert np.allclose(res["bmuf_after"], 3.0 + 0.5 * 3.0)  # Nesterov look-ahead
    assert res["finite"] is False  # rank 1's NaN makes every rank skip


def test_a_dying_rank_aborts_the_job_with_a_message(tmp_path):
    r, _ = _run(tmp_path, "die")
    assert r.returncode != 0
    assert "rank 1 of 2 failed; aborting all ranks" in r.stderr
    assert "simulated failure on rank 1" in r.stderr
