"""CTC loss, gradient and Viterbi forced alignment as numba.cuda kernels.

Same contract as the numpy twin ``kernels/reference/ctc.py`` (read its docstring for the
lattice). Three launches for the loss:

1. ``_softmax_kernel``: one block per (frame, sequence), threads over C; block reductions give
   the max and the float64 sum of exponentials; the softmax goes straight into ``grad`` (zeros
   on padded frames) and the log normaliser into ``lse[t, b]``;
2. ``_lattice_kernel``: one block per sequence, threads over the 2S+1 lattice states; alpha for
   every frame into a float64 workspace (a ``__syncthreads`` per frame), then beta with two
   rolling rows, and each state posterior subtracted from ``grad`` with an atomic add (a class
   occurs in several states: the blank in all even ones; the order of those adds varies, so
   the last bits of the gradient may differ from run to run);
3. nothing else: costs are written by the lattice kernel.

Only the band of states that is reachable from the start and can still reach the end is
computed, as on the CPU. Alignment is one block per sequence as well, with int8 back-pointers in
global memory and one thread tracing the path back.
"""

from __future__ import annotations

import math

import numpy as np

from asrkit.kernels._device import DeviceUnavailableError, is_cuda_array, require_cuda

try:
    from numba import cuda, float64, int8
except ImportError as e:  # pragma: no cover - depends on the install
    raise DeviceUnavailableError(
        "device='cuda' needs numba-cuda: pip install 'asrkit[cuda]'") from e

SOFTMAX_THREADS = 128  # threads per (frame, sequence) block; a power of two for the reduction
LATTICE_THREADS = 256  # threads per sequence block, looping over states when 2S+1 is larger
NEG_INF = -math.inf


@cuda.jit(device=True, inline=True)
def _lse2(a, b):
    m = max(a, b)
    if m == NEG_INF:
        return NEG_INF
    return m + math.log1p(math.exp(min(a, b) - m))

@cuda.jit(device=True, inline=True)
def _lse3(a, b, c):
    m = max(a, max(b, c))
    if m == NEG_INF:
        return NEG_INF
    return m + math.log(math.exp(a - m) + math.exp(b - m) + math.exp(c - m))

