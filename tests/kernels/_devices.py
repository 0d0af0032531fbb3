"""Moving test arrays to a kernel device and back (CUDA runs in numba's simulator)."""

import numpy as np
import pytest

DEVICES = ["reference", pytest.param("cuda", marks=pytest.mark.cuda)]


def dev(a, device):
    """``a`` on ``device`` (a numba device array for cuda; None stays None)."""
    if device != "cuda" or a is None:
        return a
    from numba import cuda

    return cuda.to_device(np.ascontiguousarray(a))


def host(a):
    """A numpy array of ``a`` (device arrays are copied back)."""
    return a.copy_to_host() if hasattr(a, "copy_to_host") else np.asarray(a)


def module(family, device):
    """``asrkit.kernels.<device>.<family>``."""
    import importlib

    return importlib.import_module(f"asrkit.kernels.{device}.{family}")
