"""The fused LSTM op: one direction over a padded batch, through ``asrkit.kernels``.

Weights follow torch.nn.LSTM (gate order i, f, g, o; ``w_ih [4H, I]``, ``w_hh [4H, P]``,
optional projection ``w_hr [P, H]``), so parameters move between the two unchanged. Sequences
stop at their own lengths (packed semantics); ``reverse=True`` runs each sequence backwards from
its own last frame. Float64 runs (gradient checks) use the kernels' numpy reference twins.
"""

from __future__ import annotations

import importlib

import numpy as np

from asrkit.graph.node import bind
from asrkit.graph.primitive import Primitive, Type
from asrkit.ops._rules import float_dtype, require_sequence


def _kernels(device: str, dtype):
    """Return ``(lstm_forward, lstm_backward, device)`` for this run."""
    if np.dtype(dtype) == np.float64 or device == "reference":
        ref = importlib.import_module("asrkit.kernels.reference.lstm")
        return ref.lstm_forward, ref.lstm_backward, None
    try:
        mod = importlib.import_module("asrkit.kernels.lstm")
    except ModuleNotFoundError:  # the dispatcher has not landed: the numpy twin is exact
        ref = importlib.import_module("asrkit.kernels.reference.lstm")
        return ref.lstm_forward, ref.lstm_backward, None
    return mod.lstm_forward, mod.lstm_backward, device


def _rule(prim, x, h0, c0, w_ih, w_hh, b_ih, b_hh, *w_hr, reverse=False):
    nodes = [x, h0, c0, w_ih, w_hh, b_ih, b_hh, *w_hr]
    require_sequence(prim, x)
    if len(x.shape) != 3:
        raise prim.error(nodes, "x must be [T, B, input_size]")
    for w in nodes[3:]:
        if w.dynamic_axes:
            raise prim.error(nodes, "weights and biases must be static")
    if len(w_ih.shape) != 2 or w_ih.shape[0] % 4:
        raise prim.error(nodes, "w_ih must be [4H, input_size]")
    H = w_ih.shape[0] // 4
    P = w_hr[0].shape[0] if w_hr else H
    if w_ih.shape[1] != x.shape[2]:
        raise prim.error(nodes, f"input size {x.shape[2]} and w_ih's {w_ih.shape[1]} differ")
    if w_hh.shape != (4 * H, P):
        raise prim.error(nodes, f"w_hh must be [{4 * H}, {P}]")
    if b_ih.shape != (4 * H,) or b_hh.shape != (4 * H,):
        raise prim.error(nodes, f"b_ih and b_hh must be [{4 * H}]")
    if w_hr and w_hr[0].shape != (P, H):
        raise prim.error(nodes, f"w_hr must be [proj, {H}]")
    for s, size in [(h0, P), (c0, H)]:
        static = s.shape[len(s.dynamic_axes):]
        if s.is_sequence or static not in ((), (1,), (size,)):
            raise prim.error(nodes, f"initial states must be scalars, [{P}]/[{H}] or per-sequence"
                             " [B, size]")
    return Type((None, None, P), x.dynamic_axes, float_dtype(x, w_ih))


def _fwd(ctx, x, h0, c0, w_ih, w_hh, b_ih, b_hh, *w_hr, reverse=False):
    B = x.shape[1]
    H = w_ih.shape[0] // 4
    P = w_hr[0].shape[0] if w_hr else H
    dt = np.result_type(x, w_ih)
    fwd, _, dev = _kernels(ctx.device, dt)
    h0 = np.ascontiguousarray(np.broadcast_to(h0, (B, P)), dt)
    c0 = np.ascontiguousarray(np.broadcast_to(c0, (B, H)), dt)
    kwargs = {"lengths": ctx.in_lengths[0]}
    if reverse:
        kwargs["reverse"] = True
    if w_hr:
        kwargs["w_hr"] = w_hr[0]
    if dev is not None:
        kwargs["device"] = dev
    y, _, _, cache = fwd(np.ascontiguousarray(x, dt), h0, c0, w_ih, w_hh, b_ih, b_hh, **kwargs)
    return y, cache


def _bwd(ctx, g, y, x, h0, c0, w_ih, w_hh, b_ih, b_hh, *w_hr, reverse=False, state=None):
    _, bwd, _ = _kernels(ctx.device, g.dtype)
    grads = bwd(np.ascontiguousarray(g), None, None, state)
    return tuple(grads)


