"""One Conformer block forward + backward: asrkit's ``conformer`` layer against the same block
written in torch.

The block is ESPnet's ``ConformerEncoderLayer`` with relative positions (macaron feed-forward,
``RelPositionMultiHeadedAttention``, convolution module with GLU, depthwise convolution, batch
norm and Swish, final LayerNorm), after the ``x * sqrt(D)`` scaling, on a padded batch ``[T, B,
D]`` (defaults T=500, B=8, D=256, H=4, feed-forward 1024, kernel 31 as icefall's conformer_ctc;
lengths drawn from [T/2, T] with one sequence of T, ``--full`` for all T). Both sides hold the
same weights (the asrkit layer's, moved through its torch names) and run in training mode (batch
statistics over the valid frames; no dropout). A step is forward + backward of ``sum(y * r)``
for a fixed random ``r`` zero on padded frames, gradients of every weight and of ``x``.

Each side runs in its own fresh process (``asrkit.bench.sides``), once with one thread and once
with the machine's cores; the figures are the median and quartiles of ``--repeat`` steps and
the peak resident-memory growth of a step. With lengths (the default), asrkit's dense layers,
like its attention, compute the valid frames only (one GEMM per sequence), while the torch
block computes every padded frame, as ESPnet's does; ``--full`` compares the same work. The
extras give the largest difference from torch of the output and of the input gradient
(computed in this process).
"""

from __future__ import annotations

import math
import os

import numpy as np

from asrkit.bench import Case
from asrkit.bench.sides import run_side

NAME = "conformer"
HELP = "one Conformer block forward+backward against the same block in torch"


def add_arguments(parser) -> None:
    """Shape options and the thread counts."""
    parser.add_argument("--frames", type=int, default=500, help="T, frames per sequence")
    parser.add_argument("--batch", type=int, default=8, help="B, sequences per batch")
    parser.add_argument("--dim", type=int, default=256, help="D, model size")
    parser.add_argument("--heads", type=int, default=4, help="H, attention heads")
    parser.add_argument("--ff-dim", type=int, default=1024, help="feed-forward size")
    parser.add_argument("--kernel-size", type=int, default=31, help="depthwise kernel (odd)")
    parser.add_argument("--full", action="store_true",
                        help="every sequence T frames (default: lengths from T/2 to T)")
    parser.add_argument("--threads", type=int, nargs="+", default=sorted({1, os.cpu_count()}),
                        help="thread counts to run at (default: 1 and the cores)")
    parser.add_argument("--seed", type=int, default=0)


