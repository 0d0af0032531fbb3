"""Shared test setup.

The CUDA kernels run under numba's simulator unless a real GPU run is asked for with
``NUMBA_ENABLE_CUDASIM=0`` in the environment; the variable must be set before numba.cuda loads.
"""

import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
os.environ.setdefault("ASRKIT_NO_PROGRESS", "1")
os.environ.setdefault("ASRKIT_WARMUP", "0")  # no background compile started by asrkit commands

import pytest  # noqa: E402


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", help="also run tests marked slow")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng():
    """A seeded numpy Generator, so every test is reproducible."""
    import numpy as np

    return np.random.default_rng(0)
