"""LSTM layer forward + backward: asrkit's fused CPU kernels against torch.nn.LSTM.

Both sides get the same weights and input ``x [T, B, I]`` and compute ``y`` and the gradients of
``sum(y * r)`` for a fixed random ``r``: torch through autograd, asrkit through ``lstm_forward``
+ ``lstm_backward`` (``blstm_*`` for the bidirectional cases, once with the directions in turn
and once in two threads). The last case has lengths drawn from [T/2, T] (torch:
``pack_padded_sequence``).

Each side is timed alone in its own fresh process (``asrkit.bench.sides``), at each thread count
of ``--threads``, with ``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` and
``NUMBA_NUM_THREADS`` (and torch's intra-op threads, and asrkit's ``threads=``) set to it: right
after a call, OpenBLAS's and OpenMP's worker threads keep spinning and steal the next call's
cores, so timing the two in alternation in one process penalised whichever ran second. Figures
are the median and the quartiles of ``--repeat`` runs after a warm-up run. ``--alternate`` adds
the old in-process alternation (one run of each side per round) as extras, for comparison. The
extras also give how far asrkit's ``y`` and ``dW_ih`` are from torch's (relative difference of a
random projection of each, computed in the side processes).
"""

from __future__ import annotations

import os
import statistics

import numpy as np

from asrkit.bench import Case, median_time
from asrkit.bench.sides import run_side, thread_env

NAME = "lstm"
HELP = "fused LSTM/BLSTM forward+backward on the CPU against torch.nn.LSTM"
CASES = {  # name -> (bidirectional, concurrent directions, packed lengths)
    "lstm": (False, None, False),
    "blstm": (True, False, False),
    "blstm-threads": (True, True, False),
    "lstm-lengths": (False, None, True),
}
LABELS = {"lstm": "lstm", "blstm": "blstm, directions in turn",
          "blstm-threads": "blstm, two threads", "lstm-lengths": "lstm, lengths T/2..T"}


def add_arguments(parser) -> None:
    """Shape options, cases, thread counts and the in-process alternation switch."""
    parser.add_argument("--frames", type=int, default=300, help="T, frames per sequence")
    parser.add_argument("--batch", type=int, default=16, help="B, sequences per batch")
    parser.add_argument("--input", type=int, default=80, help="I, input features")
    parser.add_argument("--hidden", type=int, default=320, help="H, cells per direction")
    parser.add_argument("--proj", type=int, default=0, help="P, projection size (0: none)")
    parser.add_argument("--threads", type=int, nargs="+",
                        default=sorted({1, os.cpu_count() or 1}),
                        help="thread counts to run each case at (torch's intra-op threads, "
                        "asrkit's threads, and the BLAS/OpenMP/numba thread variables)")
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--alternate", action="store_true",
                        help="also time both sides in alternation in this one process (the "
                        "old method: the side that runs second meets the other's spinning "
                        "threads)")
    parser.add_argument("--seed", type=int, default=0)


def _weights(rng, I, H, P, dirs):
    k = 1 / np.sqrt(H)
    PP = P or H
    shapes = {"w_ih": (4 * H, I), "w_hh": (4 * H, PP), "b_ih": (4 * H,), "b_hh": (4 * H,)}
    if P:
        shapes["w_hr"] = (P, H)
    return {n: rng.uniform(-k, k, (dirs, *s)).astype(np.float32) for n, s in shapes.items()}