def _data(a):
    """x, r (zero on padding) and lengths, alike on every side from the seed."""
    rng = np.random.default_rng(a["seed"])
    T, B, D = a["frames"], a["batch"], a["dim"]
    if a["full"]:
        lengths = np.full(B, T, np.int32)
    else:
        lengths = rng.integers(T // 2, T + 1, B).astype(np.int32)
        lengths[0] = T
    x = rng.standard_normal((T, B, D)).astype(np.float32)
    r = rng.standard_normal((T, B, D)).astype(np.float32)
    r *= (np.arange(T)[:, None] < lengths[None, :])[:, :, None]
    return x, r, lengths


def _asrkit_block(a):
    """``(layer, x node, y node)``: the built asrkit ``conformer`` layer of one block, seeded."""
    import zlib

    from asrkit.graph import input_variable, parameter
    from asrkit.layers import ConformerEncoder, parameter_source

    def make(name, shape, init, trainable):
        return parameter(shape, init=init, name=name, trainable=trainable,
                         seed=(a["seed"] + zlib.crc32(name.encode())) % 2**32)

    layer = ConformerEncoder(a["dim"], a["heads"], a["ff_dim"], 1, 0.0, a["kernel_size"],
                             name="block")
    x = input_variable(a["dim"], name="x")
    rng = np.random.default_rng(a["seed"] + 1)
    with parameter_source(make):
        y = layer(x)
    for p in layer.parameters:  # weights of a trained scale, not the initial zeros/ones
        if p.trainable:
            p.value = (np.asarray(p.value) + rng.uniform(-0.1, 0.1, p.shape)).astype(np.float32)
    return layer, x, y


def asrkit_step(a):
    """``step()`` -> (output, input gradient), both ``[T, B, D]``."""
    import asrkit.ops as O
    from asrkit.graph import forward_backward, input_variable

    layer, x, y = _asrkit_block(a)
    xv, rv, lengths = _data(a)
    r = input_variable(a["dim"], name="r")
    loss = O.sum_all(y * r)
    wrt = [p for p in layer.parameters if p.trainable] + [x]
    feeds = {x: (xv, lengths), r: (rv, lengths)}

    def step():
        values, grads = forward_backward(loss, wrt, feeds, outputs=[y])
        return np.asarray(values[1].data), grads[x]
    return step


def torch_block(torch, D, H, F, K):
    """The torch module (one ESPnet Conformer block after ``x * sqrt(D)``) under the asrkit
    layer's torch names (``layers.0.*``); ``forward(x [B, T, D], key_pad [B, T])``."""
    nn = torch.nn
    from asrkit.bench.attention import espnet_modules

    pos_encoding, _ = espnet_modules(torch)

    class RelPositionMHA(nn.Module):
        def __init__(self):
            super().__init__()
            self.in_proj, self.out_proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
            self.linear_pos = nn.Linear(D, D, bias=False)
            self.pos_bias_u = nn.Parameter(torch.zeros(H, D // H))
            self.pos_bias_v = nn.Parameter(torch.zeros(H, D // H))

        def forward(self, x, pos_emb, key_pad):
            B, T, _ = x.shape
            dk = D // H
            q, k, v = (t.view(B, T, H, dk) for t in self.in_proj(x).chunk(3, dim=-1))
            k, v = k.transpose(1, 2), v.transpose(1, 2)
            p = self.linear_pos(pos_emb).view(1, -1, H, dk).transpose(1, 2)
            ac = torch.matmul((q + self.pos_bias_u).transpose(1, 2), k.transpose(-2, -1))
            bd = torch.matmul((q + self.pos_bias_v).transpose(1, 2), p.transpose(-2, -1))
            zero = torch.zeros((*bd.size()[:3], 1), dtype=bd.dtype)
            bd = torch.cat([zero, bd], dim=-1).view(B, H, 2 * T, T)[:, :, 1:]
            bd = bd.reshape(B, H, T, 2 * T - 1)[:, :, :, :T]  # ESPnet's rel_shift
            mask = key_pad[:, None, None, :]
            scores = ((ac + bd) / math.sqrt(dk)).masked_fill(mask, float("-inf"))
            attn = torch.softmax(scores, dim=-1).masked_fill(mask, 0.0)
            return self.out_proj(torch.matmul(attn, v).transpose(1, 2).reshape(B, T, D))

    class FeedForward(nn.Module):
        def __init__(self):
            super().__init__()
            self.w_1, self.w_2 = nn.Linear(D, F), nn.Linear(F, D)

        def forward(self, x):
            return self.w_2(nn.functional.silu(self.w_1(x)))

    class ConvModule(nn.Module):
        def __init__(self):
            super().__init__()
            self.pointwise_conv1 = nn.Conv1d(D, 2 * D, 1)
            self.depthwise_conv = nn.Conv1d(D, D, K, padding=(K - 1) // 2, groups=D)
            self.norm = nn.BatchNorm1d(D)
            self.pointwise_conv2 = nn.Conv1d(D, D, 1)

        def forward(self, x, key_pad):
            x = nn.functional.glu(self.pointwise_conv1(x.transpose(1, 2)), dim=1)
            x = self.depthwise_conv(x.masked_fill(key_pad[:, None, :], 0.0))
            # batch statistics over the valid frames, as asrkit's batch_norm
            valid = ~key_pad
            xs = x.transpose(1, 2)[valid]                                   # [N, D]
            mean, var = xs.mean(0), xs.var(0, unbiased=False)
            x = (x - mean[None, :, None]) / torch.sqrt(var[None, :, None] + 1e-5)
            x = x * self.norm.weight[None, :, None] + self.norm.bias[None, :, None]
            return self.pointwise_conv2(nn.functional.silu(x)).transpose(1, 2)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm_ff_macaron, self.feed_forward_macaron = nn.LayerNorm(D), FeedForward()
            self.norm_mha, self.self_attn = nn.LayerNorm(D), RelPositionMHA()
            self.norm_conv, self.conv_module = nn.LayerNorm(D), ConvModule()
            self.norm_ff, self.feed_forward = nn.LayerNorm(D), FeedForward()
            self.norm_final = nn.LayerNorm(D)

        def forward(self, x, pos_emb, key_pad):
            x = x + 0.5 * self.feed_forward_macaron(self.norm_ff_macaron(x))
            x = x + self.self_attn(self.norm_mha(x), pos_emb, key_pad)
            x = x + self.conv_module(self.norm_conv(x), key_pad)
            x = x + 0.5 * self.feed_forward(self.norm_ff(x))
            return self.norm_final(x)

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([Block()])

        def forward(self, x, key_pad):
            pos_emb = pos_encoding(x.shape[1], D)
            return self.layers[0](x * math.sqrt(D), pos_emb, key_pad)

    return Encoder()


def torch_step(a):
    """``step()`` -> (output, input gradient) of the torch block, both ``[T, B, D]`` numpy."""
    import torch

    from asrkit.layers import torch_layout

    layer, _, _ = _asrkit_block(a)
    m = torch_block(torch, a["dim"], a["heads"], a["ff_dim"], a["kernel_size"])
    sd = {t: torch.from_numpy(torch_layout(layer.value(k), layout, True))
          for k, t, layout in layer.torch_names() if "running" not in k}
    m.load_state_dict(sd, strict=False)
    xv, rv, lengths = _data(a)
    T = a["frames"]
    key_pad = torch.arange(T)[None, :] >= torch.from_numpy(lengths.astype(np.int64))[:, None]
    xb = torch.from_numpy(xv).permute(1, 0, 2).contiguous().requires_grad_(True)
    rb = torch.from_numpy(rv).permute(1, 0, 2)
    keep = (~key_pad).T[:, :, None]

    def step():
        m.zero_grad(set_to_none=True)
        xb.grad = None
        y = m(xb, key_pad)
        (y * rb).sum().backward()
        return (y.detach().permute(1, 0, 2) * keep).numpy(), xb.grad.permute(1, 0, 2).numpy()
    return step


def measure_side(side: str, a: dict, repeat: int = 5) -> dict:
    """Run in a fresh process (``asrkit.bench.sides.run_side``): one side at ``a["threads"]``
    threads; ``measure_step(...)`` of its step."""
    from asrkit.bench.sides import measure_step

    if side == "torch":
        import torch

        torch.set_num_threads(a["threads"])
        step = torch_step(a)
    else:
        step = asrkit_step(a)
    return measure_step(step, repeat=repeat)


def _agreement(a):
    ours, theirs = asrkit_step(a)(), torch_step(a)()
    valid = (np.arange(a["frames"])[:, None] < _data(a)[2][None, :])
    return {"out_max_abs_diff": f"{np.abs(ours[0] - theirs[0])[valid].max():.2e}",
            "grad_max_abs_diff": f"{np.abs(ours[1] - theirs[1])[valid].max():.2e}"}


def run(args) -> list[Case]:
    """Measure each side alone at each thread count; one Case per thread count."""
    base = {"frames": args.frames, "batch": args.batch, "dim": args.dim, "heads": args.heads,
            "ff_dim": args.ff_dim, "kernel_size": args.kernel_size, "full": args.full,
            "seed": args.seed}
    try:
        import torch
        ref_name = f"torch {torch.__version__}"
    except ImportError:
        torch, ref_name = None, "torch"
    agree = _agreement({**base, "threads": None}) if torch is not None else {}
    shape = (f"T={args.frames} B={args.batch} D={args.dim} H={args.heads} F={args.ff_dim} "
             f"K={args.kernel_size}" + (" full" if args.full else " lengths T/2..T"))
    cases = []
    for n in args.threads:
        a = {**base, "threads": n}
        env = {"OPENBLAS_NUM_THREADS": n, "OMP_NUM_THREADS": n, "NUMBA_NUM_THREADS": n}
        ours = run_side(__name__, "asrkit", a, args.repeat, env=env)
        theirs = run_side(__name__, "torch", a, args.repeat, env=env) if torch else None
        t = ours["timing"]
        extra = {"asrkit_peak_MB": round(ours["peak_bytes"] / 2**20, 1)}
        ref_s = ref_q = None
        if theirs is not None:
            tt = theirs["timing"]
            ref_s, ref_q = tt["median"], (tt["q1"], tt["q3"])
            extra["torch_peak_MB"] = round(theirs["peak_bytes"] / 2**20, 1)
        extra.update(agree)
        cases.append(Case(f"conformer block fwd+bwd, {n} thread{'s' if n > 1 else ''}",
                          t["median"], f"{ref_name} ESPnet block", ref_s, extra,
                          asrkit_spread=(t["q1"], t["q3"]), reference_spread=ref_q))
    if cases:
        cases[0].extra = {"shape": shape, **cases[0].extra}
    return cases
