"""Multi-head self-attention forward + backward: asrkit's CPU kernels against torch.

Three cases on one padded batch ``[T, B, D]`` with ``H`` heads (defaults T=500, B=8, D=256,
H=4; lengths drawn from [T/2, T] with one sequence of T, ``--full`` for all T):

* ``core``: the attention core on given q, k, v: ``asrkit.kernels.attention_forward`` +
  ``attention_backward`` against ``torch.nn.functional.scaled_dot_product_attention`` with the
  key padding as a boolean ``attn_mask`` (each side in its own layout: ``[T, B, D]`` here,
  ``[B, H, T, D/H]`` for torch);
* ``layer``: the whole layer (projections, core, output projection) from ``x``:
  ``mhsa_forward`` + ``mhsa_backward`` against ``torch.nn.MultiheadAttention`` with
  ``key_padding_mask`` and ``need_weights=False`` (its fast path through
  ``scaled_dot_product_attention``; the default ``need_weights=True`` is slower);
* ``rel-pos layer``: the layer with relative positions against a torch re-implementation of
  ESPnet's ``RelPositionMultiHeadedAttention`` ("latest" ``rel_shift``, :func:`espnet_modules`).

Every step is forward + backward of ``sum(y * r)`` for a fixed random ``r``. Each side runs in its
own fresh process (``asrkit.bench.sides``), once with one thread (``OPENBLAS_NUM_THREADS=1``,
``torch.set_num_threads(1)``, ``threads=1``) and once with the machine's cores; the figures are
the median and quartiles of ``--repeat`` steps and the peak resident-memory growth of a step.
The extras give the largest difference from torch of the output and of the input gradient
(computed in this process at the same shapes).
"""

from __future__ import annotations

import math
import os

import numpy as np

from asrkit.bench import Case
from asrkit.bench.sides import run_side

NAME = "attention"
HELP = "multi-head self-attention forward+backward (core, layer, rel-pos) against torch"
CASES = ("core", "layer", "rel-pos layer")


def add_arguments(parser) -> None:
    """Shape options, the thread counts and which cases to run."""
    parser.add_argument("--frames", type=int, default=500, help="T, frames per sequence")
    parser.add_argument("--batch", type=int, default=8, help="B, sequences per batch")
    parser.add_argument("--dim", type=int, default=256, help="D, model size")
    parser.add_argument("--heads", type=int, default=4, help="H, attention heads")
    parser.add_argument("--full", action="store_true",
                        help="every sequence T frames (default: lengths from T/2 to T)")
    parser.add_argument("--threads", type=int, nargs="+", default=sorted({1, os.cpu_count()}),
                        help="thread counts to run each case at (default: 1 and the cores)")
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--seed", type=int, default=0)


