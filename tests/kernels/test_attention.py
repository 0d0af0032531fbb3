"""Attention kernels against torch (``scaled_dot_product_attention`` with masks,
``nn.MultiheadAttention``, a torch re-implementation of ESPnet's rel-pos attention), the CPU kernel
against the numpy twin, directional finite differences in float64, and padding invariance."""

import json

import numpy as np
import pytest
import torch

from asrkit.bench.attention import espnet_modules
from asrkit.cli.main import main
from asrkit.kernels import (
    attention_backward,
    attention_forward,
    attention_mask,
    mhsa_backward,
    mhsa_forward,
)
from asrkit.kernels.cpu import _gemm
from asrkit.kernels.cpu import attention as cpu_attention

MASKS = {
    "padding": {},
    "causal": {"causal": True},
    "chunk": {"chunk_size": 3},
    "chunk+left": {"chunk_size": 2, "left_chunks": 1},
    "causal chunk+left": {"causal": True, "chunk_size": 4, "left_chunks": 0},
}
DEVICES = ["reference", "cpu"]


def rand(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def rel_params(rng, T, D, H, dtype=np.float32):
    return {"pos": 0.5 * rand(rng, 2 * T - 1, D, dtype=dtype),
            "pos_bias_u": 0.5 * rand(rng, H, D // H, dtype=dtype),
            "pos_bias_v": 0.5 * rand(rng, H, D // H, dtype=dtype)}


def padded_rows(T, lengths):
    """bool [T, B]: True on padded frames."""
    return np.arange(T)[:, None] >= np.asarray(lengths)[None, :]


def torch_mask(T, lengths, opts):
    """The kernels' mask for torch: ``[B, T, T]`` bool, padded queries allowed to see key 0 (a
    fully masked row is NaN in torch; those rows get no upstream gradient here)."""
    m = attention_mask(T, lengths, **opts)
    m[:, :, 0] |= padded_rows(T, lengths).T
    return torch.from_numpy(m)


def test_masks_are_wenet_chunk_masks_and_icefall_windows():
    """Chunked masks are WeNet's ``subsequent_chunk_mask`` (``num_left_chunks`` chunks of left
    context, -1 for all) written as a loop; causal is the lower triangle."""
    T = 11
    for size, left in ((3, None), (3, 1), (4, 0), (1, None)):
        want = np.zeros((T, T), bool)
        for i in range(T):
            start = 0 if left is None else max((i // size - left) * size, 0)
            ending = min((i // size + 1) * size, T)
            want[i, start:ending] = True
        got = attention_mask(T, None, chunk_size=size, left_chunks=left)[0]
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(attention_mask(T, causal=True)[0], np.tril(np.ones((T, T), bool)))
    m = attention_mask(5, np.array([5, 3]))
    assert m[0].all() and m[1, :3, :3].all() and not m[1, 3:].any() and not m[1, :, 3:].any()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mask", list(MASKS))
def test_core_matches_torch_sdpa(rng, device, mask):
    T, B, D, H = 9, 3, 8, 2
    d = D // H
    lengths = np.array([9, 4, 7])
    opts = MASKS[mask]
    q, k, v, r = (rand(rng, T, B, D) for _ in range(4))
    r[padded_rows(T, lengths)] = 0

    def heads(a):
        return torch.tensor(a).view(T, B, H, d).permute(1, 2, 0, 3).detach().requires_grad_()

    qt, kt, vt = heads(q), heads(k), heads(v)
    o = torch.nn.functional.scaled_dot_product_attention(
        qt, kt, vt, attn_mask=torch_mask(T, lengths, opts)[:, None])
    (o * torch.tensor(r).view(T, B, H, d).permute(1, 2, 0, 3)).sum().backward()

    def merged(a):
        return a.detach().permute(2, 0, 1, 3).reshape(T, B, D).numpy()

    out, cache = attention_forward(q, k, v, lengths, H, device=device, **opts)
    assert out.dtype == np.float32 and out.shape == (T, B, D)
    keep = ~padded_rows(T, lengths)[:, :, None]
    np.testing.assert_allclose(out, merged(o) * keep, atol=2e-6)
    assert not out[~keep[:, :, 0]].any()
    for name, ours, theirs in zip(("dq", "dk", "dv"), attention_backward(r, cache),
                                  (qt.grad, kt.grad, vt.grad)):
        np.testing.assert_allclose(ours, merged(theirs), atol=5e-6, err_msg=name)


@pytest.mark.parametrize("device", DEVICES)
def test_causal_core_matches_sdpa_is_causal(rng, device):
    T, B, D, H = 7, 2, 6, 3
    q, k, v, r = (rand(rng, T, B, D) for _ in range(4))
    ts = [torch.tensor(a).view(T, B, H, 2).permute(1, 2, 0, 3).detach().requires_grad_()
          for a in (q, k, v)]
    o = torch.nn.functional.scaled_dot_product_attention(*ts, is_causal=True)
    (o * torch.tensor(r).view(T, B, H, 2).permute(1, 2, 0, 3)).sum().backward()
    out, cache = attention_forward(q, k, v, None, H, device=device, causal=True)
    np.testing.assert_allclose(out, o.detach().permute(2, 0, 1, 3).reshape(T, B, D), atol=2e-6)
    for ours, t in zip(attention_backward(r, cache), ts):
        np.testing.assert_allclose(ours, t.grad.permute(2, 0, 1, 3).reshape(T, B, D), atol=5e-6)


def torch_mha(x, w, lengths, H, opts, r):
    """torch.nn.MultiheadAttention with asrkit's weights; returns y and the gradients of
    sum(y * r), named like mhsa_backward's results."""
    T, B, D = x.shape
    m = torch.nn.MultiheadAttention(D, H)
    with torch.no_grad():
        m.in_proj_weight.copy_(torch.tensor(w["w_in"]))
        m.in_proj_bias.copy_(torch.tensor(w["b_in"]))
        m.out_proj.weight.copy_(torch.tensor(w["w_out"]))
        m.out_proj.bias.copy_(torch.tensor(w["b_out"]))
    xt = torch.tensor(x, requires_grad=True)
    # a [B*H, T, T] boolean attn_mask, True = not allowed (torch's convention)
    allowed = torch_mask(T, lengths, opts).repeat_interleave(H, dim=0)
    y, _ = m(xt, xt, xt, attn_mask=~allowed, need_weights=False)
    (y * torch.tensor(r)).sum().backward()
    return y.detach().numpy(), {
        "dx": xt.grad.numpy(), "dw_in": m.in_proj_weight.grad.numpy(),
        "db_in": m.in_proj_bias.grad.numpy(), "dw_out": m.out_proj.weight.grad.numpy(),
        "db_out": m.out_proj.bias.grad.numpy()}


def layer_weights(rng, D, H, dtype=np.float32):
    s = 1 / np.sqrt(D)
    return {"w_in": s * rand(rng, 3 * D, D, dtype=dtype), "b_in": s * rand(rng, 3 * D, dtype=dtype),
            "w_out": s * rand(rng, D, D, dtype=dtype), "b_out": s * rand(rng, D, dtype=dtype)}


LAYER_GRADS = ("dx", "dw_in", "db_in", "dw_out", "db_out")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mask", ["padding", "causal", "chunk+left"])
def test_layer_matches_torch_multihead_attention(rng, device, mask):
    T, B, D, H = 8, 3, 12, 3
    lengths = np.array([5, 8, 2])
    opts = MASKS[mask]
    x, r = rand(rng, T, B, D), rand(rng, T, B, D)
    r[padded_rows(T, lengths)] = 0
    w = layer_weights(rng, D, H)
    y_ref, g_ref = torch_mha(x, w, lengths, H, opts, r)
    y, cache = mhsa_forward(x, w["w_in"], w["b_in"], w["w_out"], w["b_out"], H, lengths,
                            device=device, **opts)
    keep = ~padded_rows(T, lengths)[:, :, None]
    np.testing.assert_allclose(y, y_ref * keep, atol=2e-6)
    grads = dict(zip(LAYER_GRADS, mhsa_backward(r, cache)))
    for name in LAYER_GRADS:
        np.testing.assert_allclose(grads[name], g_ref[name], atol=1e-5, rtol=1e-5, err_msg=name)


def espnet_layer(x, w, rel, lengths, H, opts, r):
    """The torch ESPnet-style rel-pos module with asrkit's weights; y and the gradients."""
    T, B, D = x.shape
    pos_encoding, RelPositionMHA = espnet_modules(torch)
    m = RelPositionMHA(H, D)
    with torch.no_grad():
        for i, n in enumerate("qkv"):
            getattr(m, f"linear_{n}").weight.copy_(torch.tensor(w["w_in"][i * D:(i + 1) * D]))
            getattr(m, f"linear_{n}").bias.copy_(torch.tensor(w["b_in"][i * D:(i + 1) * D]))
        m.linear_out.weight.copy_(torch.tensor(w["w_out"]))
        m.linear_out.bias.copy_(torch.tensor(w["b_out"]))
        m.linear_pos.weight.copy_(torch.tensor(rel["w_pos"]))
        m.pos_bias_u.copy_(torch.tensor(rel["pos_bias_u"]))
        m.pos_bias_v.copy_(torch.tensor(rel["pos_bias_v"]))
    pos_emb = pos_encoding(T, D)
    xb = torch.tensor(x).permute(1, 0, 2).detach().requires_grad_()
    y = m(xb, pos_emb, torch_mask(T, lengths, opts))
    (y * torch.tensor(r).permute(1, 0, 2)).sum().backward()
    q, k, v = m.linear_q, m.linear_k, m.linear_v
    grads = {"dx": xb.grad.permute(1, 0, 2).numpy(),
             "dw_in": torch.cat([q.weight.grad, k.weight.grad, v.weight.grad]).numpy(),
             "db_in": torch.cat([q.bias.grad, k.bias.grad, v.bias.grad]).numpy(),
             "dw_out": m.linear_out.weight.grad.numpy(),
             "db_out": m.linear_out.bias.grad.numpy(),
             "dw_pos": m.linear_pos.weight.grad.numpy(),
             "dpos_bias_u": m.pos_bias_u.grad.numpy(), "dpos_bias_v": m.pos_bias_v.grad.numpy()}
    return y.detach().permute(1, 0, 2).numpy(), pos_emb[0].numpy(), grads


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mask", ["padding", "chunk", "causal chunk+left"])
def test_rel_pos_layer_matches_espnet(rng, device, mask):
    T, B, D, H = 7, 3, 8, 2
    lengths = np.array([7, 3, 5])
    opts = MASKS[mask]
    x, r = rand(rng, T, B, D), rand(rng, T, B, D)
    r[padded_rows(T, lengths)] = 0
    w = layer_weights(rng, D, H)
    rel = {"w_pos": rand(rng, D, D) / np.sqrt(D), "pos_bias_u": rand(rng, H, D // H),
           "pos_bias_v": rand(rng, H, D // H)}
    y_ref, pos_emb, g_ref = espnet_layer(x, w, rel, lengths, H, opts, r)
    y, cache = mhsa_forward(x, w["w_in"], w["b_in"], w["w_out"], w["b_out"], H, lengths,
                            device=device, pos_emb=pos_emb, **rel, **opts)
    keep = ~padded_rows(T, lengths)[:, :, None]
    np.testing.assert_allclose(y, y_ref * keep, atol=2e-6)
    names = LAYER_GRADS + ("dw_pos", "dpos_bias_u", "dpos_bias_v")
    grads = mhsa_backward(r, cache)
    assert len(grads) == len(names)
    for name, g in zip(names, grads):
        np.testing.assert_allclose(g, g_ref[name], atol=1e-5, rtol=1e-5, err_msg=name)


def test_rel_shift_is_espnets(rng):
    """The twin's index form of rel_shift equals ESPnet's pad-reshape-slice on [B, H, T, 2T-1]."""
    from asrkit.kernels.reference.attention import rel_shift, rel_unshift

    _, RelPositionMHA = espnet_modules(torch)
    x = rand(rng, 2, 3, 6, 11)
    np.testing.assert_array_equal(rel_shift(x), RelPositionMHA.rel_shift(torch.tensor(x)).numpy())
    g = rand(rng, 2, 3, 6, 6)  # the adjoint: <shift(x), g> == <x, unshift(g)>
    np.testing.assert_allclose((rel_shift(x) * g).sum(), (x * rel_unshift(g)).sum(), rtol=1e-5)


def directional_check(loss, args, grads, names, rng, eps=1e-6):
    """``<grad, v>`` against central differences of ``loss`` along a random direction v."""
    direction = {n: rng.standard_normal(args[n].shape) for n in names}
    plus = {**args, **{n: args[n] + eps * direction[n] for n in names}}
    minus = {**args, **{n: args[n] - eps * direction[n] for n in names}}
    numeric = (loss(plus) - loss(minus)) / (2 * eps)
    analytic = sum((grads[n] * direction[n]).sum() for n in names)
    assert abs(numeric - analytic) <= 1e-7 * max(1.0, abs(numeric)), (numeric, analytic)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mask", ["padding", "causal chunk+left"])
@pytest.mark.parametrize("rel", [False, True])
def test_core_gradients_by_finite_differences(rng, device, mask, rel):
    T, B, D, H = 6, 3, 6, 2
    lengths = np.array([6, 2, 4])
    args = {n: rand(rng, T, B, D, dtype=np.float64) for n in "qkv"}
    if rel:
        args.update(rel_params(rng, T, D, H, np.float64))
    names = list(args)
    r = rng.standard_normal((T, B, D))

    def forward(a):
        extra = {n: a[n] for n in ("pos", "pos_bias_u", "pos_bias_v") if n in a}
        return attention_forward(a["q"], a["k"], a["v"], lengths, H, device=device,
                                 **extra, **MASKS[mask])

    out, cache = forward(args)
    assert out.dtype == np.float64
    grads = dict(zip(names, attention_backward(r, cache)))
    directional_check(lambda a: (forward(a)[0] * r).sum(), args, grads, names, rng)


@pytest.mark.parametrize("device", DEVICES)
def test_layer_gradients_by_finite_differences(rng, device):
    T, B, D, H = 5, 2, 6, 3
    lengths = np.array([3, 5])
    args = {"x": rand(rng, T, B, D, dtype=np.float64), **layer_weights(rng, D, H, np.float64),
            "w_pos": rand(rng, D, D, dtype=np.float64) / 3,
            "pos_bias_u": rand(rng, H, D // H, dtype=np.float64),
            "pos_bias_v": rand(rng, H, D // H, dtype=np.float64)}
    pos_emb = rand(rng, 2 * T - 1, D, dtype=np.float64)
    names = ["x", "w_in", "b_in", "w_out", "b_out", "w_pos", "pos_bias_u", "pos_bias_v"]
    r = rng.standard_normal((T, B, D))

    def forward(a):
        return mhsa_forward(a["x"], a["w_in"], a["b_in"], a["w_out"], a["b_out"], H, lengths,
                            device=device, chunk_size=2, pos_emb=pos_emb, w_pos=a["w_pos"],
                            pos_bias_u=a["pos_bias_u"], pos_bias_v=a["pos_bias_v"])

    y, cache = forward(args)
    grads = dict(zip(names, mhsa_backward(r, cache)))
    directional_check(lambda a: (forward(a)[0] * r).sum(), args, grads, names, rng)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("rel", [False, True])
def test_cpu_matches_twin(rng, monkeypatch, dtype, threads, mask, rel):
    """Ragged lengths (one empty sequence), several query blocks (4 queries each), strided
    inputs (thirds of one [T, B, 3D] array, as the layer passes them)."""
    monkeypatch.setattr(cpu_attention, "QUERY_BLOCK", 4)
    T, B, D, H = 11, 4, 12, 3
    lengths = np.array([11, 0, 6, 9])
    qkv = rand(rng, T, B, 3 * D, dtype=dtype)
    q, k, v = qkv[..., :D], qkv[..., D:2 * D], qkv[..., 2 * D:]
    extra = {**MASKS[mask], **(rel_params(rng, T, D, H, dtype) if rel else {})}
    dout = rand(rng, T, B, D, dtype=dtype)
    ref, ref_cache = attention_forward(q, k, v, lengths, H, device="reference", **extra)
    out, cache = attention_forward(q, k, v, lengths, H, device="cpu", threads=threads, **extra)
    tol = 1e-12 if dtype == np.float64 else 2e-6
    assert out.dtype == dtype
    np.testing.assert_allclose(out, ref, atol=tol, rtol=tol)
    for i, (a, b) in enumerate(zip(attention_backward(dout, cache),
                                   attention_backward(dout, ref_cache), strict=True)):
        np.testing.assert_allclose(a, b, atol=10 * tol, rtol=10 * tol, err_msg=str(i))


def test_cpu_layer_matches_twin_with_several_threads(rng):
    T, B, D, H = 10, 5, 8, 2
    lengths = np.array([10, 3, 7, 1, 10])
    w = layer_weights(rng, D, H)
    x, dy = rand(rng, T, B, D), rand(rng, T, B, D)
    pos_emb = rand(rng, 2 * T - 1, D)
    rel = {"pos_emb": pos_emb, "w_pos": rand(rng, D, D) / 3,
           "pos_bias_u": rand(rng, H, D // H), "pos_bias_v": rand(rng, H, D // H)}
    args = (x, w["w_in"], w["b_in"], w["w_out"], w["b_out"], H, lengths)
    y0, c0 = mhsa_forward(*args, device="reference", causal=True, **rel)
    y1, c1 = mhsa_forward(*args, device="cpu", threads=4, causal=True, **rel)
    np.testing.assert_allclose(y1, y0, atol=2e-6)
    for a, b in zip(mhsa_backward(dy, c1), mhsa_backward(dy, c0), strict=True):
        np.testing.assert_allclose(a, b, atol=2e-5, rtol=1e-5)


def test_cpu_groups_in_one_thread_without_thread_local_blas(rng, monkeypatch):
    """Where OpenBLAS has no thread-local thread count the groups run in turn: same results."""
    monkeypatch.setattr(_gemm, "blas_threads_local", lambda: None)
    T, B, D, H = 6, 3, 4, 2
    lengths = np.array([6, 4, 5])
    x, dy = rand(rng, T, B, D), rand(rng, T, B, D)
    w = layer_weights(rng, D, H)
    args = (x, w["w_in"], w["b_in"], w["w_out"], w["b_out"], H, lengths)
    y0, c0 = mhsa_forward(*args, device="reference")
    y1, c1 = mhsa_forward(*args, device="cpu", threads=3)
    np.testing.assert_allclose(y1, y0, atol=2e-6)
    for a, b in zip(mhsa_backward(dy, c1), mhsa_backward(dy, c0), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_softmax_exp_is_accurate_over_its_range():
    from numba import njit

    @njit
    def exps(x):
        out = np.empty_like(x)
        for i in range(x.size):
            out[i] = cpu_attention.fast_exp(x[i])
        return out

    x = np.linspace(-87, 0, 200001).astype(np.float32)
    rel_err = np.abs(exps(x) / np.exp(x.astype(np.float64)) - 1)
    assert rel_err.max() < 2e-7


@pytest.mark.parametrize("device", DEVICES)
def test_padded_values_change_nothing(rng, device):
    """Padded frames of the inputs (even inf and NaN) and of the upstream gradient reach no
    output and no gradient: results are bit-identical."""
    T, B, D, H = 7, 3, 8, 2
    lengths = np.array([7, 2, 5])
    pad = padded_rows(T, lengths)
    w = layer_weights(rng, D, H)
    x, dy = rand(rng, T, B, D), rand(rng, T, B, D)
    rel = {"pos_emb": rand(rng, 2 * T - 1, D), "w_pos": rand(rng, D, D) / 3,
           "pos_bias_u": rand(rng, H, D // H), "pos_bias_v": rand(rng, H, D // H)}

    def run(x, dy):
        y, c = mhsa_forward(x, w["w_in"], w["b_in"], w["w_out"], w["b_out"], H, lengths,
                            device=device, chunk_size=3, **rel)
        return (y, *mhsa_backward(dy, c))

    base = run(x, dy)
    x2, dy2 = x.copy(), dy.copy()
    x2[pad] = rand(rng, int(pad.sum()), D) * 1e3
    x2[6, 1, 0], x2[5, 2, 1] = np.inf, np.nan
    dy2[pad] = np.nan
    for a, b in zip(base, run(x2, dy2), strict=True):
        np.testing.assert_array_equal(a, b)
    assert not base[0][pad].any() and not base[1][pad].any()   # y and dx
    q, k, v = rand(rng, T, B, D), rand(rng, T, B, D), rand(rng, T, B, D)
    out, c = attention_forward(q, k, v, lengths, H, device=device)
    g = attention_backward(dy, c)
    for a in (q, k, v):
        a[pad] = np.nan
    out2, c2 = attention_forward(q, k, v, lengths, H, device=device)
    np.testing.assert_array_equal(out, out2)
    for a, b in zip(g, attention_backward(dy2, c2), strict=True):
        np.testing.assert_array_equal(a, b)


def test_cpu_without_blas_matches_twin(rng, monkeypatch):
    """numba's fallback GEMM (no CBLAS found) with its transposed operands."""
    monkeypatch.setenv("ASRKIT_LSTM_GEMM", "numba")
    monkeypatch.setattr(cpu_attention, "QUERY_BLOCK", 3)
    T, B, D, H = 8, 2, 6, 2
    lengths = np.array([8, 5])
    q, k, v, dout = (rand(rng, T, B, D) for _ in range(4))
    extra = {"causal": True, **rel_params(rng, T, D, H)}
    ref, rc = attention_forward(q, k, v, lengths, H, device="reference", **extra)
    out, cc = attention_forward(q, k, v, lengths, H, device="cpu", **extra)
    np.testing.assert_allclose(out, ref, atol=2e-6)
    for a, b in zip(attention_backward(dout, cc), attention_backward(dout, rc), strict=True):
        np.testing.assert_allclose(a, b, atol=2e-5)


def test_bad_input_gives_clear_errors(rng):
    T, B, D = 4, 2, 6
    q = rand(rng, T, B, D)
    with pytest.raises(ValueError, match="num_heads=4 does not divide the model size D=6"):
        attention_forward(q, q, q, None, 4)
    with pytest.raises(ValueError, match=r"lengths\[1\] = 5 is outside"):
        attention_forward(q, q, q, np.array([4, 5]), 2)
    with pytest.raises(ValueError, match="k has shape"):
        attention_forward(q, q[:3], q, None, 2)
    with pytest.raises(ValueError, match=r"pos has shape \(2, 6\), expected \(7, 6\)"):
        attention_forward(q, q, q, None, 2, pos=q[0], pos_bias_u=np.zeros((2, 3)),
                          pos_bias_v=np.zeros((2, 3)))
    with pytest.raises(ValueError, match="pos_bias_v is needed"):
        attention_forward(q, q, q, None, 2, pos=np.zeros((7, 6)), pos_bias_u=np.zeros((2, 3)))
    with pytest.raises(ValueError, match="left_chunks=1 needs a chunk_size"):
        attention_forward(q, q, q, None, 2, left_chunks=1)
    with pytest.raises(ValueError, match="chunk_size=0 must be a positive"):
        attention_forward(q, q, q, None, 2, chunk_size=0)
    with pytest.raises(ValueError, match="w_in has shape"):
        mhsa_forward(q, np.zeros((6, 6)), None, np.zeros((6, 6)), None, 2)
    with pytest.raises(ValueError, match="w_pos is needed"):
        mhsa_forward(q, np.zeros((18, 6)), None, np.zeros((6, 6)), None, 2,
                     pos_emb=np.zeros((7, 6)), pos_bias_u=np.zeros((2, 3)),
                     pos_bias_v=np.zeros((2, 3)))
    _, cache = attention_forward(q, q, q, None, 2, device="cpu")
    with pytest.raises(ValueError, match="cache is from device 'cpu'"):
        attention_backward(q, cache, device="reference")


@pytest.mark.slow
def test_bench_attention_json_reports_all_cases(capsys):
    assert main(["bench", "attention", "--json", "--repeat", "1", "--frames", "12", "--batch",
                 "2", "--dim", "8", "--heads", "2", "--threads", "1"]) == 0
    cases = json.loads(capsys.readouterr().out)["cases"]
    assert len(cases) == 3
    for case in cases:
        assert case["asrkit_s"] > 0 and case["reference_s"] > 0
        assert float(case["extra"]["out_max_abs_diff"]) < 1e-5
        assert float(case["extra"]["grad_max_abs_diff"]) < 1e-5
        assert case["extra"]["asrkit_peak_MB"] >= 0
