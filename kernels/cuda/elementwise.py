"""Element-wise maths on CUDA: one unary and one binary kernel pair, generated from the table.

Each kernel holds one branch per row of :mod:`asrkit.kernels.elementwise` (``code`` picks the
row; the row's scalar function is compiled as a device function), so every op shares one launch
path. Values go through float64 registers and are stored in the output's dtype.

Binary operands whose shape is a suffix of the output's (a bias ``[D]`` on ``[T, B, D]``) are
read modulo their size; other broadcasts are materialised first (a strided gather). The GLU
has a kernel pair of its own over ``x`` seen as ``[R, 2, M]`` (the halves of its axis).
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from asrkit.kernels.cuda.layout import (
    broadcast_to,
    contiguous,
    empty,
    flat,
    launch,
    suffix_broadcasts,
)
from asrkit.kernels.elementwise import BINARY, UNARY, sigmoid

UNARY_CODE = {name: k for k, name in enumerate(UNARY)}
BINARY_CODE = {name: k for k, name in enumerate(BINARY)}


def _kernel(name, params, reads, args, fns):
    """A ``@cuda.jit`` kernel ``name(code, *params)``: thread ``i < out.size`` runs the
    statements ``reads``, then ``r = f<code>(args)`` for table row ``code`` (rows whose
    function is None have no branch) and stores ``out[i] = r``."""
    lines = [f"def {name}(code, {', '.join(params)}):", "    i = cuda.grid(1)",
             "    if i < out.size:", *[f"        {s}" for s in reads], "        r = 0.0"]
    rows = [k for k, fn in enumerate(fns) if fn is not None]
    for j, k in enumerate(rows):
        lines += [f"        {'elif' if j else 'if'} code == {k}:", f"            r = f{k}({args})"]
    lines.append("        out[i] = r")
    ns = {"cuda": cuda, **{f"f{k}": cuda.jit(device=True)(fns[k]) for k in rows}}
    exec(compile("\n".join(lines), f"<asrkit.kernels.cuda.elementwise.{name}>", "exec"), ns)
    return cuda.jit(ns[name])


_unary_fwd = _kernel("unary_fwd", ("x", "p", "q", "out"), ["v = float(x[i])"], "v, p, q",
                     [r.fwd for r in UNARY.values()])
_unary_bwd = _kernel("unary_bwd", ("g", "x", "y", "p", "q", "out"),
                     ["gi = float(g[i])", "u = float(x[i])", "w = float(y[i])"],
                     "gi, u, w, p, q", [r.grad for r in UNARY.values()])
_READ_AB = ["u = float(a[i % a.size])", "v = float(b[i % b.size])"]
_binary_fwd = _kernel("binary_fwd", ("a", "b", "out"), _READ_AB, "u, v",
                      [r.fwd for r in BINARY.values()])
# gradients of both sides in one kernel: row k's gradient for a is code 2k, for b 2k + 1
# (pass-through gradients, None, have no branch)
_binary_bwd = _kernel("binary_bwd", ("g", "a", "b", "y", "out"),
                      ["gi = float(g[i])", *_READ_AB, "w = float(y[i % y.size])"], "gi, u, v, w",
                      [fn for r in BINARY.values() for fn in (r.grad_a, r.grad_b)])


def _floats(*arrays):
    return all(a is None or np.dtype(a.dtype).kind == "f" for a in arrays)


def unary(name, x, p=0.0, q=0.0, out=None):
    """Forward of unary row ``name`` on float device array ``x``."""
    if not _floats(x):
        raise ValueError(f"elementwise {name} (cuda): need a float array, got {x.dtype}")
    out = empty(x.shape, x.dtype) if out is None else out
    if x.size:
        _unary_fwd[launch(x.size)](UNARY_CODE[name], flat(contiguous(x)), float(p), float(q),
                                   flat(out))
    return out


def unary_grad(name, g, x, y, p=0.0, q=0.0, out=None):
    """Gradient of unary row ``name``; ``x``/``y`` of g's shape or None when unread."""
    out = empty(g.shape, g.dtype) if out is None else out
    if g.size:
        g = flat(contiguous(g))
        x, y = (g if a is None else flat(_cast(contiguous(a), g.dtype)) for a in (x, y))
        _unary_bwd[launch(g.size)](UNARY_CODE[name], g, x, y, float(p), float(q), flat(out))
    return out


