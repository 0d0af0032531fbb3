"""Element-wise learner updates on CUDA (numba.cuda): the rules of ``asrkit.learners.rules``
fused with the Trainer's gradient preparation, on device arrays.

Each update kernel takes one parameter ``p``, its raw gradient ``g`` (the minibatch's summed
gradient, not modified) and its slots, all float32 device arrays of one shape, and per entry

    x = g * gscale                         (1 / frames: the per-frame mean)
    x = clip(x, -clip_value, clip_value)   (when clip_value > 0)
    x = x * nscale                         (the global-norm clip's factor, 1 when not clipping)
    x = x + l2 * p                         (when l2 != 0)

then the rule, in the float32 operations and order of the numpy rules, so CPU and GPU agree to
rounding (the GPU may fuse a multiply-add). ``global_sumsq`` is the device reduction the norm
clip needs: the sum of squares of ``clip(g * gscale)`` over all gradients (float32 squares, as
numpy's ``vdot``, summed in float64) and the count of non-finite entries, as one small array
copied to the host. Its block and grid sizes are fixed, so the sum is deterministic: a resumed
run repeats an uninterrupted one.
"""

from __future__ import annotations

import math

import numpy as np

from asrkit.kernels._device import DeviceUnavailableError, cuda_simulated

try:
    from numba import cuda, float64
except ImportError as e:  # pragma: no cover - depends on the install
    raise DeviceUnavailableError(
        "device='cuda' needs numba-cuda: pip install 'asrkit[cuda]'") from e

THREADS = 8 if cuda_simulated() else 256  # element-wise kernels
RED_THREADS = 8 if cuda_simulated() else 256  # a power of two, for the tree reduction
RED_BLOCKS = 2 if cuda_simulated() else 64  # blocks per gradient in the reduction (grid-stride)

f32 = np.float32


def _grid(n: int) -> int:
    return max(1, math.ceil(n / THREADS))


def _flat(a, written: bool = True):
    """A 1-D view of a C-contiguous device array. A strided gradient (read only) is copied
    through the host, as ``asrkit.kernels.cuda.layout.contiguous`` does; the graph's own results are
    contiguous, so this only meets foreign views. Arrays written in place must be contiguous."""
    if not a.is_c_contiguous():
        if written:
            raise ValueError(f"learner update (cuda): a parameter or slot of shape "
                             f"{tuple(a.shape)} is not C-contiguous")
        a = cuda.to_device(np.ascontiguousarray(a.copy_to_host()))
    return a.reshape(a.size) if len(a.shape) != 1 else a


def _check(name: str, p, *others) -> None:
    if np.dtype(p.dtype) != np.float32:
        raise ValueError(f"{name} (cuda): parameters must be float32, got {p.dtype}")
    for o in others:
        if tuple(o.shape) != tuple(p.shape) or np.dtype(o.dtype) != np.float32:
            raise ValueError(f"{name} (cuda): every array must be float32 of shape "
                             f"{tuple(p.shape)}, got {o.dtype} {tuple(o.shape)}")


# ---- the global norm -------------------------------------------------------------------------

@cuda.jit(device=True)
def _block_sum2(ss, sb, tid, acc, bad):
    """Tree-sum each thread's ``acc`` and ``bad`` over the block into ``ss[0]`` and ``sb[0]``
    (shared float64 [RED_THREADS]); every thread of the block must call it."""
    ss[tid] = acc
    sb[tid] = bad
    cuda.syncthreads()
    s = RED_THREADS // 2
    while s > 0:
        if tid < s:
            ss[tid] += ss[tid + s]
            sb[tid] += sb[tid + s]
        cuda.syncthreads()
        s //= 2


