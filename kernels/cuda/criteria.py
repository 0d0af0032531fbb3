"""Frame classification criteria on CUDA, one thread per row of ``C`` scores; same signatures
and results as the numpy twins in :mod:`asrkit.kernels.reference.criteria`."""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from asrkit.kernels.cuda.layout import contiguous, empty, flat, launch
from asrkit.kernels.reference.criteria import check_labels


def _labels(labels, C):
    host = labels.copy_to_host() if hasattr(labels, "copy_to_host") else np.asarray(labels)
    check_labels(host, C)
    return cuda.to_device(np.ascontiguousarray(host, np.int32).reshape(-1))


@cuda.jit
def _rows(z, labels, smoothing, loss, p, C):
    r = cuda.grid(1)
    if r < labels.size:
        base = r * C
        m = -math.inf
        for j in range(C):
            m = max(m, float(z[base + j]))
        acc = 0.0
        for j in range(C):
            acc += math.exp(float(z[base + j]) - m)
        lse = m + math.log(acc)
        total = 0.0
        for j in range(C):
            lp = float(z[base + j]) - lse
            p[base + j] = math.exp(lp)
            total += lp
        lab = labels[r]
        if lab < 0:
            loss[r] = 0.0
        else:
            loss[r] = -(1.0 - smoothing) * (float(z[base + lab]) - lse) - smoothing / C * total


@cuda.jit
def _rows_bwd(g, p, labels, smoothing, out, C):
    i = cuda.grid(1)
    if i < p.size:
        r = i // C
        lab = labels[r]
        if lab < 0:
            out[i] = 0.0
        else:
            target = smoothing / C + (1.0 - smoothing if i - r * C == lab else 0.0)
            out[i] = (float(p[i]) - target) * float(g[r])


def cross_entropy(z, labels, label_smoothing=0.0):
    """Cross-entropy of ``softmax(z)`` against ``labels`` -> ``(loss [...], state)``."""
    z = contiguous(z)
    C = int(tuple(z.shape)[-1])
    lab = _labels(labels, C)
    loss = empty(tuple(z.shape)[:-1], z.dtype)
    p = empty(z.shape, z.dtype)
    if lab.size:
        _rows[launch(lab.size)](flat(z), lab, float(label_smoothing), flat(loss), flat(p), C)
    return loss, (p, lab)


def cross_entropy_backward(g, state, label_smoothing=0.0):
    """Gradient of :func:`cross_entropy` for the scores."""
    p, lab = state
    out = empty(p.shape, p.dtype)
    if p.size:
        _rows_bwd[launch(p.size)](flat(contiguous(g)), flat(p), lab, float(label_smoothing),
                                  flat(out), int(tuple(p.shape)[-1]))
    return out


@cuda.jit
def _argmax_rows(z, C, out):
    r = cuda.grid(1)
    if r < out.size:
        best = 0
        for j in range(1, C):
            if z[r * C + j] > z[r * C + best]:
                best = j
        out[r] = best


def argmax(z):
    """Index of the best class per row: ``z [..., C] -> int32 [...]`` (first of ties)."""
    C = int(tuple(z.shape)[-1])
    out = empty(tuple(z.shape)[:-1], np.int32)
    if out.size:
        _argmax_rows[launch(out.size)](flat(contiguous(z)), C, flat(out))
    return out


@cuda.jit
def _row_errors(best, labels, out):
    r = cuda.grid(1)
    if r < out.size:
        lab = labels[r]
        out[r] = 1.0 if lab >= 0 and best[r] != lab else 0.0


def classification_error(z, labels):
    """0/1 per row: ``argmax(z) != label`` (negative labels count as correct)."""
    best = argmax(z)
    out = empty(best.shape, z.dtype if np.dtype(z.dtype).kind == "f" else np.float32)
    if out.size:
        lab = labels if hasattr(labels, "copy_to_host") else cuda.to_device(np.asarray(labels))
        if lab.dtype != np.int32:
            lab = cuda.to_device(lab.copy_to_host().astype(np.int32))
        _row_errors[launch(out.size)](flat(best), flat(contiguous(lab)), flat(out))
    return out
