"""RNN-T loss forward + backward: asrkit's CPU kernels against torch, each side in its own process.

Two cases, each at one thread and at the machine's cores (``--threads``):

- ``logits``: the loss over given joiner logits ``[B, T, U+1, V]`` and their gradient.
  asrkit: ``rnnt_loss(logits, ...)`` (log-softmax fused; ``--in-place`` writes the gradient over
  the logits). torch: ``log_softmax`` + the reference loss + ``backward()``.
- ``joiner``: the additive joiner ``W tanh(enc[t, b] + pred[u, b]) + b`` and the loss, with the
  gradients for ``enc [T, B, H]``, ``pred [U+1, B, H]``, ``W``, ``b``. asrkit: ``rnnt_joiner_loss``,
  which never holds the ``[B, T, U+1, V]`` logits. torch: the joiner as users write it (broadcast
  add, ``tanh``, ``nn.functional.linear``), the reference loss, ``backward()``.

The torch reference is ``torchaudio.functional.rnnt_loss`` where torchaudio loads beside the
installed torch (its C++ extension is built per torch release); otherwise :func:`torch_rnnt_loss`
below, a log-space forward recursion over the anti-diagonals of the lattice, vectorised over the
batch and the diagonal, with autograd giving the gradient. The table names the one used.

Each side is timed and measured in a fresh process (``asrkit.bench.sides``), with
``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` and ``NUMBA_NUM_THREADS`` (and
torch's intra-op threads) set to the thread count. Peak memory is the growth of the resident set
during one step, the inputs already allocated. Inputs: standard normal logits (``logits``);
``enc``, ``pred`` standard normal and ``W ~ N(0, 1/H)`` (``joiner``); random full-length targets
without the blank. The extras compare the two sides' summed costs and a random projection of
their gradients (computed after the timing); torch's float32 recursion is the less accurate of
the two (against its float64 run: asrkit's logits gradient 3e-8 off, torch's 7e-5), so the
projection's difference is mostly torch's rounding.
"""

from __future__ import annotations

import os

import numpy as np

from asrkit.bench import Case
from asrkit.bench.sides import run_side

NAME = "rnnt"
HELP = "RNN-T loss + gradients (over logits, and with the joiner merged in) against torch"
NEG = -1e30  # a finite -inf: logaddexp(-inf, -inf) has a NaN gradient in torch


def add_arguments(parser) -> None:
    """Shape options, thread counts and the cases to run."""
    parser.add_argument("--batch", type=int, default=8, help="B, sequences per batch")
    parser.add_argument("--frames", type=int, default=200, help="T, frames per sequence")
    parser.add_argument("--target-length", type=int, default=50, help="U, labels per target")
    parser.add_argument("--classes", type=int, default=500, help="V, output classes (blank 0)")
    parser.add_argument("--joiner-dim", type=int, default=256, help="H, joiner hidden size")
    parser.add_argument("--threads", type=int, nargs="+", default=sorted({1, os.cpu_count()}),
                        help="thread counts to run each case at")
    parser.add_argument("--cases", nargs="+", choices=["logits", "joiner"],
                        default=["logits", "joiner"])
    parser.add_argument("--in-place", action="store_true",
                        help="logits case: asrkit writes the gradient over the logits")
    parser.add_argument("--seed", type=int, default=0)


def torchaudio_rnnt_loss():
    """``torchaudio.functional.rnnt_loss`` if torchaudio loads and runs here, else None."""
    try:
        import torch
        from torchaudio.functional import rnnt_loss

        rnnt_loss(torch.zeros(1, 1, 2, 2), torch.ones(1, 1, dtype=torch.int32),
                  torch.ones(1, dtype=torch.int32), torch.ones(1, dtype=torch.int32))
    except Exception:  # noqa: BLE001 - missing, or built for another torch release
        return None
    return rnnt_loss


