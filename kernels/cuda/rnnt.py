"""RNN-T loss on CUDA: numba.cuda kernels, and GEMMs (cuBLAS where available) for the joiner.

Same contract as the numpy twin ``kernels/reference/rnnt.py`` (read its docstring for the
lattice) and the same three stages as ``kernels/cpu/rnnt.py``:

1. ``_stats_kernel`` / ``_block_stats_kernel``: one block per lattice node, threads over V; block
   reductions give the max and the float64 sum of exponentials, and the node's log normaliser
   and blank and label log-probabilities go to float64 ``[B, T, U+1]`` arrays;
2. ``_lattice_kernel``: one block per sequence, threads over u; alpha then beta one
   anti-diagonal ``t + u`` at a time (a ``__syncthreads`` per diagonal: the nodes of a diagonal
   depend only on the one before), then the cost and the transition posteriors of every node;
3. ``_grad_kernel`` / ``_block_grad_kernel``: one block per node, threads over V, the gradient
   ``(pb + pl) * softmax - pb * onehot(blank) - pl * onehot(label)`` (zero on padded nodes);
   with ``out=logits`` it is written over the logits, each element by the thread that read it.

``rnnt_joiner_loss`` runs the joiner in blocks of rows as on the CPU: ``_hidden_kernel`` builds
``[tanh(enc[t, b] + pred[u, b]) | 1]``, a GEMM gives ``z = h @ [W | b]^T``, and the backward adds
``dz^T @ h`` into ``d[W | b]`` (a GEMM with beta = 1) and ``dh * (1 - h^2)`` into ``d_enc`` and
``d_pred`` with atomic adds (so the last bits of those may vary from run to run). The lattice
nodes, and those kept for the backward (occupancy >= ``prune``), are listed on the host.
"""

from __future__ import annotations

import math

import numpy as np

from asrkit.kernels._device import (
    DeviceUnavailableError,
    cuda_simulated,
    is_cuda_array,
    require_cuda,
)

try:
    from numba import cuda, float64
except ImportError as e:  # pragma: no cover - depends on the install
    raise DeviceUnavailableError(
        "device='cuda' needs numba-cuda: pip install 'asrkit[cuda]'") from e

from asrkit.kernels.cuda.gemm import gemm  # noqa: E402
from asrkit.kernels.cuda.lstm import THREADS, device_zeros, grid_size, to_device  # noqa: E402

# threads per node block (a power of two for the reductions) and per sequence block; tiny
# under the simulator, where every simulated thread is a Python thread
NODE_THREADS = 4 if cuda_simulated() else 128
LATTICE_THREADS = 4 if cuda_simulated() else 256
# joiner rows per block: z [rows, V] of 2^22 floats (16 MB in float32) at most
BLOCK_FLOATS = 1 << 22
NEG_INF = -math.inf


@cuda.jit(device=True, inline=True)
def _lse2(a, b):
    m = max(a, b)
    if m == NEG_INF:
        return NEG_INF
    return m + math.log1p(math.exp(min(a, b) - m))


@cuda.jit(device=True)
def _row_lse(row, red):
    """float64 log sum exp of row [V], by all threads of the block (red: shared scratch)."""
    tid = cuda.threadIdx.x
    nt = cuda.blockDim.x
    m = NEG_INF
    for v in range(tid, row.shape[0], nt):
        m = max(m, float64(row[v]))
    red[tid] = m
    cuda.syncthreads()
    step = nt // 2
    while step > 0:
        if tid < step:
            red[tid] = max(red[tid], red[tid + step])
        cuda.syncthreads()
        step //= 2
    m = red[0]
    cuda.syncthreads()
    total = 0.0
    for v in range(tid, row.shape[0], nt):
        total += math.exp(float64(row[v]) - m)
    red[tid] = total
    cuda.syncthreads()
    step = nt // 2
    while step > 0:
        if tid < step:
            red[tid] += red[tid + step]
        cuda.syncthreads()
        step //= 2
    s = m + math.log(red[0])
    cuda.syncthreads()
    return s


@cuda.jit(device=True)
def _node_stats(row, targets, target_lengths, blank, b, t, u, lse, lpb, lpl, red):
    s = _row_lse(row, red)
    if cuda.threadIdx.x == 0:
        lse[b, t, u] = s
        lpb[b, t, u] = float64(row[blank]) - s
        if u < target_lengths[b]:
            lpl[b, t, u] = float64(row[targets[b, u]]) - s