@cuda.jit(device=True, inline=True)
def _label(targets, b, s, blank):
    return blank if s % 2 == 0 else targets[b, s // 2]

@cuda.jit(device=True, inline=True)
def _can_skip(targets, b, s):
    return s % 2 == 1 and s >= 3 and targets[b, s // 2] != targets[b, s // 2 - 1]

@cuda.jit(device=True, inline=True)
def _band(N, Tb, t):
    # states reachable from the start by frame t that can still reach the end
    return max(0, N - 2 * (Tb - t)), min(N, 2 * t + 2)

@cuda.jit(device=True, inline=True)
def _min_frames(targets, b, L):
    need = L
    for i in range(1, L):
        if targets[b, i] == targets[b, i - 1]:
            need += 1
    return need

@cuda.jit
def softmax_kernel(logits, input_lengths, grad, lse):
    t = cuda.blockIdx.x
    b = cuda.blockIdx.y
    tid = cuda.threadIdx.x
    nt = cuda.blockDim.x
    C = logits.shape[2]
    if t >= input_lengths[b]:
        for c in range(tid, C, nt):
            grad[t, b, c] = 0.0
        return
    red = cuda.shared.array(SOFTMAX_THREADS, float64)
    m = NEG_INF
    for c in range(tid, C, nt):
        m = max(m, float64(logits[t, b, c]))
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
    for c in range(tid, C, nt):
        total += math.exp(float64(logits[t, b, c]) - m)
    red[tid] = total
    cuda.syncthreads()
    step = nt // 2
    while step > 0:
        if tid < step:
            red[tid] += red[tid + step]
        cuda.syncthreads()
        step //= 2
    norm = m + math.log(red[0])
    for c in range(tid, C, nt):
        grad[t, b, c] = math.exp(float64(logits[t, b, c]) - norm)
    if tid == 0:
        lse[t, b] = norm

@cuda.jit
def lattice_kernel(logits, targets, input_lengths, target_lengths, blank, lse, alpha,
                   beta, costs, grad):
    b = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    nt = cuda.blockDim.x
    C = logits.shape[2]
    Tb = input_lengths[b]
    L = target_lengths[b]
    N = 2 * L + 1
    if Tb == 0 or Tb < _min_frames(targets, b, L):
        for t in range(Tb):
            for c in range(tid, C, nt):
                grad[t, b, c] = 0.0
        if tid == 0:
            costs[b] = 0.0 if (Tb == 0 and L == 0) else -NEG_INF
        return
    lo, hi = _band(N, Tb, 0)
    for s in range(lo + tid, min(hi, 2), nt):
        alpha[b, 0, s] = float64(logits[0, b, _label(targets, b, s, blank)]) - lse[0, b]
    cuda.syncthreads()
    for t in range(1, Tb):
        plo, phi = _band(N, Tb, t - 1)
        lo, hi = _band(N, Tb, t)
        for s in range(lo + tid, hi, nt):
            a = alpha[b, t - 1, s] if plo <= s < phi else NEG_INF
            a1 = alpha[b, t - 1, s - 1] if plo <= s - 1 < phi else NEG_INF
            if _can_skip(targets, b, s):
                a2 = alpha[b, t - 1, s - 2] if plo <= s - 2 < phi else NEG_INF
                a = _lse3(a, a1, a2)
            else:
                a = _lse2(a, a1)
            em = float64(logits[t, b, _label(targets, b, s, blank)]) - lse[t, b]
            alpha[b, t, s] = a + em
        cuda.syncthreads()
    lo, hi = _band(N, Tb, Tb - 1)
    logz = alpha[b, Tb - 1, N - 1] if N - 1 < hi else NEG_INF
    if N > 1:
        logz = _lse2(logz, alpha[b, Tb - 1, N - 2])
    if tid == 0:
        costs[b] = -logz
    if logz == NEG_INF:  # every path underflowed: treat as impossible
        for t in range(Tb):
            for c in range(tid, C, nt):
                grad[t, b, c] = 0.0
        return
    for t in range(Tb - 1, -1, -1):
        row = t % 2
        nlo, nhi = _band(N, Tb, t + 1)
        lo, hi = _band(N, Tb, t)
        for s in range(lo + tid, hi, nt):
            c = _label(targets, b, s, blank)
            em = float64(logits[t, b, c]) - lse[t, b]
            if t == Tb - 1:
                v = em if s >= N - 2 else NEG_INF
            else:
                v = beta[b, 1 - row, s] if nlo <= s < nhi else NEG_INF
                v1 = beta[b, 1 - row, s + 1] if nlo <= s + 1 < nhi else NEG_INF
                if s + 2 < N and _can_skip(targets, b, s + 2):
                    v2 = beta[b, 1 - row, s + 2] if nlo <= s + 2 < nhi else NEG_INF
                    v = _lse3(v, v1, v2) + em
                else:
                    v = _lse2(v, v1) + em
            beta[b, row, s] = v
            post = alpha[b, t, s] + v - em - logz
            if post > -745.0:
                cuda.atomic.add(grad, (t, b, c), -math.exp(post))
        cuda.syncthreads()

@cuda.jit
def align_kernel(x, targets, input_lengths, target_lengths, blank, delta, back, path,
                 scores):
    b = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    nt = cuda.blockDim.x
    T = x.shape[0]
    Tb = input_lengths[b]
    L = target_lengths[b]
    N = 2 * L + 1
    for t in range(tid, T, nt):
        path[t, b] = -1
    if Tb == 0 or Tb < _min_frames(targets, b, L):
        if tid == 0:
            scores[b] = 0.0 if (Tb == 0 and L == 0) else NEG_INF
        return
    for s in range(tid, N, nt):
        delta[b, 0, s] = float64(x[0, b, _label(targets, b, s, blank)]) if s < 2 else NEG_INF
    cuda.syncthreads()
    for t in range(1, Tb):
        row = t % 2
        for s in range(tid, N, nt):
            best = delta[b, 1 - row, s]
            move = 0
            if s >= 1 and delta[b, 1 - row, s - 1] > best:
                best = delta[b, 1 - row, s - 1]
                move = 1
            if _can_skip(targets, b, s) and delta[b, 1 - row, s - 2] > best:
                best = delta[b, 1 - row, s - 2]
                move = 2
            delta[b, row, s] = best + float64(x[t, b, _label(targets, b, s, blank)])
            back[b, t, s] = int8(move)
        cuda.syncthreads()
    if tid == 0:
        row = (Tb - 1) % 2
        s = N - 1
        if N > 1 and delta[b, row, N - 2] > delta[b, row, N - 1]:
            s = N - 2
        scores[b] = delta[b, row, s]
        for t in range(Tb - 1, -1, -1):
            path[t, b] = _label(targets, b, s, blank)
            s -= back[b, t, s]


def _is_device_array(a) -> bool:
    """CUDA arrays, and numba's simulated device arrays (they lack the CUDA array interface)."""
    return is_cuda_array(a) or hasattr(a, "__cuda_ndarray__")


def _on_device(logits, targets, input_lengths, target_lengths):
    """Device views/copies: logits as given (float), the int arrays as int32."""
    if hasattr(logits, "__cuda_ndarray__"):
        x = logits
    elif is_cuda_array(logits):
        x = cuda.as_cuda_array(logits)
    else:
        x = cuda.to_device(np.ascontiguousarray(logits))
    ints = []
    for a in (targets, input_lengths, target_lengths):
        if hasattr(a, "copy_to_host"):
            a = a.copy_to_host()
        elif is_cuda_array(a):
            a = cuda.as_cuda_array(a).copy_to_host()
        ints.append(cuda.to_device(np.ascontiguousarray(a, dtype=np.int32)))
    return (x, *ints)


def ctc_loss(logits, targets, input_lengths, target_lengths, blank: int = 0):
    """CTC cost and gradient on CUDA; same contract as ``reference.ctc.ctc_loss``.

    Takes logits float32/float64 [T, B, C], targets int32 [B, S], input_lengths and
    target_lengths int32 [B], as host or CUDA arrays. Returns costs [B] and grad [T, B, C] in the
    dtype of ``logits``: CUDA device arrays when ``logits`` is one, numpy arrays otherwise.
    """
    require_cuda()
    on_device = _is_device_array(logits)
    x, tg, il, tl = _on_device(logits, targets, input_lengths, target_lengths)
    T, B, C = x.shape
    N = 2 * tg.shape[1] + 1
    grad = cuda.device_array((T, B, C), dtype=x.dtype)
    costs = cuda.device_array(B, dtype=x.dtype)
    if T and B:
        lse = cuda.device_array((T, B), dtype=np.float64)
        alpha = cuda.device_array((B, T, N), dtype=np.float64)
        beta = cuda.device_array((B, 2, N), dtype=np.float64)
        softmax_kernel[(T, B), SOFTMAX_THREADS](x, il, grad, lse)
        lattice_kernel[B, LATTICE_THREADS](x, tg, il, tl, int(blank), lse, alpha, beta,
                                           costs, grad)
    elif B:  # no frames at all: only empty targets are possible
        costs = cuda.to_device(np.where(tl.copy_to_host() == 0, 0.0, np.inf).astype(x.dtype))
    if on_device:
        return costs, grad
    return costs.copy_to_host(), grad.copy_to_host()


def ctc_align(logits, targets, input_lengths, target_lengths, blank: int = 0,
              return_scores: bool = False):
    """Viterbi forced alignment on CUDA; same contract as ``reference.ctc.ctc_align``.

    Takes logits or log-probs float [T, B, C], targets int32 [B, S], input_lengths and
    target_lengths int32 [B] (host or CUDA arrays). Returns int32 [T, B] (and float64 [B] scores
    with ``return_scores``), on the device when ``logits`` is a CUDA array.
    """
    require_cuda()
    on_device = _is_device_array(logits)
    x, tg, il, tl = _on_device(logits, targets, input_lengths, target_lengths)
    T, B, _ = x.shape
    N = 2 * tg.shape[1] + 1
    path = cuda.device_array((T, B), dtype=np.int32)
    scores = cuda.device_array(B, dtype=np.float64)
    if B:
        delta = cuda.device_array((B, 2, N), dtype=np.float64)
        back = cuda.device_array((B, max(T, 1), N), dtype=np.int8)
        align_kernel[B, LATTICE_THREADS](x, tg, il, tl, int(blank), delta, back, path, scores)
    if not on_device:
        path, scores = path.copy_to_host(), scores.copy_to_host()
    return (path, scores) if return_scores else path
