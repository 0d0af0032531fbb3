"""LSTM layer forward + backward: asrkit's fused CPU kernels against torch.nn.LSTM, in one process.

Both sides get the same weights and input ``x [T, B, I]`` and compute ``y`` and the gradients of
``sum(y * r)`` for a fixed random ``r``: torch through autograd with its intra-op threads set to
the machine's cores, asrkit through ``lstm_forward`` + ``lstm_backward`` (``blstm_*`` for the
bidirectional cases, once with the directions in turn and once in two threads). The last case
has lengths drawn from [T/2, T] (torch: ``pack_padded_sequence``). The extras give the largest
difference of ``y`` and of ``dW_ih`` from torch's.

The two sides are timed in alternation (one run of each per round, after a warm-up), so that
load from other processes on a shared machine falls on both alike; each figure is the median.
"""

from __future__ import annotations

import os
import statistics

import numpy as np

from asrkit.bench import Case, median_time

NAME = "lstm"
HELP = "fused LSTM/BLSTM forward+backward on the CPU against torch.nn.LSTM"


def add_arguments(parser) -> None:
    """Shape options: frames, batch, input and hidden sizes, projection, threads."""
    parser.add_argument("--frames", type=int, default=300, help="T, frames per sequence")
    parser.add_argument("--batch", type=int, default=16, help="B, sequences per batch")
    parser.add_argument("--input", type=int, default=80, help="I, input features")
    parser.add_argument("--hidden", type=int, default=320, help="H, cells per direction")
    parser.add_argument("--proj", type=int, default=0, help="P, projection size (0: none)")
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="torch's intra-op threads and asrkit's recurrence threads (numpy's "
                        "BLAS threads are set by OPENBLAS_NUM_THREADS)")
    parser.add_argument("--seed", type=int, default=0)


def _weights(rng, I, H, P, dirs):
    k = 1 / np.sqrt(H)
    PP = P or H
    shapes = {"w_ih": (4 * H, I), "w_hh": (4 * H, PP), "b_ih": (4 * H,), "b_hh": (4 * H,)}
    if P:
        shapes["w_hr"] = (P, H)
    return {n: rng.uniform(-k, k, (dirs, *s)).astype(np.float32) for n, s in shapes.items()}


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
        return y, m.weight_ih_l0.grad

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


def _alternating(ours, theirs, repeat):
    """Median seconds of ``ours`` and ``theirs`` (None if absent), one run of each per round."""
    ours()
    if theirs is not None:
        theirs()
    a, b = [], []
    for _ in range(repeat):
        a.append(median_time(ours, repeat=1, warmup=0))
        if theirs is not None:
            b.append(median_time(theirs, repeat=1, warmup=0))
    return statistics.median(a), (statistics.median(b) if b else None)


def run(args) -> list[Case]:
    """Time uni- and bidirectional layers; returns Cases with the agreement as extras."""
    try:
        import torch
    except ImportError:  # the ratio column shows "-" without torch
        torch = None
    else:
        torch.set_num_threads(args.threads)
    rng = np.random.default_rng(args.seed)
    T, B, I, H, P = args.frames, args.batch, args.input, args.hidden, args.proj
    x = rng.standard_normal((T, B, I)).astype(np.float32)
    shape = f"T={T} B={B} {I}->{H}" + (f" P={P}" if P else "")
    cases = []
    packed = rng.integers(T // 2, T + 1, size=B).astype(np.int64)
    for label, bidirectional, concurrent, lengths in (
            ("lstm", False, None, None),
            ("blstm, directions in turn", True, False, None),
            ("blstm, two threads", True, True, None),
            ("lstm, lengths T/2..T", False, None, packed)):
        dirs = 2 if bidirectional else 1
        w = _weights(rng, I, H, P, dirs)
        r = rng.standard_normal((T, B, dirs * (P or H))).astype(np.float32)
        ours = _asrkit_step(x, r, w, bidirectional, concurrent, lengths, args.threads)
        theirs = None if torch is None else _torch_step(torch, x, r, w, bidirectional, P,
                                                        lengths)
        asrkit_s, ref_s = _alternating(ours, theirs, args.repeat)
        extra = {}
        if theirs is not None:
            (y, dw), (yt, dwt) = ours(), theirs()
            extra = {"y_max_abs_diff": f"{np.abs(y - yt.detach().numpy()).max():.2e}",
                     "dw_ih_max_rel_diff":
                         f"{np.abs(dw - dwt.numpy()).max() / np.abs(dwt.numpy()).max():.2e}"}
        cases.append(Case(f"{label} fwd+bwd {shape}", asrkit_s, "torch", ref_s, extra))
    return cases