@cuda.jit
def _sumsq_partial(g, gscale, clip, out, row0):
    ss = cuda.shared.array(RED_THREADS, float64)
    sb = cuda.shared.array(RED_THREADS, float64)
    tid = cuda.threadIdx.x
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    acc = 0.0
    bad = 0.0
    while i < g.size:
        x = g[i]
        if math.isfinite(x):
            y = x * gscale
            if clip > 0:
                y = min(max(y, -clip), clip)
            acc += y * y
        else:
            bad += 1.0
        i += stride
    _block_sum2(ss, sb, tid, acc, bad)
    if tid == 0:
        out[row0 + cuda.blockIdx.x, 0] = ss[0]
        out[row0 + cuda.blockIdx.x, 1] = sb[0]


@cuda.jit
def _sum_rows(partial, out):
    ss = cuda.shared.array(RED_THREADS, float64)
    sb = cuda.shared.array(RED_THREADS, float64)
    tid = cuda.threadIdx.x
    acc = 0.0
    bad = 0.0
    r = tid
    while r < partial.shape[0]:
        acc += partial[r, 0]
        bad += partial[r, 1]
        r += RED_THREADS
    _block_sum2(ss, sb, tid, acc, bad)
    if tid == 0:
        out[0] = ss[0]
        out[1] = sb[0]


_scratch: dict = {}


def global_sumsq(grads, gscale: float = 1.0, clip_value: float = 0.0) -> tuple[float, int]:
    """Sum of squares of ``clip(g * gscale, -clip_value, clip_value)`` over every entry of every
    gradient (clip off when ``clip_value`` is 0), with non-finite entries left out and counted.

    grads: float32 device arrays of any shapes. Returns ``(sum of squares as a float,
    number of non-finite entries)``; one 16-byte copy to the host.
    """
    grads = [g for g in grads if g.size]
    blocks = [min(RED_BLOCKS, math.ceil(g.size / RED_THREADS)) for g in grads]
    rows = max(1, sum(blocks))
    key = ("sumsq", rows)
    if key not in _scratch:
        _scratch[key] = (cuda.device_array((rows, 2), np.float64), cuda.device_array(2, np.float64))
    partial, out = _scratch[key]
    row = 0
    for g, nb in zip(grads, blocks):
        _check("global_sumsq", g)
        _sumsq_partial[nb, RED_THREADS](_flat(g, False), f32(gscale), f32(clip_value), partial, row)
        row += nb
    if not grads:
        return 0.0, 0
    _sum_rows[1, RED_THREADS](partial, out)
    res = out.copy_to_host()
    return float(res[0]), int(res[1])


# ---- the rules -------------------------------------------------------------------------------

@cuda.jit(device=True)
def _prepare(g, p, gscale, clip, nscale, l2):
    x = g * gscale
    if clip > 0:
        x = min(max(x, -clip), clip)
    x = x * nscale
    if l2 != 0:
        x = x + l2 * p
    return x


@cuda.jit
def _sgd(p, g, v, gscale, clip, nscale, l2, lr, mu, nesterov, has_momentum):
    i = cuda.grid(1)
    if i >= p.size:
        return
    x = _prepare(g[i], p[i], gscale, clip, nscale, l2)
    if has_momentum:
        vi = v[i] * mu
        vi = vi + x
        v[i] = vi
        if nesterov:
            x = x + mu * vi
        else:
            x = vi
    p[i] = p[i] - lr * x


@cuda.jit
def _adam(p, g, m, v, gscale, clip, nscale, l2, decay, b1, c1, b2, c2, step, bc2, eps):
    i = cuda.grid(1)
    if i >= p.size:
        return
    pi = p[i]
    x = _prepare(g[i], pi, gscale, clip, nscale, l2)
    if decay != 0:
        pi = pi - decay * pi
    mi = m[i] * b1
    mi = mi + c1 * x
    vi = v[i] * b2
    vi = vi + c2 * x * x
    m[i] = mi
    v[i] = vi
    p[i] = pi - step * mi / (math.sqrt(vi) / bc2 + eps)