def _cast(a, dtype):
    return a if a.dtype == dtype else broadcast_to(a, tuple(a.shape), dtype)


def _operands(shape, dtype, *arrays):
    """Each array as a flat suffix of ``shape`` in ``dtype`` (general broadcasts materialised);
    None stays None."""
    out = []
    for a in arrays:
        if a is not None and not hasattr(a, "copy_to_host"):  # a host constant
            a = cuda.to_device(np.ascontiguousarray(a))
        if a is None:
            out.append(None)
        elif suffix_broadcasts(a.shape, shape) and a.dtype == dtype:
            out.append(flat(contiguous(a)))
        else:
            out.append(flat(broadcast_to(a, shape, dtype)))
    return out


def binary(name, a, b, out=None):
    """Forward of binary row ``name`` with numpy broadcasting (float device arrays)."""
    if not _floats(a, b):
        raise ValueError(f"elementwise {name} (cuda): need float arrays, got {a.dtype}, "
                         f"{b.dtype}")
    shape = np.broadcast_shapes(tuple(a.shape), tuple(b.shape))
    dtype = np.result_type(a.dtype, b.dtype)
    out = empty(shape, dtype) if out is None else out
    if out.size:
        a, b = _operands(shape, dtype, a, b)
        _binary_fwd[launch(out.size)](BINARY_CODE[name], a, b, flat(out))
    return out


def binary_grad(name, g, a, b, y, want=(True, True), out=None):
    """Gradients ``(ga, gb)`` of binary row ``name`` at g's shape (new arrays; a pass-through
    gradient is ``g`` itself). ``out`` is ignored (the cpu writes ``ga`` there)."""
    row = BINARY[name]
    shape = tuple(g.shape)
    grads = []
    ops = None
    for side, fn, w in zip("ab", (row.grad_a, row.grad_b), want):
        if not w:
            grads.append(None)
        elif fn is None:
            grads.append(g)
        else:
            if ops is None:
                gf = flat(contiguous(g)) if g.size else g
                ops = [gf, *[gf if v is None else v
                             for v in _operands(shape, g.dtype, a, b, y)]]
            res = empty(shape, g.dtype)
            if g.size:
                code = 2 * BINARY_CODE[name] + "ab".index(side)
                _binary_bwd[launch(g.size)](code, *ops, flat(res))
            grads.append(res)
    return tuple(grads)


_sigmoid = cuda.jit(device=True)(sigmoid)


@cuda.jit
def _glu_fwd(x, M, out):
    i = cuda.grid(1)
    if i < out.size:
        j = (i // M) * 2 * M + i % M
        out[i] = float(x[j]) * _sigmoid(float(x[j + M]), 0.0, 0.0)


@cuda.jit
def _glu_bwd(g, x, M, out):
    i = cuda.grid(1)
    if i < g.size:
        j = (i // M) * 2 * M + i % M
        s = _sigmoid(float(x[j + M]), 0.0, 0.0)
        gi = float(g[i])
        out[j] = gi * s
        out[j + M] = gi * float(x[j]) * s * (1.0 - s)


def _halves(shape, axis):
    """``(shape with axis halved, M)``: x seen as ``[R, 2, M]``."""
    shape = list(int(d) for d in shape)
    axis = axis % len(shape)
    shape[axis] //= 2
    return shape, int(np.prod(shape[axis:], dtype=np.int64))


def glu(x, axis=-1):
    """Gated linear unit ``a * sigmoid(b)`` of the halves of ``axis`` (float device array)."""
    if not _floats(x):
        raise ValueError(f"glu (cuda): need a float array, got {x.dtype}")
    shape, M = _halves(x.shape, axis)
    out = empty(shape, x.dtype)
    if out.size:
        _glu_fwd[launch(out.size)](flat(contiguous(x)), M, flat(out))
    return out


def glu_backward(g, x, axis=-1):
    """Gradient of :func:`glu` with respect to ``x`` (x's shape, g's dtype)."""
    _, M = _halves(x.shape, axis)
    out = empty(tuple(x.shape), g.dtype)
    if g.size:
        _glu_bwd[launch(g.size)](flat(contiguous(g)), flat(_cast(contiguous(x), g.dtype)), M,
                                 flat(out))
    return out