@cuda.jit(device=True)
def _node_grad(row, g, targets, target_lengths, blank, b, t, u, lse, pb, pl):
    """g[v] = (pb + pl) softmax(row)[v] - pb [v = blank] - pl [v = label]; g may be row."""
    s = lse[b, t, u]
    p_blank = pb[b, t, u]
    p_label = pl[b, t, u]
    label = targets[b, u] if u < target_lengths[b] else -1
    occ = p_blank + p_label
    for v in range(cuda.threadIdx.x, row.shape[0], cuda.blockDim.x):
        x = math.exp(float64(row[v]) - s) * occ
        if v == blank:
            x -= p_blank
        if v == label:
            x -= p_label
        g[v] = x


@cuda.jit
def _stats_kernel(logits, targets, input_lengths, target_lengths, blank, lse, lpb, lpl):
    u, t, b = cuda.blockIdx.x, cuda.blockIdx.y, cuda.blockIdx.z
    if t >= input_lengths[b] or u > target_lengths[b]:
        return
    red = cuda.shared.array(NODE_THREADS, float64)
    _node_stats(logits[b, t, u], targets, target_lengths, blank, b, t, u, lse, lpb, lpl, red)


@cuda.jit
def _grad_kernel(logits, targets, input_lengths, target_lengths, blank, lse, pb, pl, grad):
    u, t, b = cuda.blockIdx.x, cuda.blockIdx.y, cuda.blockIdx.z
    if t >= input_lengths[b] or u > target_lengths[b]:
        for v in range(cuda.threadIdx.x, grad.shape[3], cuda.blockDim.x):
            grad[b, t, u, v] = 0
        return
    _node_grad(logits[b, t, u], grad[b, t, u], targets, target_lengths, blank, b, t, u, lse,
               pb, pl)


@cuda.jit
def _lattice_kernel(lpb, lpl, input_lengths, target_lengths, alpha, beta, costs, pb, pl):
    b = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    nt = cuda.blockDim.x
    Tb = input_lengths[b]
    Ub = target_lengths[b]
    if Tb == 0:
        if tid == 0:
            costs[b] = math.inf
        return
    for d in range(Tb + Ub):  # alpha, one anti-diagonal t + u = d at a time
        for u in range(tid, Ub + 1, nt):
            t = d - u
            if 0 <= t < Tb:
                a = 0.0 if t == 0 and u == 0 else NEG_INF
                if t > 0:
                    a = alpha[b, t - 1, u] + lpb[b, t - 1, u]
                if u > 0:
                    a = _lse2(a, alpha[b, t, u - 1] + lpl[b, t, u - 1])
                alpha[b, t, u] = a
        cuda.syncthreads()
    for d in range(Tb + Ub - 1, -1, -1):  # beta, from the last node back
        for u in range(tid, Ub + 1, nt):
            t = d - u
            if 0 <= t < Tb:
                v = lpb[b, t, u] if t == Tb - 1 and u == Ub else NEG_INF
                if t + 1 < Tb:
                    v = beta[b, t + 1, u] + lpb[b, t, u]
                if u < Ub:
                    v = _lse2(v, beta[b, t, u + 1] + lpl[b, t, u])
                beta[b, t, u] = v
        cuda.syncthreads()
    logz = beta[b, 0, 0]
    if tid == 0:
        costs[b] = -logz if math.isfinite(logz) else math.inf
    finite = math.isfinite(logz)
    for k in range(tid, Tb * (Ub + 1), nt):
        t = k // (Ub + 1)
        u = k - t * (Ub + 1)
        p_blank = 0.0
        p_label = 0.0
        if finite:
            a = alpha[b, t, u] - logz
            if t + 1 < Tb:
                p_blank = math.exp(a + lpb[b, t, u] + beta[b, t + 1, u])
            elif u == Ub:
                p_blank = math.exp(a + lpb[b, t, u])
            if u < Ub:
                p_label = math.exp(a + lpl[b, t, u] + beta[b, t, u + 1])
        pb[b, t, u] = p_blank
        pl[b, t, u] = p_label


@cuda.jit
def _hidden_kernel(enc, pred, rows, h):
    """h[i] = [tanh(enc[t, b] + pred[u, b]), 1] for rows[i] = (b, t, u); one thread per entry."""
    k = cuda.grid(1)
    H1 = h.shape[1]
    if k < rows.shape[0] * H1:
        i = k // H1
        j = k - i * H1
        if j == H1 - 1:
            h[i, j] = 1
        else:
            h[i, j] = math.tanh(enc[rows[i, 1], rows[i, 0], j] + pred[rows[i, 2], rows[i, 0], j])


@cuda.jit
def _block_stats_kernel(z, rows, targets, target_lengths, blank, lse, lpb, lpl):
    i = cuda.blockIdx.x
    red = cuda.shared.array(NODE_THREADS, float64)
    _node_stats(z[i], targets, target_lengths, blank, rows[i, 0], rows[i, 1], rows[i, 2], lse,
                lpb, lpl, red)