@cuda.jit
def _fsadagrad(p, g, s, mom, gscale, clip, nscale, l2, n, vm, c_vm, tsc, wmax, one, mu, c_mu,
               lr, has_momentum):
    i = cuda.grid(1)
    if i >= p.size:
        return
    x = _prepare(g[i], p[i], gscale, clip, nscale, l2) * n
    si = s[i] * vm
    si = si + c_vm * x * x
    s[i] = si
    w = one
    if si > 0:
        w = min(tsc / math.sqrt(si), wmax)
    x = x * w
    if has_momentum:
        mi = mom[i] * mu
        mi = mi + x * c_mu
        mom[i] = mi
        x = mi
    p[i] = p[i] - lr * x


def _prep_args(gscale, clip_value, nscale, l2):
    return f32(gscale), f32(clip_value), f32(nscale), f32(l2)


def sgd_update(p, g, v, lr: float, momentum: float = 0.0, nesterov: bool = False, *,
               gscale: float = 1.0, clip_value: float = 0.0, nscale: float = 1.0,
               l2: float = 0.0) -> None:
    """``asrkit.learners.rules.sgd_step`` (torch form) on the prepared gradient, in place.

    p, g, v: float32 device arrays of one shape (v: the velocity, unused when momentum is 0).
    """
    _check("sgd_update", p, g, v)
    _sgd[_grid(p.size), THREADS](_flat(p), _flat(g, False), _flat(v),
                                 *_prep_args(gscale, clip_value, nscale, l2), f32(lr),
                                 f32(momentum), bool(nesterov), bool(momentum))


def adam_update(p, g, m, v, t: int, lr: float, beta1: float = 0.9, beta2: float = 0.999,
                eps: float = 1e-8, weight_decay: float = 0.0, *, gscale: float = 1.0,
                clip_value: float = 0.0, nscale: float = 1.0, l2: float = 0.0) -> None:
    """``asrkit.learners.rules.adam_step`` (AdamW with ``weight_decay``) on the prepared
    gradient, in place. p, g, m, v: float32 device arrays of one shape; t: the 1-based count."""
    _check("adam_update", p, g, m, v)
    bc1 = 1 - beta1 ** t
    bc2 = math.sqrt(1 - beta2 ** t)
    _adam[_grid(p.size), THREADS](_flat(p), _flat(g, False), _flat(m), _flat(v),
                                  *_prep_args(gscale, clip_value, nscale, l2),
                                  f32(lr * weight_decay), f32(beta1), f32(1 - beta1), f32(beta2),
                                  f32(1 - beta2), f32(lr / bc1), f32(bc2), f32(eps))


def fsadagrad_update(p, g, s, mom, count: float, lr: float, samples: int, momentum: float = 0.9,
                     variance_time_constant: float = 720000.0, target_denominator: float = 1.0,
                     unit_gain: bool = True, *, gscale: float = 1.0, clip_value: float = 0.0,
                     nscale: float = 1.0, l2: float = 0.0, gmul: float = 1.0) -> float:
    """``asrkit.learners.rules.fsadagrad_step`` on the prepared gradient times ``gmul``, in
    place; returns the new smoothed sample count. p, g, s, mom: float32 device arrays of one
    shape; count: the previous smoothed count (a host float)."""
    _check("fsadagrad_update", p, g, s, mom)
    vm = math.exp(-samples / variance_time_constant)
    count = vm * count + (1 - vm) * samples
    _fsadagrad[_grid(p.size), THREADS](_flat(p), _flat(g, False), _flat(s), _flat(mom),
                                       *_prep_args(gscale, clip_value, nscale, l2), f32(gmul),
                                       f32(vm), f32(1 - vm),
                                       f32(target_denominator * math.sqrt(count)), f32(10.0),
                                       f32(1.0), f32(momentum),
                                       f32(1 - momentum if unit_gain else 1.0), f32(lr),
                                       momentum > 0)
    return count
