"""Time asrkit's CUDA paths against asrkit's CPU paths and torch (CUDA build if present).

Run by ``.ci/gpu/gpu_check.sh`` on a GPU machine; also runs under numba's simulator with
``--sizes tiny`` (a smoke test of this script, not a timing). Cases, each independent (a failing
case records its error and the others still run):

* ``lstm``: one LSTM layer forward + backward (``lstm_forward``/``lstm_backward``) on device
  arrays, against ``torch.nn.LSTM`` forward + backward;
* ``ctc``: ``ctc_loss`` (cost and gradient) against torch's log_softmax + ctc_loss + backward;
* ``train``: one BLSTM-CTC step of the graph (stack_frames, 2 BLSTM layers, affine, CTC; forward
  and backward) with ``device="cuda"`` against the same graph with ``device="cpu"``, listing
  any op that fell back to the host.

Times are medians of ``--repeat`` runs after one warm-up, in milliseconds, with the device
synchronised around each run. Usage: ``python .ci/gpu/gpu_bench.py --json out.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
import warnings

import numpy as np

import asrkit  # noqa: F401

SIZES = {  # T, B, I, H, C, S
    "full": dict(T=300, B=16, I=80, H=320, C=500, S=60),
    "tiny": dict(T=6, B=2, I=3, H=4, C=5, S=2),
}


def _sync():
    from numba import cuda

    cuda.synchronize()


def _median_ms(fn, repeat, sync=None):
    fn()  # warm-up: JIT compilation, cuBLAS handles, allocator
    if sync:
        sync()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        times.append((time.perf_counter() - t0) * 1e3)
    return round(statistics.median(times), 3)


def _torch():
    """(torch module, device string) or (None, reason)."""
    try:
        import torch
    except ImportError:
        return None, "torch not installed"
    return torch, ("cuda" if torch.cuda.is_available() else "cpu")


def _torch_sync(torch, dev):
    return (lambda: torch.cuda.synchronize()) if dev == "cuda" else None


def bench_lstm(s, repeat):
    """asrkit lstm forward+backward on cuda and cpu vs torch.nn.LSTM."""
    from numba import cuda

    from asrkit.kernels import lstm_backward, lstm_forward

    rng = np.random.default_rng(0)
    T, B, I, H = s["T"], s["B"], s["I"], s["H"]
    x = rng.standard_normal((T, B, I)).astype(np.float32)
    w = [rng.uniform(-0.1, 0.1, shape).astype(np.float32)
         for shape in ((4 * H, I), (4 * H, H), (4 * H,), (4 * H,))]
    h0 = np.zeros((B, H), np.float32)
    dy = rng.standard_normal((T, B, H)).astype(np.float32)
    lengths = np.full(B, T, np.int32)
    out = {"shape": dict(T=T, B=B, I=I, H=H)}

    def run(device, arrays):
        xs, h, c, ws, g = arrays

        def step():
            _, _, _, cache = lstm_forward(xs, h, c, *ws, lengths=lengths, device=device)
            lstm_backward(g, None, None, cache, device=device)
        return step

    dev = (cuda.to_device(x), cuda.to_device(h0), cuda.to_device(h0),
           [cuda.to_device(a) for a in w], cuda.to_device(dy))
    out["asrkit_cuda_ms"] = _median_ms(run("cuda", dev), repeat, _sync)
    out["asrkit_cpu_ms"] = _median_ms(run("cpu", (x, h0, h0, w, dy)), repeat)
    torch, tdev = _torch()
    if torch is None:
        out["torch"] = tdev
        return out
    lstm = torch.nn.LSTM(I, H).to(tdev)
    xt = torch.tensor(x, device=tdev, requires_grad=True)
    gt = torch.tensor(dy, device=tdev)

    def torch_step():
        y, _ = lstm(xt)
        y.backward(gt)
    out[f"torch_{tdev}_ms"] = _median_ms(torch_step, repeat, _torch_sync(torch, tdev))
    out["torch_device"] = tdev
    return out


def bench_ctc(s, repeat):
    """asrkit ctc_loss on cuda and cpu vs torch log_softmax + ctc_loss + backward."""
    from numba import cuda

    from asrkit.kernels import ctc_loss

    rng = np.random.default_rng(1)
    T, B, C, S = s["T"], s["B"], s["C"], s["S"]
    logits = rng.standard_normal((T, B, C)).astype(np.float32)
    targets = rng.integers(1, C, (B, S)).astype(np.int32)
    il = np.full(B, T, np.int32)
    tl = np.full(B, S, np.int32)
    out = {"shape": dict(T=T, B=B, C=C, S=S)}
    ld = cuda.to_device(logits)
    out["asrkit_cuda_ms"] = _median_ms(lambda: ctc_loss(ld, targets, il, tl, device="cuda"),
                                       repeat, _sync)
    out["asrkit_cpu_ms"] = _median_ms(lambda: ctc_loss(logits, targets, il, tl, device="cpu"),
                                      repeat)
    torch, tdev = _torch()
    if torch is None:
        out["torch"] = tdev
        return out
    xt = torch.tensor(logits, device=tdev, requires_grad=True)
    args = [torch.tensor(a, device=tdev, dtype=torch.long) for a in (targets, il, tl)]

    def torch_step():
        lp = torch.log_softmax(xt, -1)
        torch.nn.functional.ctc_loss(lp, *args, reduction="sum").backward()
    out[f"torch_{tdev}_ms"] = _median_ms(torch_step, repeat, _torch_sync(torch, tdev))
    out["torch_device"] = tdev
    return out


def bench_train(s, repeat):
    """One BLSTM-CTC graph step (forward + backward) on cuda vs cpu; lists host fallbacks."""
    import asrkit.ops as O
    from asrkit.graph import forward_backward, input_variable, parameter
    from asrkit.graph.backends import cuda as cuda_backend

    rng = np.random.default_rng(2)
    T, B, I, H, C, S = (s[k] for k in "TBIHCS")
    feats = input_variable(I, name="feats")
    labels = input_variable((), dtype=np.int32, dynamic_axes=("labels", "batch"), name="labels")
    x, dim = O.stack_frames(feats, 3, 3), 3 * I
    params = []

    def p(shape, scale=0.1):
        params.append(parameter(shape, init=rng.uniform(-scale, scale, shape)))
        return params[-1]
    for _ in range(2):
        dirs = [{"w_ih": p((4 * H, dim)), "w_hh": p((4 * H, H)), "b_ih": p((4 * H,)),
                 "b_hh": p((4 * H,))} for _ in range(2)]
        x, dim = O.blstm(x, *dirs), 2 * H
    logits = O.times(x, p((dim, C))) + p((C,))
    loss = O.sum_all(O.ctc_loss(logits, labels))
    lengths = rng.integers(T // 2, T + 1, B).astype(np.int32)
    lengths[0] = T
    S = max(1, min(S, T // 6))
    feeds = {feats: (rng.standard_normal((T, B, I)).astype(np.float32), lengths),
             labels: (rng.integers(1, C, (S, B)).astype(np.int32), np.full(B, S, np.int32))}
    out = {"shape": dict(T=T, B=B, I=I, H=H, C=C, S=S, layers=2)}
    fallbacks = set()

    def step(device):
        def run():
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                forward_backward(loss, params, feeds, device=device, seed=0)
            fallbacks.update(str(w.message) for w in caught if "cuda backend" in str(w.message))
        return run
    cuda_backend._warned.clear()
    out["asrkit_cuda_ms"] = _median_ms(step("cuda"), repeat, _sync)
    out["asrkit_cpu_ms"] = _median_ms(step("cpu"), repeat)
    out["host_fallbacks"] = sorted(fallbacks)
    (vc, gc), (vd, gd) = (forward_backward(loss, params, feeds, device=d, seed=0)
                          for d in ("cpu", "cuda"))
    out["loss_rel_diff"] = float(abs(float(vd[0]) - float(vc[0])) / max(abs(float(vc[0])), 1e-30))
    out["grad_max_abs_diff"] = float(max(np.abs(gd[q] - gc[q]).max() for q in params))
    return out


CASES = {"lstm": bench_lstm, "ctc": bench_ctc, "train": bench_train}


def main(argv=None) -> int:
    """Run the cases; print one JSON object (also written to ``--json``). Exit 1 if any failed."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", choices=sorted(SIZES), default="full")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args(argv)
    from asrkit.kernels._device import cuda_simulated

    res = {"sizes": args.sizes, "simulated": cuda_simulated(), "cases": {}}
    for name in args.cases:
        t0 = time.perf_counter()
        try:
            res["cases"][name] = CASES[name](SIZES[args.sizes], args.repeat)
        except Exception as e:  # one case failing must not hide the others
            res["cases"][name] = {"error": f"{type(e).__name__}: {e}",
                                  "traceback": traceback.format_exc(limit=6)}
        res["cases"][name]["wall_s"] = round(time.perf_counter() - t0, 2)
        print(f"{name}: {json.dumps(res['cases'][name])}", file=sys.stderr, flush=True)
    text = json.dumps(res, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 1 if any("error" in c for c in res["cases"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
