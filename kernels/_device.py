"""Device selection shared by every kernel.

A kernel exists three times with one signature: ``reference`` (plain numpy, the specification),
``cpu`` (numba.njit) and ``cuda`` (numba.cuda). ``device=None`` follows the arrays: CUDA device
arrays (anything with ``__cuda_array_interface__``) run on ``cuda``, everything else on ``cpu``.
"""

from __future__ import annotations

import importlib
import os

DEVICES = ("reference", "cpu", "cuda")


class DeviceUnavailableError(RuntimeError):
    """Raised when ``device='cuda'`` is asked for and no CUDA device (or numba-cuda) exists."""


def is_cuda_array(a) -> bool:
    """True for numba/cupy/torch CUDA arrays (they expose ``__cuda_array_interface__``) and for
    the simulator's device arrays (``__cuda_ndarray__``), which lack that interface."""
    return hasattr(a, "__cuda_array_interface__") or getattr(a, "__cuda_ndarray__", False)


def resolve_device(device: str | None, *arrays) -> str:
    """Return the device a kernel call runs on: ``device`` if given, else inferred from arrays."""
    if device is None:
        return "cuda" if any(is_cuda_array(a) for a in arrays) else "cpu"
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}; expected one of {', '.join(DEVICES)}")
    if device == "cuda":
        require_cuda()
    return device


def cuda_simulated() -> bool:
    """True when numba's CUDA simulator is on (NUMBA_ENABLE_CUDASIM=1)."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"


def require_cuda():
    """Return the ``numba.cuda`` module, or raise DeviceUnavailableError with a clear message."""
    try:
        from numba import cuda
    except ImportError as e:  # pragma: no cover - depends on the install
        raise DeviceUnavailableError(
            "device='cuda' needs numba-cuda: pip install 'asrkit[cuda]'") from e
    if not cuda_simulated() and not cuda.is_available():
        raise DeviceUnavailableError(
            "device='cuda' was asked for but no CUDA GPU is available "
            "(set NUMBA_ENABLE_CUDASIM=1 to run the CUDA kernels in numba's simulator)")
    return cuda


def kernel(family: str, name: str, device: str):
    """Function ``name`` of ``asrkit.kernels.<device>.<family>``. On the cpu a family's numba
    module holds only the kernels numba runs faster than numpy; for the others the numpy twin
    (``asrkit.kernels.reference.<family>``) is the cpu kernel."""
    if device == "cpu":
        try:
            mod = importlib.import_module(f"asrkit.kernels.cpu.{family}")
        except ModuleNotFoundError:
            mod = None
        fn = getattr(mod, name, None)
        if fn is not None:
            return fn
        device = "reference"
    return getattr(importlib.import_module(f"asrkit.kernels.{device}.{family}"), name)