def torch_rnnt_loss(logits, targets, input_lengths, target_lengths, blank: int = 0):
    """RNN-T costs [B] of torch logits [B, T, U+1, V] (log-softmax applied here) by autograd.

    targets, input_lengths and target_lengths are torch integer tensors ([B, S], [B], [B]).
    alpha is computed one anti-diagonal ``d = t + u`` at a time for all sequences: node
    ``(t, u)`` is entered by a blank from ``(t-1, u)`` and by label ``u`` from ``(t, u-1)``, both
    on diagonal ``d-1``. ``costs.sum().backward()`` gives the gradient.
    """
    import torch

    B, T, U1, V = logits.shape
    logp = logits.log_softmax(-1)
    lpb = logp[..., blank]                                            # [B, T, U1]
    U = U1 - 1
    tg = targets[:, :U].long().clamp(0, V - 1)
    if tg.shape[1] < U:
        tg = torch.nn.functional.pad(tg, (0, U - tg.shape[1]))
    lpl = logp[:, :, :U].gather(-1, tg[:, None, :, None].expand(B, T, U, 1)).squeeze(-1)
    D = T + U1 - 1
    d = torch.arange(D)[:, None]
    u = torch.arange(U1)[None, :]
    t = d - u
    valid = (t >= 0) & (t < T)
    tc = t.clamp(0, T - 1)
    neg = torch.tensor(NEG, dtype=logits.dtype)
    skew_b = torch.where(valid, lpb[:, tc, u.expand(D, U1)], neg)    # [B, D, U1]
    skew_l = torch.where(valid[:, :U], lpl[:, tc[:, :U], u[:, :U].expand(D, U)], neg)
    alpha = [torch.where(u == 0, 0.0, neg).expand(B, U1).to(logits.dtype)]
    for k in range(1, D):
        prev = alpha[-1]
        from_blank = prev + skew_b[:, k - 1]
        from_label = torch.nn.functional.pad(prev[:, :U] + skew_l[:, k - 1], (1, 0),
                                             value=NEG)
        alpha.append(torch.where(valid[k], torch.logaddexp(from_blank, from_label), neg))
    alpha = torch.stack(alpha, 1)                                     # [B, D, U1]
    il, tl = input_lengths.long(), target_lengths.long()
    rows = torch.arange(B)
    last_t = (il - 1).clamp(min=0)
    logz = alpha[rows, last_t + tl, tl] + lpb[rows, last_t, tl]
    return torch.where(il > 0, -logz, torch.tensor(float("inf"), dtype=logits.dtype))


def _reference():
    """(name, loss function of torch tensors) of the torch reference used here."""
    import torch

    ta = torchaudio_rnnt_loss()
    if ta is not None:
        import torchaudio

        def loss(logits, targets, il, tl, blank=0):
            return ta(logits, targets.int(), il.int(), tl.int(), blank=blank, reduction="none")

        return f"torchaudio {torchaudio.__version__}", loss
    return f"torch {torch.__version__} autograd DP", torch_rnnt_loss


def _inputs(p):
    rng = np.random.default_rng(p["seed"])
    B, T, U, V, H = p["batch"], p["frames"], p["target_length"], p["classes"], p["joiner_dim"]
    targets = rng.integers(1, V, size=(B, U)).astype(np.int32)
    il = np.full(B, T, dtype=np.int32)
    tl = np.full(B, U, dtype=np.int32)
    if p["case"] == "logits":
        return {"logits": rng.standard_normal((B, T, U + 1, V), dtype=np.float32),
                "targets": targets, "il": il, "tl": tl}
    return {"enc": rng.standard_normal((T, B, H), dtype=np.float32),
            "pred": rng.standard_normal((U + 1, B, H), dtype=np.float32),
            "weight": (rng.standard_normal((V, H)) / np.sqrt(H)).astype(np.float32),
            "bias": np.zeros(V, dtype=np.float32), "targets": targets, "il": il, "tl": tl}


def _probe(grads, seed):
    """A random projection of the gradients: sum over arrays of <g, r> (r standard normal)."""
    rng = np.random.default_rng(seed + 1)
    return float(sum(np.dot(np.ravel(g).astype(np.float64),
                            rng.standard_normal(np.size(g))) for g in grads))


def _asrkit_step(p, x):
    from asrkit.kernels import rnnt_joiner_loss, rnnt_loss

    if p["case"] == "logits":
        if p["in_place"]:
            work = x["logits"].copy()

            def step():
                work[...] = x["logits"]  # the kernel overwrote the previous run's logits
                costs, grad = rnnt_loss(work, x["targets"], x["il"], x["tl"], device="cpu",
                                        in_place=True)
                return costs, (grad,)

            return step
        return lambda: _pack(rnnt_loss(x["logits"], x["targets"], x["il"], x["tl"],
                                       device="cpu"))
    return lambda: rnnt_joiner_loss(x["enc"], x["pred"], x["weight"], x["bias"], x["targets"],
                                    x["il"], x["tl"], device="cpu")


