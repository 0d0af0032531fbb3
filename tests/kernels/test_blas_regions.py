"""Our worker threads' single-threaded BLAS regions (kernels/cpu/_gemm.single_threaded_blas)
leave numpy's OpenBLAS thread count as they found it, however they overlap.

numpy's OpenBLAS ``openblas_set_num_threads_local`` sets the process's count, so workers that
each set 1 and restored "their" previous value left it at 1 whenever two regions overlapped:
every later numpy GEMM of the process ran on one thread (a Conformer block at 2 threads took as
long as at 1)."""

import threading

import numpy as np
import pytest

from asrkit.kernels import attention_forward
from asrkit.kernels.cpu import _gemm


@pytest.fixture
def set_local():
    fn = _gemm.blas_threads_local()
    if fn is None:
        pytest.skip("numpy's BLAS has no openblas_set_num_threads_local")
    before = fn(2)
    yield fn
    fn(before)


def _count(set_local) -> int:
    previous = set_local(1)
    set_local(previous)
    return previous


def test_overlapping_regions_restore_the_count_once_all_have_closed(set_local):
    opened, a_closed = threading.Barrier(2), threading.Event()
    inside = []

    def region(name):
        with _gemm.single_threaded_blas() as single:
            assert single
            opened.wait(timeout=10)
            inside.append(_count(set_local))
            if name == "b":  # b closes last, after a
                a_closed.wait(timeout=10)
        if name == "a":
            a_closed.set()

    threads = [threading.Thread(target=region, args=(n,)) for n in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert inside == [1, 1]
    assert _count(set_local) == 2


def test_threaded_attention_leaves_numpys_blas_threads_alone(set_local):
    rng = np.random.default_rng(0)
    T, B, D = 64, 4, 32
    q, k, v = (rng.standard_normal((T, B, D)).astype(np.float32) for _ in range(3))
    for _ in range(5):
        attention_forward(q, k, v, np.array([64, 50, 40, 30]), 4, device="cpu", threads=2)
        assert _count(set_local) == 2
