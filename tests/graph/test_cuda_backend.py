"""The same graphs on the cuda backend (numba's simulator without a GPU) and on the cpu.

Ops with CUDA kernels must run without touching the host path (no fallback warning)."""

import warnings
import zlib

import numpy as np
import pytest

from asrkit.graph import Sequence, forward_backward
from asrkit.graph.backends import cuda as cuda_backend
from tests.graph._cases import CASES

ON_DEVICE = ["add", "sub", "mul", "neg", "exp", "log", "tanh", "sigmoid", "relu", "times",
             "sum_all", "splice", "softmax", "log_softmax", "layer_norm", "dropout", "embedding",
             "conv1d", "conv1d[stride2,valid]", "conv1d[dilated,causal]", "lstm",
             "lstm[proj,reverse]", "blstm", "blstm[proj]", "ctc_loss",
             "cross_entropy_with_softmax", "cross_entropy_with_softmax[smoothing]"]


@pytest.mark.cuda
@pytest.mark.parametrize("name", sorted(CASES))
def test_case_matches_cpu_on_cuda_backend(name):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    node, feeds, opts = CASES[name](rng)
    feeds = {k: (v[0].astype(np.float32) if v[0].dtype == np.float64 else v[0], v[1])
             for k, v in feeds.items()}
    wrt = [p for p in node.parameters if p.trainable]
    train = opts.get("train", False)
    results = []
    strict = name in ON_DEVICE
    for device in ("cpu", "cuda"):
        cuda_backend._warned.clear()  # fallback warnings are issued once per process
        with warnings.catch_warnings():
            # host fallbacks are expected, except for ops with CUDA kernels
            warnings.simplefilter("error" if strict and device == "cuda" else "ignore",
                                  RuntimeWarning)
            results.append(forward_backward(node, wrt, feeds, train=train, device=device,
                                            seed=3))
    (vc, gc), (vd, gd) = results
    a, b = vc[0], vd[0]
    if isinstance(a, Sequence):
        np.testing.assert_array_equal(a.lengths, b.lengths)
        a, b = a.data, b.data
    np.testing.assert_allclose(b, a, rtol=2e-4, atol=1e-5)
    for p in wrt:
        np.testing.assert_allclose(gd[p], gc[p], rtol=2e-4, atol=1e-5, err_msg=p.name)