def espnet_modules(torch):
    """Torch re-implementations of ESPnet's ``RelPositionalEncoding`` (the "latest" variant,
    without dropout) and ``RelPositionMultiHeadedAttention`` (``espnet.nets.pytorch_backend.
    transformer``), batch first as ESPnet: returns ``(pos_encoding(T, D) -> [1, 2T-1, D],
    RelPositionMHA(H, D))``. The module's ``forward(x, pos_emb, mask)`` takes ``x [B, T, D]``
    and a boolean ``mask [B, 1 or T, T]`` (True: may attend)."""
    nn = torch.nn

    def pos_encoding(T, D, dtype=torch.float32):
        position = torch.arange(0, T, dtype=torch.float32).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, D, 2, dtype=torch.float32)
                             * -(math.log(10000.0) / D))
        pe_positive = torch.zeros(T, D)
        pe_negative = torch.zeros(T, D)
        pe_positive[:, 0::2] = torch.sin(position * div_term)
        pe_positive[:, 1::2] = torch.cos(position * div_term)
        pe_negative[:, 0::2] = torch.sin(-1 * position * div_term)
        pe_negative[:, 1::2] = torch.cos(-1 * position * div_term)
        pe_positive = torch.flip(pe_positive, [0]).unsqueeze(0)
        pe_negative = pe_negative[1:].unsqueeze(0)
        return torch.cat([pe_positive, pe_negative], dim=1).to(dtype)

    class RelPositionMHA(nn.Module):
        def __init__(self, n_head, n_feat):
            super().__init__()
            self.d_k = n_feat // n_head
            self.h = n_head
            self.linear_q = nn.Linear(n_feat, n_feat)
            self.linear_k = nn.Linear(n_feat, n_feat)
            self.linear_v = nn.Linear(n_feat, n_feat)
            self.linear_out = nn.Linear(n_feat, n_feat)
            self.linear_pos = nn.Linear(n_feat, n_feat, bias=False)
            self.pos_bias_u = nn.Parameter(torch.empty(self.h, self.d_k))
            self.pos_bias_v = nn.Parameter(torch.empty(self.h, self.d_k))
            nn.init.xavier_uniform_(self.pos_bias_u)
            nn.init.xavier_uniform_(self.pos_bias_v)

        @staticmethod
        def rel_shift(x):
            zero_pad = torch.zeros((*x.size()[:3], 1), device=x.device, dtype=x.dtype)
            x_padded = torch.cat([zero_pad, x], dim=-1)
            x_padded = x_padded.view(*x.size()[:2], x.size(3) + 1, x.size(2))
            return x_padded[:, :, 1:].view_as(x)[:, :, :, : x.size(-1) // 2 + 1]

        def forward(self, x, pos_emb, mask):
            n_batch = x.size(0)
            q = self.linear_q(x).view(n_batch, -1, self.h, self.d_k)
            k = self.linear_k(x).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
            v = self.linear_v(x).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
            p = self.linear_pos(pos_emb).view(pos_emb.size(0), -1, self.h, self.d_k)
            p = p.transpose(1, 2)
            q_with_bias_u = (q + self.pos_bias_u).transpose(1, 2)
            q_with_bias_v = (q + self.pos_bias_v).transpose(1, 2)
            matrix_ac = torch.matmul(q_with_bias_u, k.transpose(-2, -1))
            matrix_bd = self.rel_shift(torch.matmul(q_with_bias_v, p.transpose(-2, -1)))
            scores = (matrix_ac + matrix_bd) / math.sqrt(self.d_k)
            masked = ~mask.unsqueeze(1)
            scores = scores.masked_fill(masked, float("-inf"))
            attn = torch.softmax(scores, dim=-1).masked_fill(masked, 0.0)
            out = torch.matmul(attn, v).transpose(1, 2).reshape(n_batch, -1, self.h * self.d_k)
            return self.linear_out(out)

    return pos_encoding, RelPositionMHA


def _data(a):
    """The inputs every side builds alike from the seed: x, q, k, v, r, lengths, weights."""
    rng = np.random.default_rng(a["seed"])
    T, B, D, H = a["frames"], a["batch"], a["dim"], a["heads"]
    if a["full"]:
        lengths = np.full(B, T, np.int32)
    else:
        lengths = rng.integers(T // 2, T + 1, B).astype(np.int32)
        lengths[0] = T
    f = {n: rng.standard_normal((T, B, D)).astype(np.float32) for n in ("x", "q", "k", "v", "r")}
    k = 1 / np.sqrt(D)
    w = {"w_in": rng.uniform(-k, k, (3 * D, D)), "b_in": rng.uniform(-k, k, 3 * D),
         "w_out": rng.uniform(-k, k, (D, D)), "b_out": rng.uniform(-k, k, D),
         "w_pos": rng.uniform(-k, k, (D, D)), "pos_bias_u": rng.uniform(-k, k, (H, D // H)),
         "pos_bias_v": rng.uniform(-k, k, (H, D // H))}
    f.update({n: v.astype(np.float32) for n, v in w.items()})
    return f, lengths


def _pos_emb(T, D):
    """ESPnet's relative positional encoding ``[2T-1, D]`` in numpy (the same numbers as
    :func:`espnet_modules`' ``pos_encoding``)."""
    div_term = np.exp(np.arange(0, D, 2, dtype=np.float32) * -(math.log(10000.0) / D))
    pe = np.zeros((2 * T - 1, D), np.float32)
    rel = (T - 1 - np.arange(2 * T - 1, dtype=np.float32))[:, None]   # T-1 .. -(T-1)
    pe[:, 0::2] = np.sin(rel * div_term)
    pe[:, 1::2] = np.cos(rel * div_term)
    return pe


def asrkit_step(case, a, threads):
    """``step()`` -> (output, input gradient) of one asrkit case."""
    from asrkit.kernels import attention_backward, attention_forward, mhsa_backward, mhsa_forward

    f, lengths = _data(a)
    H = a["heads"]
    if case == "core":
        def step():
            out, cache = attention_forward(f["q"], f["k"], f["v"], lengths, H, device="cpu",
                                           threads=threads)
            return out, attention_backward(f["r"], cache)[0]
        return step
    rel = {}
    if case == "rel-pos layer":
        rel = {"pos_emb": _pos_emb(a["frames"], a["dim"]), "w_pos": f["w_pos"],
               "pos_bias_u": f["pos_bias_u"], "pos_bias_v": f["pos_bias_v"]}

    def step():
        y, cache = mhsa_forward(f["x"], f["w_in"], f["b_in"], f["w_out"], f["b_out"], H, lengths,
                                device="cpu", threads=threads, **rel)
        return y, mhsa_backward(f["r"], cache)[0]
    return step


def torch_step(case, a):
    """``step()`` -> (output, input gradient) of the torch side of a case, both ``[T, B, D]``
    numpy arrays."""
    import torch

    f, lengths = _data(a)
    T, B, D, H = a["frames"], a["batch"], a["dim"], a["heads"]
    L = torch.from_numpy(lengths.astype(np.int64))
    valid = torch.arange(T)[None, :] < L[:, None]                        # [B, T]
    keep = valid.T[:, :, None]                                            # [T, B, 1]
    r = torch.from_numpy(f["r"]) * keep  # the padded frames' outputs are no part of the loss
    if case == "core":
        def heads(n):
            return torch.from_numpy(f[n]).view(T, B, H, D // H).permute(1, 2, 0, 3) \
                .contiguous().requires_grad_(True)
        q, k, v = heads("q"), heads("k"), heads("v")
        rh = r.view(T, B, H, D // H).permute(1, 2, 0, 3)
        mask = valid[:, None, None, :]

        def step():
            q.grad = k.grad = v.grad = None
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            (o * rh).sum().backward()
            return ((o.detach().permute(2, 0, 1, 3).reshape(T, B, D) * keep).numpy(),
                    q.grad.permute(2, 0, 1, 3).reshape(T, B, D).numpy())
        return step
    if case == "layer":
        m = torch.nn.MultiheadAttention(D, H)
        with torch.no_grad():
            m.in_proj_weight.copy_(torch.from_numpy(f["w_in"]))
            m.in_proj_bias.copy_(torch.from_numpy(f["b_in"]))
            m.out_proj.weight.copy_(torch.from_numpy(f["w_out"]))
            m.out_proj.bias.copy_(torch.from_numpy(f["b_out"]))
        x = torch.from_numpy(f["x"]).requires_grad_(True)

        def step():
            m.zero_grad(set_to_none=True)
            x.grad = None
            y, _ = m(x, x, x, key_padding_mask=~valid, need_weights=False)
            (y * r).sum().backward()
            return (y * keep).detach().numpy(), x.grad.numpy()
        return step
    pos_encoding, RelPositionMHA = espnet_modules(torch)
    m = RelPositionMHA(H, D)
    with torch.no_grad():
        for i, n in enumerate("qkv"):
            getattr(m, f"linear_{n}").weight.copy_(torch.from_numpy(f["w_in"][i * D:(i + 1) * D]))
            getattr(m, f"linear_{n}").bias.copy_(torch.from_numpy(f["b_in"][i * D:(i + 1) * D]))
        m.linear_out.weight.copy_(torch.from_numpy(f["w_out"]))
        m.linear_out.bias.copy_(torch.from_numpy(f["b_out"]))
        m.linear_pos.weight.copy_(torch.from_numpy(f["w_pos"]))
        m.pos_bias_u.copy_(torch.from_numpy(f["pos_bias_u"]))
        m.pos_bias_v.copy_(torch.from_numpy(f["pos_bias_v"]))
    pos_emb = pos_encoding(T, D)
    xb = torch.from_numpy(f["x"]).permute(1, 0, 2).contiguous().requires_grad_(True)
    mask = valid[:, None, :]
    rb = r.permute(1, 0, 2)

    def step():
        m.zero_grad(set_to_none=True)
        xb.grad = None
        y = m(xb, pos_emb, mask)
        (y * rb).sum().backward()
        return (y.detach().permute(1, 0, 2) * keep).numpy(), xb.grad.permute(1, 0, 2).numpy()
    return step


def measure_side(side: str, a: dict, repeat: int = 5) -> dict:
    """Run in a fresh process (``asrkit.bench.sides.run_side``): every case of one side at
    ``a["threads"]`` threads; ``{case: measure_step(...)}``."""
    from asrkit.bench.sides import measure_step

    threads = a["threads"]
    if side == "torch":
        import torch

        torch.set_num_threads(threads)
    out = {}
    for case in a["cases"]:
        step = asrkit_step(case, a, threads) if side == "asrkit" else torch_step(case, a)
        out[case] = measure_step(step, repeat=repeat)
    return out


def _agreement(case, a):
    ours = asrkit_step(case, a, None)()
    theirs = torch_step(case, a)()
    return {"out_max_abs_diff": f"{np.abs(ours[0] - theirs[0]).max():.2e}",
            "grad_max_abs_diff": f"{np.abs(ours[1] - theirs[1]).max():.2e}"}


def run(args) -> list[Case]:
    """Measure each side alone at each thread count; returns one Case per case and count."""
    base = {"frames": args.frames, "batch": args.batch, "dim": args.dim, "heads": args.heads,
            "full": args.full, "seed": args.seed, "cases": args.cases}
    try:
        import torch
        ref_name = f"torch {torch.__version__}"
    except ImportError:
        torch, ref_name = None, "torch"
    agree = {c: _agreement(c, {**base, "threads": None}) for c in args.cases} \
        if torch is not None else {}
    shape = (f"T={args.frames} B={args.batch} D={args.dim} H={args.heads}"
             + (" full" if args.full else " lengths T/2..T"))
    refs = {"core": "sdpa", "layer": "nn.MHA", "rel-pos layer": "ESPnet rel-pos"}
    cases = []
    for n in args.threads:
        a = {**base, "threads": n}
        env = {"OPENBLAS_NUM_THREADS": n, "OMP_NUM_THREADS": n}
        ours = run_side(__name__, "asrkit", a, args.repeat, env=env)
        theirs = run_side(__name__, "torch", a, args.repeat, env=env) if torch else {}
        for c in args.cases:
            t = ours[c]["timing"]
            extra = {"asrkit_peak_MB": round(ours[c]["peak_bytes"] / 2**20, 1)}
            ref_s = ref_q = None
            if c in theirs:
                tt = theirs[c]["timing"]
                ref_s, ref_q = tt["median"], (tt["q1"], tt["q3"])
                extra["torch_peak_MB"] = round(theirs[c]["peak_bytes"] / 2**20, 1)
            extra.update(agree.get(c, {}))
            cases.append(Case(f"{c} fwd+bwd, {n} thread{'s' if n > 1 else ''}", t["median"],
                              f"{ref_name} {refs[c]}", ref_s, extra,
                              asrkit_spread=(t["q1"], t["q3"]), reference_spread=ref_q))
    if cases:
        cases[0].extra = {"shape": shape, **cases[0].extra}
    return cases
