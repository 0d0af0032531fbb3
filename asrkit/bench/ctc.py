"""CTC loss forward + backward: asrkit's CPU kernel against torch's, each side in its own process.

torch is timed the way users call it: ``log_softmax`` + ``ctc_loss(reduction="sum")`` +
``backward()``; asrkit is timed on ``asrkit.kernels.ctc_loss(logits, ...)``, which fuses the
log-softmax and returns the gradient. Inputs are random logits (standard normal) and random
full-length targets without the blank.

Each side is timed alone in a fresh process (``asrkit.bench.sides``) with ``--threads`` threads
(torch's intra-op threads; ``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``,
``NUMBA_NUM_THREADS``): in one process the side timed second met the first one's still-spinning
worker threads. Figures are the median and quartiles of ``--repeat`` runs. The agreement of costs
and gradients is checked in this process after the timing.
"""

from __future__ import annotations

import functools
import os

import numpy as np

from asrkit.bench import Case
from asrkit.bench.sides import run_side, thread_env

NAME = "ctc"
HELP = "CTC loss + gradient on the CPU against torch.nn.functional.ctc_loss"


def add_arguments(parser) -> None:
    """Shape options: frames, batch, target length and the vocabulary sizes to run."""
    parser.add_argument("--frames", type=int, default=500, help="T, frames per sequence")
    parser.add_argument("--batch", type=int, default=16, help="B, sequences per batch")
    parser.add_argument("--target-length", type=int, default=100, help="S, labels per target")
    parser.add_argument("--classes", type=int, nargs="+", default=[32, 500],
                        help="C values, one case each (blank is class 0)")
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="threads of each side (torch intra-op, numba, BLAS)")
    parser.add_argument("--seed", type=int, default=0)


def _inputs(p):
    rng = np.random.default_rng(p["seed"])
    T, B, S, C = p["frames"], p["batch"], p["target_length"], p["classes"]
    logits = rng.standard_normal((T, B, C)).astype(np.float32)
    targets = rng.integers(1, C, size=(B, S)).astype(np.int32)
    return logits, targets, np.full(B, T, dtype=np.int32), np.full(B, S, dtype=np.int32)


def _torch_step(torch, logits, targets, input_lengths, target_lengths):
    x = torch.from_numpy(logits).requires_grad_(True)
    tg, il, tl = (torch.from_numpy(a) for a in (targets, input_lengths, target_lengths))

    def step():
        x.grad = None
        loss = torch.nn.functional.ctc_loss(x.log_softmax(-1), tg, il, tl, reduction="sum")
        loss.backward()
        return loss, x.grad

    return step


def measure_side(side: str, p: dict, repeat: int = 5) -> dict:
    """In a fresh process (``run_side``): the timing of one side's loss + gradient."""
    from asrkit.bench.sides import measure_step

    inputs = _inputs(p)
    if side == "asrkit":
        from asrkit.kernels import ctc_loss

        step = functools.partial(ctc_loss, *inputs, device="cpu")
    else:
        import torch

        torch.set_num_threads(p["threads"])
        step = _torch_step(torch, *inputs)
    return measure_step(step, repeat=repeat, memory=False)


def run(args) -> list[Case]:
    """Time each case (each side in its own process); Cases with the cost and gradient
    agreement as extras."""
    from asrkit.kernels import ctc_loss

    try:
        import torch
    except ImportError:  # the ratio column shows "-" without torch
        torch = None
    T, B, S = args.frames, args.batch, args.target_length
    cases = []
    for C in args.classes:
        p = {"frames": T, "batch": B, "target_length": S, "classes": C, "seed": args.seed,
             "threads": args.threads}
        ours = run_side(__name__, "asrkit", p, args.repeat, env=thread_env(args.threads))
        t = ours["timing"]
        ref_s = ref_q = None
        extra = {}
        if torch is not None:
            tt = run_side(__name__, "torch", p, args.repeat,
                          env=thread_env(args.threads))["timing"]
            ref_s, ref_q = tt["median"], (tt["q1"], tt["q3"])
            logits, targets, input_lengths, target_lengths = _inputs(p)
            costs, grad = ctc_loss(logits, targets, input_lengths, target_lengths, device="cpu")
            loss, tgrad = _torch_step(torch, logits, targets, input_lengths, target_lengths)()
            # torch accumulates in float32; its float64 run shows which of the two is closer
            _, tgrad64 = _torch_step(torch, logits.astype(np.float64), targets, input_lengths,
                                     target_lengths)()
            extra = {
                "cost_rel_diff": f"{abs(costs.sum() - loss.item()) / abs(loss.item()):.2e}",
                "grad_max_abs_diff": f"{np.abs(grad - tgrad.numpy()).max():.2e}",
                "grad_max_abs_diff_vs_torch_float64":
                    f"asrkit {np.abs(grad - tgrad64.numpy()).max():.2e}, torch float32 "
                    f"{np.abs(tgrad.numpy() - tgrad64.numpy()).max():.2e}",
            }
        cases.append(Case(f"T={T} B={B} S={S} C={C}", t["median"], f"torch {torch.__version__}"
                          if torch is not None else "torch", ref_s, extra,
                          asrkit_spread=(t["q1"], t["q3"]), reference_spread=ref_q))
    return cases