@cuda.jit
def _block_grad_kernel(z, rows, targets, target_lengths, blank, lse, pb, pl):
    i = cuda.blockIdx.x
    _node_grad(z[i], z[i], targets, target_lengths, blank, rows[i, 0], rows[i, 1], rows[i, 2],
               lse, pb, pl)


@cuda.jit
def _scatter_kernel(dh, h, rows, d_enc, d_pred):
    """d_enc[t, b] and d_pred[u, b] += dh[i] * (1 - h[i]^2) (atomic adds), one thread per entry."""
    k = cuda.grid(1)
    H = d_enc.shape[2]
    if k < rows.shape[0] * H:
        i = k // H
        j = k - i * H
        a = dh[i, j] * (1 - h[i, j] * h[i, j])
        cuda.atomic.add(d_enc, (rows[i, 1], rows[i, 0], j), a)
        cuda.atomic.add(d_pred, (rows[i, 2], rows[i, 0], j), a)


@cuda.jit
def _augment_kernel(weight, bias, w_aug):
    """w_aug = [weight | bias]: [V, H + 1]."""
    k = cuda.grid(1)
    H1 = w_aug.shape[1]
    if k < w_aug.shape[0] * H1:
        v = k // H1
        j = k - v * H1
        w_aug[v, j] = bias[v] if j == H1 - 1 else weight[v, j]


@cuda.jit
def _split_kernel(w_aug, weight, bias):
    """weight, bias = w_aug[:, :H], w_aug[:, H]."""
    k = cuda.grid(1)
    H1 = w_aug.shape[1]
    if k < w_aug.shape[0] * H1:
        v = k // H1
        j = k - v * H1
        if j == H1 - 1:
            bias[v] = w_aug[v, j]
        else:
            weight[v, j] = w_aug[v, j]


def _ints(*arrays):
    return tuple(cuda.to_device(np.ascontiguousarray(a, dtype=np.int32)) for a in arrays)


def _lattice(lpb, lpl, il, tl):
    """Stage 2 on the device: (costs [B] float64, pb, pl float64 [B, T, U1])."""
    B, T, U1 = lpb.shape
    alpha = cuda.device_array((B, T, U1), np.float64)
    beta = cuda.device_array((B, T, U1), np.float64)
    pb = device_zeros((B, T, U1), np.float64)
    pl = device_zeros((B, T, U1), np.float64)
    costs = cuda.device_array(B, np.float64)
    _lattice_kernel[B, LATTICE_THREADS](lpb, lpl, il, tl, alpha, beta, costs, pb, pl)
    return costs, pb, pl


@cuda.jit
def _cast_kernel(src, dst):
    k = cuda.grid(1)
    if k < src.shape[0]:
        dst[k] = src[k]


def _cast(a, dtype):
    out = cuda.device_array(a.shape, dtype)
    if a.shape[0]:
        _cast_kernel[grid_size(a.shape[0]), THREADS](a, out)
    return out


def _node_arrays(B, T, U1):
    return tuple(device_zeros((B, T, U1), np.float64) for _ in range(3))


def rnnt_loss(logits, targets, input_lengths, target_lengths, blank: int = 0, out=None):
    """RNN-T cost and gradient on CUDA; same contract as ``reference.rnnt.rnnt_loss``.

    Takes logits float32/float64 [B, T, U+1, V], targets int32 [B, S], input_lengths and
    target_lengths int32 [B], as host or CUDA arrays, and ``out``: None or a device array like
    ``logits`` (``logits`` itself included) for the gradient. Returns costs [B] and grad
    [B, T, U+1, V] in the dtype of ``logits``: device arrays when ``logits`` is one, numpy
    arrays otherwise.
    """
    require_cuda()
    on_device = is_cuda_array(logits)
    x = to_device(logits)
    B, T, U1, _ = x.shape
    tg, il, tl = _ints(targets, input_lengths, target_lengths)
    grad = cuda.device_array(x.shape, x.dtype) if out is None else to_device(out)
    costs = cuda.device_array(B, np.float64)
    if B:
        lse, lpb, lpl = _node_arrays(B, T, U1)
        if T:
            _stats_kernel[(U1, T, B), NODE_THREADS](x, tg, il, tl, int(blank), lse, lpb, lpl)
        costs, pb, pl = _lattice(lpb, lpl, il, tl)
        if T:
            _grad_kernel[(U1, T, B), NODE_THREADS](x, tg, il, tl, int(blank), lse, pb, pl, grad)
    costs = _cast(costs, x.dtype)
    if on_device:
        return costs, grad
    return costs.copy_to_host(), grad.copy_to_host()


