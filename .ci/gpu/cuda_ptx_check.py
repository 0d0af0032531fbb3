"""Compile every CUDA kernel the tests launch to PTX for a real GPU, on a machine without one.

The simulator runs kernels as Python, so it never type-checks them the way numba-cuda does for a
GPU. This tool runs the ``cuda`` tests under the simulator while recording each kernel launch's
argument types, then (in a second process, simulator off) compiles each recorded signature with
``numba.cuda.compile_ptx`` for ``--cc`` (default 9.0, Hopper). It needs NVVM and NVRTC, e.g.
``pip install --target DIR "nvidia-nvvm==13.*" "nvidia-cuda-nvrtc==13.*"
"nvidia-cuda-runtime==13.*"`` and then ``--libs DIR/nvidia/cu13``.

    python .ci/gpu/cuda_ptx_check.py --libs /tmp/nv/nvidia/cu13 [-- PYTEST ARGS]

Prints one line per failure and a count; exit status 1 if any signature fails to compile.
Kernels created inside functions (closures, e.g. the GEMM tiles) are not reachable by name and
are skipped.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


# -- phase 1: a pytest plugin recording launches under the simulator -------------------------
def _desc(a):
    import numpy as np

    if hasattr(a, "copy_to_host") or isinstance(a, np.ndarray):
        c = a.is_c_contiguous() if hasattr(a, "is_c_contiguous") else a.flags.c_contiguous
        return ["array", str(np.dtype(a.dtype)), int(a.ndim), "C" if c else "A"]
    if isinstance(a, (bool, np.bool_)):
        return ["bool"]
    if isinstance(a, np.generic):
        return ["np", str(a.dtype)]
    if isinstance(a, int):
        return ["int"]
    if isinstance(a, float):
        return ["float"]
    if isinstance(a, tuple):
        return ["tuple", [_desc(x) for x in a]]
    return ["other", type(a).__name__]


_SEEN: set = set()


def pytest_configure(config):
    """Wrap the simulator's kernel launch to record (module, name, argument types)."""
    from numba.cuda.simulator import kernel

    launch = kernel.FakeCUDAKernel.__call__

    def call(self, *args, **kw):
        fn = self.fn
        _SEEN.add(json.dumps([fn.__module__, fn.__qualname__, [_desc(a) for a in args]]))
        return launch(self, *args, **kw)
    kernel.FakeCUDAKernel.__call__ = call


def pytest_unconfigure(config):
    """Write the recorded signatures to $ASRKIT_PTX_SIGS."""
    with open(os.environ["ASRKIT_PTX_SIGS"], "w") as f:
        json.dump([json.loads(k) for k in sorted(_SEEN)], f)


# -- phase 2: compile the signatures with the simulator off -----------------------------------
def _type(d):
    import numpy as np
    from numba import types
    from numba.np.numpy_support import from_dtype

    kind = d[0]
    if kind == "array":
        return types.Array(from_dtype(np.dtype(d[1])), d[2], d[3])
    if kind == "tuple":
        ts = [_type(x) for x in d[1]]
        return types.UniTuple(ts[0], len(ts)) if len(set(ts)) == 1 else types.Tuple(ts)
    if kind == "np":
        return from_dtype(np.dtype(d[1]))
    return {"bool": types.boolean, "int": types.int64, "float": types.float64}[kind]


def compile_all(path: str, cc: tuple[int, int]) -> int:
    """Compile each signature in the JSON file at ``path``; returns the number of failures."""
    import numba.cuda.dispatcher as dispatcher
    from numba import cuda

    class _Device:  # device functions ask the current device for its compute capability
        compute_capability = cc
    dispatcher.get_current_device = lambda: _Device()
    ok = failed = skipped = 0
    for module, qualname, args in json.load(open(path)):
        if "<locals>" in qualname:
            skipped += 1
            continue
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        fn, sig = getattr(obj, "py_func", obj), tuple(_type(a) for a in args)
        try:
            try:
                cuda.compile_ptx(fn, sig, cc=cc)
            except TypeError as e:  # a device function: it returns a value
                if "void return type" not in str(e):
                    raise
                cuda.compile_ptx(fn, sig, cc=cc, device=True)
            ok += 1
        except Exception as e:
            failed += 1
            print(f"FAIL {module}.{qualname}{tuple(str(t) for t in sig)}: "
                  f"{type(e).__name__}: {str(e)[:800]}")
    print(f"compiled {ok} kernel signatures for sm_{cc[0]}{cc[1]}; failed {failed}; "
          f"skipped {skipped} (closures)")
    return failed


def main(argv=None) -> int:
    """Record under the simulator, then compile; see the module docstring."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--libs", help="folder holding lib/libnvrtc.so* and nvvm/ (a CUDA_HOME)")
    ap.add_argument("--cc", default="9.0", help="compute capability, e.g. 9.0 or 8.0")
    ap.add_argument("--sigs", help="compile this recorded JSON instead of running the tests")
    ap.add_argument("--compile-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("pytest_args", nargs="*", help="after --: arguments for pytest")
    args = ap.parse_args(argv)
    cc = tuple(int(p) for p in args.cc.split("."))
    if args.compile_only:
        return 1 if compile_all(args.sigs, cc) else 0
    sigs = args.sigs or os.path.join(tempfile.mkdtemp(), "sigs.json")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [HERE, ROOT, os.environ.get("PYTHONPATH", "")]))
    if not args.sigs:
        rec = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "cuda",
                              "-p", "cuda_ptx_check", *args.pytest_args],
                             cwd=ROOT, env=dict(env, NUMBA_ENABLE_CUDASIM="1",
                                                ASRKIT_PTX_SIGS=sigs))
        if rec.returncode not in (0, 5) or not os.path.exists(sigs):
            print(f"the simulated test run failed (exit {rec.returncode})", file=sys.stderr)
            return 1
    env["NUMBA_ENABLE_CUDASIM"] = "0"
    if args.libs:
        env["CUDA_HOME"] = args.libs
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            [os.path.join(args.libs, "lib"), os.environ.get("LD_LIBRARY_PATH", "")])
    return subprocess.run([sys.executable, os.path.abspath(__file__), "--compile-only",
                           "--sigs", sigs, "--cc", args.cc], cwd=ROOT, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
