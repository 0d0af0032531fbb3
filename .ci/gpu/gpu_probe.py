"""Report what the CUDA stack looks like from asrkit's side, as one JSON object on stdout.

Versions (python, numpy, numba, numba-cuda, torch, cupy, nvmath), whether numba sees a GPU (name,
compute capability, memory), which GEMM backend ``asrkit.kernels.cuda.gemm`` picked, asrkit's
optional dependencies that are missing, and two smoke checks on the device: a numba.cuda kernel
and a GEMM against numpy. Run by ``.ci/gpu/gpu_check.sh``; exit status 1 when the checks fail.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import json
import platform
import sys
import traceback

OPTIONAL = ["soundfile", "kaldi_io", "kaldi_native_fbank", "kenlm", "pynini", "jiwer", "scipy",
            "torch", "cupy", "nvmath", "mpi4py", "onnxruntime"]


def _version(dist):
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def main() -> int:
    """Print the report; return 0 if a kernel and a GEMM ran correctly on the device."""
    rep = {"python": sys.version.split()[0], "executable": sys.executable,
           "machine": platform.machine(),
           "versions": {d: _version(d) for d in ("numpy", "numba", "numba-cuda", "torch",
                                                 "cupy-cuda13x", "cupy-cuda12x", "nvmath-python",
                                                 "asrkit")},
           "missing_modules": [m for m in OPTIONAL if importlib.util.find_spec(m) is None]}
    ok = False
    try:
        import numpy as np
        from numba import cuda

        from asrkit.kernels._device import cuda_simulated

        rep["simulated"] = cuda_simulated()
        rep["numba_cuda_available"] = bool(cuda.is_available())
        if rep["numba_cuda_available"] and not rep["simulated"]:
            dev = cuda.get_current_device()
            rep["device"] = {"name": dev.name.decode() if isinstance(dev.name, bytes)
                             else str(dev.name), "compute_capability": dev.compute_capability}
            free, total = cuda.current_context().get_memory_info()
            rep["device"]["memory_gib"] = round(total / 2**30, 1)
        from asrkit.kernels.cuda import gemm

        rep["gemm_backend"] = gemm.BACKEND
        a = np.random.default_rng(0).standard_normal((64, 48)).astype(np.float32)
        b = np.random.default_rng(1).standard_normal((48, 32)).astype(np.float32)
        c = gemm.gemm(cuda.to_device(a), cuda.to_device(b)).copy_to_host()
        rep["gemm_max_abs_err"] = float(np.abs(c - a @ b).max())
        from asrkit.kernels.cuda import layout as cuda_layout

        x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
        y = cuda_layout.permute(cuda.to_device(x), (2, 0, 1)).copy_to_host()
        rep["kernel_ok"] = bool(np.array_equal(y, x.transpose(2, 0, 1)))
        ok = rep["kernel_ok"] and rep["gemm_max_abs_err"] < 1e-3
    except Exception as e:  # report, never crash: the rest of the check still runs
        rep["error"] = f"{type(e).__name__}: {e}"
        rep["traceback"] = traceback.format_exc(limit=8)
    try:
        import torch

        rep["torch_cuda"] = bool(torch.cuda.is_available())
        if rep["torch_cuda"]:
            rep["torch_device"] = torch.cuda.get_device_name(0)
    except Exception as e:
        rep["torch_cuda"] = f"{type(e).__name__}: {e}"
    rep["ok"] = ok
    print(json.dumps(rep, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
