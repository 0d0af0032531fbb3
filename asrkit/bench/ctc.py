"""CTC loss forward + backward: asrkit's CPU kernel against torch's, in one process.

torch is timed the way users call it: ``log_softmax`` + ``ctc_loss(reduction="sum")`` +
``backward()``, with torch's intra-op threads set to the machine's cores; asrkit is timed on
``asrkit.kernels.ctc_loss(logits, ...)``, which fuses the log-softmax and returns the gradient.
Inputs are random logits (standard normal) and random full-length targets without the blank.
"""

from __future__ import annotations

import functools
import os

import numpy as np

from asrkit.bench import Case, median_time

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
                        help="torch intra-op threads (numba uses all cores)")
    parser.add_argument("--seed", type=int, default=0)


def _torch_step(torch, logits, targets, input_lengths, target_lengths):
    x = torch.from_numpy(logits).requires_grad_(True)
    tg, il, tl = (torch.from_numpy(a) for a in (targets, input_lengths, target_lengths))

    def step():
        x.grad = None
        loss = torch.nn.functional.ctc_loss(x.log_softmax(-1), tg, il, tl, reduction="sum")
        loss.backward()
        return loss, x.grad

    return step


def run(args) -> list[Case]:
    """Time each case; returns Cases with the cost and gradient agreement as extras."""
    from asrkit.kernels import ctc_loss

    try:
        import torch
    except ImportError:  # the ratio column shows "-" without torch
        torch = None
    else:
        torch.set_num_threads(args.threads)
    rng = np.random.default_rng(args.seed)
    T, B, S = args.frames, args.batch, args.target_length
    cases = []
    for C in args.classes:
        logits = rng.standard_normal((T, B, C)).astype(np.float32)
        targets = rng.integers(1, C, size=(B, S)).astype(np.int32)
        input_lengths = np.full(B, T, dtype=np.int32)
        target_lengths = np.full(B, S, dtype=np.int32)
        ours = functools.partial(ctc_loss, logits, targets, input_lengths, target_lengths,
                                 device="cpu")
        asrkit_s = median_time(ours, repeat=args.repeat)
        ref_s, extra = None, {}
        if torch is not None:
            step = _torch_step(torch, logits, targets, input_lengths, target_lengths)
            ref_s = median_time(step, repeat=args.repeat)
            costs, grad = ours()
            loss, tgrad = step()
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
        cases.append(Case(f"T={T} B={B} S={S} C={C}", asrkit_s, f"torch {torch.__version__}"
                          if torch is not None else "torch", ref_s, extra))
    return cases