def _node_rows(il: np.ndarray, tl: np.ndarray) -> np.ndarray:
    """The valid lattice nodes in (b, t, u) order: int32 [R, 3] (host)."""
    parts = []
    for b, (Tb, Ub) in enumerate(zip(il.tolist(), tl.tolist())):
        t, u = np.meshgrid(np.arange(Tb), np.arange(Ub + 1), indexing="ij")
        parts.append(np.stack([np.full(t.size, b), t.ravel(), u.ravel()], axis=1))
    rows = np.concatenate(parts) if parts else np.zeros((0, 3))
    return np.ascontiguousarray(rows, dtype=np.int32)


def rnnt_joiner_loss(enc, pred, weight, bias, targets, input_lengths, target_lengths,
                     blank: int = 0, block: int | None = None, prune: float = 1e-12):
    """RNN-T loss of the additive joiner merged into the kernel, on CUDA.

    Same contract as ``reference.rnnt.rnnt_joiner_loss``: enc float [T, B, H], pred float
    [U+1, B, H], weight [V, H], bias [V] (host or CUDA arrays), targets int32 [B, S],
    input_lengths and target_lengths int32 [B] (host). ``block``: joiner rows per GEMM (default:
    2^22 / V); ``prune``: nodes of lower occupancy are left out of the backward. Returns
    ``(costs [B], (d_enc, d_pred, d_weight, d_bias))`` in the dtype of ``enc``, on the device
    when ``enc`` is a device array.
    """
    require_cuda()
    on_device = is_cuda_array(enc)
    dt = np.dtype(enc.dtype)
    e, p, w, bs = (to_device(a, dt) for a in (enc, pred, weight, bias))
    T, B, H = e.shape
    U1 = p.shape[0]
    V = w.shape[0]
    il_h = np.asarray(input_lengths, dtype=np.int32)
    tl_h = np.asarray(target_lengths, dtype=np.int32)
    tg, il, tl = _ints(targets, il_h, tl_h)
    blank = int(blank)
    block = max(1, BLOCK_FLOATS // max(V, H + 1)) if block is None else int(block)
    w_aug = cuda.device_array((V, H + 1), dt)
    _augment_kernel[grid_size(V * (H + 1)), THREADS](w, bs, w_aug)
    lse, lpb, lpl = _node_arrays(B, T, U1)
    rows_h = _node_rows(il_h, tl_h)
    n_max = min(block, max(len(rows_h), 1))
    h = cuda.device_array((n_max, H + 1), dt)
    z = cuda.device_array((n_max, V), dt)

    rows = cuda.to_device(rows_h)
    for r0 in range(0, len(rows_h), block):
        n = min(block, len(rows_h) - r0)
        rb = rows[r0:r0 + n]
        _hidden_kernel[grid_size(n * (H + 1)), THREADS](e, p, rb, h[:n])
        gemm(h[:n], w_aug, z[:n], trans_b=True)
        _block_stats_kernel[n, NODE_THREADS](z[:n], rb, tg, tl, blank, lse, lpb, lpl)
    costs, pb, pl = _lattice(lpb, lpl, il, tl)

    occ = pb.copy_to_host() + pl.copy_to_host()
    kept_h = rows_h[occ[rows_h[:, 0], rows_h[:, 1], rows_h[:, 2]] >= prune] if len(rows_h) \
        else rows_h
    d_enc = device_zeros((T, B, H), dt)
    d_pred = device_zeros((U1, B, H), dt)
    d_w_aug = device_zeros((V, H + 1), dt)
    dh = cuda.device_array((n_max, H + 1), dt)
    if len(kept_h):
        kept = cuda.to_device(np.ascontiguousarray(kept_h))
        for r0 in range(0, len(kept_h), block):
            n = min(block, len(kept_h) - r0)
            rb = kept[r0:r0 + n]
            _hidden_kernel[grid_size(n * (H + 1)), THREADS](e, p, rb, h[:n])
            gemm(h[:n], w_aug, z[:n], trans_b=True)
            _block_grad_kernel[n, NODE_THREADS](z[:n], rb, tg, tl, blank, lse, pb, pl)
            gemm(z[:n], w_aug, dh[:n])
            gemm(z[:n], h[:n], d_w_aug, trans_a=True, beta=1.0)
            _scatter_kernel[grid_size(n * H), THREADS](dh[:n], h[:n], rb, d_enc, d_pred)
    d_weight = cuda.device_array((V, H), dt)
    d_bias = cuda.device_array(V, dt)
    _split_kernel[grid_size(V * (H + 1)), THREADS](d_w_aug, d_weight, d_bias)
    costs = _cast(costs, dt)
    grads = (d_enc, d_pred, d_weight, d_bias)
    if on_device:
        return costs, grads
    return costs.copy_to_host(), tuple(g.copy_to_host() for g in grads)