def _host(a):
    return a.copy_to_host() if hasattr(a, "copy_to_host") else np.asarray(a)


def _cuda_fwd(ctx, x, h0, c0, w_ih, w_hh, b_ih, b_hh, *w_hr, reverse=False):
    from numba import cuda

    from asrkit.kernels.lstm import lstm_forward

    B = tuple(x.shape)[1]
    H = tuple(w_ih.shape)[0] // 4
    P = w_hr[0].shape[0] if w_hr else H
    h0 = cuda.to_device(np.ascontiguousarray(np.broadcast_to(_host(h0), (B, P)), x.dtype))
    c0 = cuda.to_device(np.ascontiguousarray(np.broadcast_to(_host(c0), (B, H)), x.dtype))
    y, _, _, cache = lstm_forward(x, h0, c0, w_ih, w_hh, b_ih, b_hh,
                                  lengths=np.asarray(ctx.in_lengths[0]), device="cuda",
                                  reverse=reverse, w_hr=w_hr[0] if w_hr else None)
    return y, cache


def _cuda_bwd(ctx, g, y, x, h0, c0, w_ih, w_hh, b_ih, b_hh, *w_hr, reverse=False, state=None):
    from asrkit.kernels.lstm import lstm_backward

    return tuple(lstm_backward(g, None, None, state, device="cuda"))


# The kernel's cache holds x, the weights and (CPU) the output y, whose frames are the h_prev of
# dW_hh: keep them alive (and out of reusable slots) until the backward pass, so needs names
# every input and "out".
lstm_p = Primitive("lstm", ("x", "h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh", "w_hr"), _rule, _fwd,
                   _bwd, needs=(*range(8), "out"), stateful=True, cuda=_cuda_fwd,
                   cuda_backward=_cuda_bwd)


def lstm(x, w_ih, w_hh, b_ih, b_hh, w_hr=None, h0=0.0, c0=0.0, reverse=False, name=""):
    """One LSTM direction: ``x [T, B, I] -> y [T, B, P]`` (P = H, or the projection size).

    w_ih ``[4H, I]``, w_hh ``[4H, P]``, b_ih/b_hh ``[4H]``, w_hr ``[P, H]`` or None; h0/c0:
    scalars, static ``[P]``/``[H]`` or per-sequence ``[B, P]``/``[B, H]`` nodes (learnable
    initial states get gradients). Output frames past a sequence's length are zero.
    """
    inputs = [x, h0, c0, w_ih, w_hh, b_ih, b_hh] + ([w_hr] if w_hr is not None else [])
    return bind(lstm_p, inputs, name=name, reverse=bool(reverse))


# -- both directions in one op -----------------------------------------------------------------
_WEIGHTS = ("w_ih", "w_hh", "b_ih", "b_hh", "w_hr")