def _pack(result):
    costs, grad = result
    return costs, (grad,)


def _torch_step(p, x):
    import torch

    torch.set_num_threads(p["threads"])
    _, loss = _reference()
    tg, il, tl = (torch.from_numpy(x[k]) for k in ("targets", "il", "tl"))
    if p["case"] == "logits":
        z = torch.from_numpy(x["logits"]).requires_grad_(True)

        def step():
            z.grad = None
            costs = loss(z, tg, il, tl)
            costs.sum().backward()
            return costs.detach().numpy(), (z.grad.numpy(),)

        return step
    params = [torch.from_numpy(x[k]).requires_grad_(True)
              for k in ("enc", "pred", "weight", "bias")]

    def step():
        for q in params:
            q.grad = None
        enc, pred, weight, bias = params
        h = torch.tanh(enc.transpose(0, 1)[:, :, None, :] + pred.transpose(0, 1)[:, None, :, :])
        costs = loss(torch.nn.functional.linear(h, weight, bias), tg, il, tl)
        costs.sum().backward()
        return costs.detach().numpy(), tuple(q.grad.numpy() for q in params)

    return step


def measure_side(side: str, p: dict, repeat: int = 5) -> dict:
    """In a fresh process (``run_side``): the step's timing and peak memory, then its summed
    costs and the random projection of its gradients."""
    from asrkit.bench.sides import measure_step

    x = _inputs(p)
    step = _asrkit_step(p, x) if side == "asrkit" else _torch_step(p, x)
    out = measure_step(step, repeat=repeat)
    costs, grads = step()
    out["cost_sum"] = float(np.sum(costs, dtype=np.float64))
    out["grad_probe"] = _probe(grads, p["seed"])
    if side != "asrkit":
        out["name"] = _reference()[0]
    return out


def _env(threads: int) -> dict:
    n = str(threads)
    return {"OPENBLAS_NUM_THREADS": n, "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n,
            "NUMBA_NUM_THREADS": n}


def run(args) -> list[Case]:
    """Each case at each thread count: both sides in their own processes; ratios, peak memory
    and the agreement of costs and gradients."""
    try:
        import torch  # noqa: F401
    except ImportError:
        torch = None
    B, T, U, V = args.batch, args.frames, args.target_length, args.classes
    full_mb = B * T * (U + 1) * V * 4 / 2**20
    cases = []
    for case in args.cases:
        for threads in args.threads:
            p = {"case": case, "batch": B, "frames": T, "target_length": U, "classes": V,
                 "joiner_dim": args.joiner_dim, "threads": threads, "seed": args.seed,
                 "in_place": bool(args.in_place)}
            ours = run_side(__name__, "asrkit", p, args.repeat, env=_env(threads))
            extra = {"asrkit_peak_MB": round(ours["peak_bytes"] / 2**20, 1),
                     "logits_tensor_MB": round(full_mb, 1)}
            ref_name, ref_s, ref_q = "torch", None, None
            if torch is not None:
                theirs = run_side(__name__, "torch", p, args.repeat, env=_env(threads))
                ref_name = theirs["name"]
                t = theirs["timing"]
                ref_s, ref_q = t["median"], (t["q1"], t["q3"])
                extra["reference_peak_MB"] = round(theirs["peak_bytes"] / 2**20, 1)
                extra["memory_ratio"] = round(ours["peak_bytes"] / max(theirs["peak_bytes"], 1),
                                              3)
                dc = abs(ours["cost_sum"] - theirs["cost_sum"]) / abs(theirs["cost_sum"])
                dg = (abs(ours["grad_probe"] - theirs["grad_probe"])
                      / max(abs(theirs["grad_probe"]), 1e-30))
                extra["cost_rel_diff"] = f"{dc:.2e}"
                extra["grad_probe_rel_diff"] = f"{dg:.2e}"
            name = case + (" in place" if case == "logits" and args.in_place else "")
            shape = f"B={B} T={T} U={U} V={V}" + (f" H={args.joiner_dim}"
                                                  if case == "joiner" else "")
            t = ours["timing"]
            cases.append(Case(f"{name} {shape} threads={threads}", t["median"], ref_name,
                              ref_s, extra, asrkit_spread=(t["q1"], t["q3"]),
                              reference_spread=ref_q))
    return cases