def _inputs(p):
    """The case's input, output weights ``r``, layer weights and lengths (seeded)."""
    rng = np.random.default_rng(p["seed"])
    T, B, I, H, P = p["frames"], p["batch"], p["input"], p["hidden"], p["proj"]
    bidirectional, _, packed = CASES[p["case"]]
    dirs = 2 if bidirectional else 1
    x = rng.standard_normal((T, B, I)).astype(np.float32)
    lengths = (rng.integers(T // 2, T + 1, size=B).astype(np.int64) if packed else None)
    w = _weights(rng, I, H, P, dirs)
    r = rng.standard_normal((T, B, dirs * (P or H))).astype(np.float32)
    return x, r, w, lengths


def _torch_step(torch, x, r, w, bidirectional, proj, lengths):
    T, _, I = x.shape
    H = w["w_ih"].shape[1] // 4
    m = torch.nn.LSTM(I, H, bidirectional=bidirectional, proj_size=proj)
    names = {"w_ih": "weight_ih", "w_hh": "weight_hh", "b_ih": "bias_ih", "b_hh": "bias_hh",
             "w_hr": "weight_hr"}
    with torch.no_grad():
        for n, v in w.items():
            for d, sfx in enumerate(["", "_reverse"][: 2 if bidirectional else 1]):
                getattr(m, f"{names[n]}_l0{sfx}").copy_(torch.from_numpy(v[d]))
    xt = torch.from_numpy(x).requires_grad_(True)
    rt = torch.from_numpy(r)

    pack = torch.nn.utils.rnn.pack_padded_sequence

    def step():
        m.zero_grad(set_to_none=True)
        xt.grad = None
        if lengths is None:
            y, _ = m(xt)
        else:
            out, _ = m(pack(xt, torch.from_numpy(lengths), enforce_sorted=False))
            y, _ = torch.nn.utils.rnn.pad_packed_sequence(out, total_length=T)
        (y * rt).sum().backward()
        return y.detach().numpy(), m.weight_ih_l0.grad.numpy()

    return step


def _asrkit_step(x, r, w, bidirectional, concurrent, lengths, threads):
    from asrkit.kernels import blstm_backward, blstm_forward, lstm_backward, lstm_forward

    names = ("w_ih", "w_hh", "b_ih", "b_hh")
    w_hr = w.get("w_hr")
    if bidirectional:
        def step():
            y, _, _, cache = blstm_forward(x, None, None, *(w[n] for n in names), lengths,
                                           device="cpu", w_hr=w_hr, concurrent=concurrent,
                                           threads=threads)
            grads = blstm_backward(r, None, None, cache, concurrent=concurrent)
            return y, grads[3][0]
    else:
        one = {n: v[0] for n, v in w.items()}

        def step():
            y, _, _, cache = lstm_forward(x, None, None, *(one[n] for n in names), lengths,
                                          device="cpu", w_hr=one.get("w_hr"), threads=threads)
            grads = lstm_backward(r, None, None, cache)
            return y, grads[3]

    return step


def _step(side: str, p: dict):
    x, r, w, lengths = _inputs(p)
    bidirectional, concurrent, _ = CASES[p["case"]]
    if side == "asrkit":
        return _asrkit_step(x, r, w, bidirectional, concurrent, lengths, p["threads"])
    import torch

    torch.set_num_threads(p["threads"])
    return _torch_step(torch, x, r, w, bidirectional, p["proj"], lengths)


def _probe(a, seed: int) -> float:
    """A random projection of ``a`` (float64), to compare results across processes."""
    rng = np.random.default_rng(seed + 1)
    return float(np.dot(np.ravel(a).astype(np.float64), rng.standard_normal(np.size(a))))


def measure_side(side: str, p: dict, repeat: int = 5) -> dict:
    """In a fresh process (``run_side``): the step's timing (median, quartiles), then random
    projections of its ``y`` and ``dW_ih`` (forward direction)."""
    from asrkit.bench.sides import measure_step

    step = _step(side, p)
    out = measure_step(step, repeat=repeat, memory=False)
    y, dw = step()
    out["y_probe"] = _probe(y, p["seed"])
    out["dw_probe"] = _probe(dw, p["seed"] + 7)
    return out


def _alternating(ours, theirs, repeat):
    """Median seconds of ``ours`` and ``theirs``, one run of each per round, in this process."""
    ours()
    theirs()
    a, b = [], []
    for _ in range(repeat):
        a.append(median_time(ours, repeat=1, warmup=0))
        b.append(median_time(theirs, repeat=1, warmup=0))
    return statistics.median(a), statistics.median(b)


def _rel(a: float, b: float) -> str:
    return f"{abs(a - b) / max(abs(b), 1e-30):.2e}"


def run(args) -> list[Case]:
    """Each case at each thread count, each side in its own process; ratios, spreads and the
    agreement of ``y`` and ``dW_ih``."""
    try:
        import torch
        ref_name = f"torch {torch.__version__}"
    except ImportError:  # the ratio column shows "-" without torch
        torch, ref_name = None, "torch"
    T, B, I, H, P = args.frames, args.batch, args.input, args.hidden, args.proj
    shape = f"T={T} B={B} {I}->{H}" + (f" P={P}" if P else "")
    cases = []
    for case in args.cases:
        for threads in args.threads:
            p = {"case": case, "frames": T, "batch": B, "input": I, "hidden": H, "proj": P,
                 "threads": threads, "seed": args.seed}
            ours = run_side(__name__, "asrkit", p, args.repeat, env=thread_env(threads))
            t = ours["timing"]
            extra: dict = {}
            ref_s = ref_q = None
            if torch is not None:
                theirs = run_side(__name__, "torch", p, args.repeat, env=thread_env(threads))
                tt = theirs["timing"]
                ref_s, ref_q = tt["median"], (tt["q1"], tt["q3"])
                extra["y_probe_rel_diff"] = _rel(ours["y_probe"], theirs["y_probe"])
                extra["dw_ih_probe_rel_diff"] = _rel(ours["dw_probe"], theirs["dw_probe"])
                if args.alternate:
                    a_s, t_s = _alternating(_step("asrkit", p), _step("torch", p), args.repeat)
                    extra["alternating_asrkit_ms"] = round(a_s * 1e3, 1)
                    extra["alternating_torch_ms"] = round(t_s * 1e3, 1)
            cases.append(Case(f"{LABELS[case]} fwd+bwd {shape} threads={threads}", t["median"],
                              ref_name, ref_s, extra, asrkit_spread=(t["q1"], t["q3"]),
                              reference_spread=ref_q))
    return cases