def _blstm_split(ws):
    """``[w_ih_f, w_ih_b, w_hh_f, ...]`` -> ``{name: (forward, reverse)}``."""
    return {name: (ws[2 * k], ws[2 * k + 1]) for k, name in enumerate(_WEIGHTS[:len(ws) // 2])}


def _blstm_rule(prim, x, h0, c0, *ws):
    if len(ws) not in (8, 10):
        raise prim.error([x, h0, c0, *ws], "blstm takes 4 or 5 weight pairs (forward, reverse)")
    d = _blstm_split(ws)
    for k in (0, 1):
        one = [d[n][k] for n in _WEIGHTS if n in d]
        t = _rule(prim, x, h0, c0, *one[:4], *one[4:])
    return Type(t.shape[:2] + (2 * t.shape[2],), t.dynamic_axes, t.dtype)


def _blstm_kernels(device, dtype):
    if np.dtype(dtype) == np.float64 or device == "reference":
        return "reference"
    return device


def _blstm_fwd(ctx, x, h0, c0, *ws):
    from asrkit.kernels import blstm_forward

    B = x.shape[1]
    d = _blstm_split(ws)
    H = d["w_ih"][0].shape[0] // 4
    P = d["w_hr"][0].shape[0] if "w_hr" in d else H
    dt = np.result_type(x, d["w_ih"][0])
    h0 = np.ascontiguousarray(np.broadcast_to(h0, (2, B, P)), dt)
    c0 = np.ascontiguousarray(np.broadcast_to(c0, (2, B, H)), dt)
    stacked = {n: np.stack(pair).astype(dt, copy=False) for n, pair in d.items()}
    y, _, _, cache = blstm_forward(
        np.ascontiguousarray(x, dt), h0, c0, stacked["w_ih"], stacked["w_hh"], stacked["b_ih"],
        stacked["b_hh"], ctx.in_lengths[0], device=_blstm_kernels(ctx.device, dt),
        w_hr=stacked.get("w_hr"))
    return y, cache


def _blstm_bwd(ctx, g, y, x, h0, c0, *ws, state=None):
    from asrkit.kernels import blstm_backward

    grads = blstm_backward(np.ascontiguousarray(g), None, None, state)
    dx, dh0, dc0, *dws = grads
    out = [dx, dh0, dc0]  # [2, B, P] state gradients: the engine sums them onto h0's shape
    for dw in dws:
        out += [dw[0], dw[1]]
    return tuple(out)


def _halves(T, B, P, d):
    """Where direction ``d``'s ``[T, B, P]`` lies in a ``[T, B, 2P]`` array (strides, offset)."""
    return (B * 2 * P, 2 * P, 1), d * P


def _blstm_cuda_fwd(ctx, x, h0, c0, *ws):
    from asrkit.kernels.cuda.layout import empty, flat, scatter

    n = len(ws) // 2
    outs, caches = [], []
    for d in (0, 1):
        y, cache = _cuda_fwd(ctx, x, h0, c0, *[ws[2 * k + d] for k in range(n)],
                             reverse=bool(d))
        outs.append(y)
        caches.append(cache)
    T, B, P = tuple(outs[0].shape)
    out = empty((T, B, 2 * P), outs[0].dtype)
    for d, y in enumerate(outs):
        scatter(y, flat(out), *_halves(T, B, P, d), accumulate=False)
    return out, caches


def _blstm_cuda_bwd(ctx, g, y, x, h0, c0, *ws, state=None):
    from asrkit.kernels import elementwise as ew
    from asrkit.kernels.cuda.layout import gather
    from asrkit.kernels.lstm import lstm_backward

    T, B, P2 = tuple(g.shape)
    grads = [lstm_backward(gather(g, (T, B, P2 // 2), *_halves(T, B, P2 // 2, d)), None, None,
                           state[d], device="cuda") for d in (0, 1)]
    (dxf, dhf, dcf, *wf), (dxb, dhb, dcb, *wb) = grads
    out = [ew.binary("add", a, b, device="cuda") for a, b in ((dxf, dxb), (dhf, dhb), (dcf, dcb))]
    for a, b in zip(wf, wb):
        out += [a, b]
    return tuple(out)


blstm_p = Primitive(
    "blstm", ("x", "h0", "c0", "w_ih", "w_ih_reverse", "w_hh", "w_hh_reverse", "b_ih",
              "b_ih_reverse", "b_hh", "b_hh_reverse", "w_hr", "w_hr_reverse"),
    _blstm_rule, _blstm_fwd, _blstm_bwd, needs=(*range(13), "out"), stateful=True,
    cuda=_blstm_cuda_fwd, cuda_backward=_blstm_cuda_bwd)


def blstm(x, forward: dict, reverse: dict, h0=0.0, c0=0.0, name=""):
    """Both LSTM directions in one op: ``x [T, B, I] -> [T, B, 2P]`` (forward features first).

    forward, reverse: ``{"w_ih", "w_hh", "b_ih", "b_hh"[, "w_hr"]}`` nodes of each direction
    (torch's ``..._l0`` and ``..._l0_reverse``). Runs the kernels' ``blstm_forward``, which
    overlaps the two directions on machines with 4+ cores. Equal to
    ``splice(lstm(x, **forward), lstm(x, **reverse, reverse=True))``.
    """
    names = [n for n in _WEIGHTS if n in forward]
    if set(names) != set(forward) or set(names) != set(reverse) or len(names) < 4:
        raise TypeError("blstm: both directions need w_ih, w_hh, b_ih, b_hh (and w_hr or not)")
    ws = [w for n in names for w in (forward[n], reverse[n])]
    return bind(blstm_p, [x, h0, c0, *ws], name=name)
