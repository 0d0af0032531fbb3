"""RNN-T (transducer) loss with its gradients: the public entry points.

Two ways in, one lattice (Graves, 2012; read ``kernels/reference/rnnt.py`` for the recursions):

- ``rnnt_loss(logits, ...)`` takes the joiner's logits ``[B, T, U+1, V]`` and returns the costs
  and the gradient with respect to those logits (the log-softmax over V is fused, as in
  ``ctc_loss``); ``in_place=True`` writes the gradient over the logits;
- ``rnnt_joiner_loss(enc, pred, weight, bias, ...)`` merges the additive joiner
  ``logits = weight @ tanh(enc[t, b] + pred[u, b]) + bias`` into the loss and returns the gradients
  for its four inputs without ever holding the ``[B, T, U+1, V]`` logits: the joiner is computed
  block by block, reduced to three numbers per lattice node, and computed again in the backward
  (the memory-lean path; see ``kernels/cpu/rnnt.py``).

Both check their arguments once, then run the kernel of the chosen device: ``reference``
(numpy), ``cpu`` (numba.njit + BLAS) or ``cuda`` (numba.cuda). ``device=None`` follows the
arrays: CUDA device arrays run on ``cuda`` and get device arrays back; anything else runs on
``cpu``. With ``device="cuda"`` and host arrays, results come back as host arrays.

Layout: the logits are batch first, as a joiner produces them and as torchaudio's ``rnnt_loss`` and
k2 take them; the joiner's inputs ``enc [T, B, H]`` and ``pred [U+1, B, H]`` are time-major like
every asrkit sequence, so that a criterion op passes the graph's values (and takes back their
gradients) without transposing them. Targets are ``[B, S]`` as for ``ctc_loss``. Conventions (those
of ``torchaudio.functional.rnnt_loss`` with ``reduction="none"``, ``fused_log_softmax=True``, no
clamping): targets are read up to ``target_lengths[b]``; labels lie in ``[0, V)`` and differ from
``blank``, which may be any class; nodes outside ``t < input_lengths[b]``, ``u <=
target_lengths[b]`` are padding and get zero gradients; a sequence with no frames has no path: it
costs inf with a zero gradient.
"""

from __future__ import annotations

import numpy as np

from asrkit.kernels._device import is_cuda_array, resolve_device
from asrkit.kernels.ctc import _host

PRUNE = 1e-12  # default occupancy below which rnnt_joiner_loss leaves a node out of the backward


def _float_dtype(a, what, name):
    dtype = np.dtype(a.dtype)
    if dtype not in (np.float32, np.float64):
        raise TypeError(f"{what}: {name} must be float32 or float64, got {dtype}")
    return dtype


def _validate(B, T, U1, V, targets, input_lengths, target_lengths, blank, what):
    """Check the targets and the lengths against the lattice sizes; returns int32 host copies."""
    if not 0 <= int(blank) < V:
        raise ValueError(f"{what}: blank={blank} is not a class index in [0, {V})")
    tg, il, tl = _host(targets), _host(input_lengths), _host(target_lengths)
    if tg.ndim != 2 or tg.shape[0] != B:
        raise ValueError(f"{what}: targets must be padded [B={B}, S], got shape {tg.shape}")
    for name, a in (("targets", tg), ("input_lengths", il), ("target_lengths", tl)):
        if a.dtype.kind not in "iu":
            raise TypeError(f"{what}: {name} must be integers, got {a.dtype}")
    for name, a, limit in (("input_lengths", il, T),
                           ("target_lengths", tl, min(tg.shape[1], U1 - 1))):
        if a.shape != (B,):
            raise ValueError(f"{what}: {name} must have shape ({B},), got {a.shape}")
        bad = np.flatnonzero((a < 0) | (a > limit))
        if len(bad):
            b = int(bad[0])
            raise ValueError(f"{what}: sequence {b}: {name}[{b}]={int(a[b])} is outside "
                             f"[0, {limit}]")
    valid = np.arange(tg.shape[1])[None, :] < tl[:, None]
    bad = np.argwhere(valid & ((tg < 0) | (tg >= V) | (tg == blank)))
    if len(bad):
        b, i = (int(v) for v in bad[0])
        raise ValueError(f"{what}: sequence {b}: targets[{b}, {i}]={int(tg[b, i])} is not a "
                         f"label (classes are [0, {V}) and {blank} is the blank)")
    return (np.ascontiguousarray(tg, dtype=np.int32), np.ascontiguousarray(il, dtype=np.int32),
            np.ascontiguousarray(tl, dtype=np.int32))


def _impl(device: str):
    if device == "reference":
        from asrkit.kernels.reference import rnnt
    elif device == "cpu":
        from asrkit.kernels.cpu import rnnt
    else:
        from asrkit.kernels.cuda import rnnt
    return rnnt


def rnnt_loss(logits, targets, input_lengths, target_lengths, blank: int = 0, device=None,
              in_place: bool = False):
    """RNN-T negative log-likelihood per sequence and its gradient with respect to the logits.

    Takes logits float32 [B, T, U+1, V] (the joiner's unnormalised output: log-softmax over V is
    fused into the kernel; float64 also works), targets int32 [B, S] padded, input_lengths int32
    [B] (frames, <= T) and target_lengths int32 [B] (labels, <= min(S, U)), the blank class and
    the device. Returns (costs [B], grad [B, T, U+1, V]) in the dtype of ``logits``:
    ``costs[b] = -log p(targets[b] | logits[b])`` and ``grad = d sum(costs) / d logits``, zero on
    padded nodes. ``in_place=True`` writes the gradient over ``logits`` (which must then be a
    C-contiguous float array of the device) and returns it as ``grad``: no second
    ``[B, T, U+1, V]`` array is allocated.
    """
    what = "rnnt_loss"
    dev = resolve_device("cuda" if device is None and is_cuda_array(logits) else device, logits)
    shape = tuple(logits.shape)
    if len(shape) != 4:
        raise ValueError(f"{what}: logits must be [B, T, U+1, V], got shape {shape}")
    B, T, U1, V = shape
    _float_dtype(logits, what, "logits")
    if U1 < 1:
        raise ValueError(f"{what}: logits need at least one label position (U+1 >= 1), got "
                         f"shape {shape}")
    tg, il, tl = _validate(B, T, U1, V, targets, input_lengths, target_lengths, blank, what)
    if in_place:
        if dev == "reference":
            raise ValueError(f"{what}: in_place=True is for the cpu and cuda kernels")
        if dev == "cpu" and not (isinstance(logits, np.ndarray)
                                 and logits.flags.c_contiguous and logits.flags.writeable):
            raise ValueError(f"{what}: in_place=True needs logits as a writeable C-contiguous "
                             "numpy array")
        if dev == "cuda" and not is_cuda_array(logits):
            raise ValueError(f"{what}: in_place=True on cuda needs logits as a device array")
    if dev == "reference":
        return _impl(dev).rnnt_loss(logits, tg, il, tl, int(blank))
    return _impl(dev).rnnt_loss(logits, tg, il, tl, int(blank),
                                out=logits if in_place else None)


def rnnt_joiner_loss(enc, pred, weight, bias, targets, input_lengths, target_lengths,
                     blank: int = 0, device=None, prune: float = PRUNE):
    """RNN-T loss of the additive joiner, merged into the kernel, with the joiner's gradients.

    The joiner is ``logits[b, t, u] = weight @ tanh(enc[t, b] + pred[u, b]) + bias``. Takes enc
    float32 [T, B, H] (the encoder's output projected to the joiner dimension H), pred float32
    [U+1, B, H] (the prediction network's output, projected; row 0 follows the start symbol),
    weight float32 [V, H] (``torch.nn.Linear`` layout), bias float32 [V], targets int32 [B, S],
    input_lengths int32 [B] (<= T), target_lengths int32 [B] (<= min(S, U)), the blank and the
    device (float64 works too). Returns ``(costs [B], (d_enc [T, B, H], d_pred [U+1, B, H],
    d_weight [V, H], d_bias [V]))`` in the dtype of ``enc``: the costs of ``rnnt_loss`` on the
    joiner's logits and the gradients of their sum, zero on padded frames and label positions.
    The ``[B, T, U+1, V]`` logits are never held. ``prune``: lattice nodes whose posterior
    occupancy is below it are left out of the backward (each changes a gradient entry by less
    than ``2 * prune * max(|W|, 1)``); 0 keeps every node; the reference device ignores it.
    """
    what = "rnnt_joiner_loss"
    dev = resolve_device("cuda" if device is None and is_cuda_array(enc) else device, enc)
    es, ps, ws, bs = (tuple(a.shape) for a in (enc, pred, weight, bias))
    if len(es) != 3:
        raise ValueError(f"{what}: enc must be [T, B, H], got shape {es}")
    T, B, H = es
    if len(ps) != 3 or ps[1] != B or ps[2] != H or ps[0] < 1:
        raise ValueError(f"{what}: pred must be [U+1, B={B}, H={H}], got shape {ps}")
    if len(ws) != 2 or ws[1] != H:
        raise ValueError(f"{what}: weight must be [V, H={H}], got shape {ws}")
    V = ws[0]
    if bs != (V,):
        raise ValueError(f"{what}: bias must be [V={V}], got shape {bs}")
    dtype = _float_dtype(enc, what, "enc")
    for name, a in (("pred", pred), ("weight", weight), ("bias", bias)):
        if _float_dtype(a, what, name) != dtype:
            raise TypeError(f"{what}: {name} is {np.dtype(a.dtype)} but enc is {dtype}")
    if not prune >= 0:
        raise ValueError(f"{what}: prune={prune} must be >= 0")
    tg, il, tl = _validate(B, T, ps[0], V, targets, input_lengths, target_lengths, blank, what)
    if dev == "reference":
        return _impl(dev).rnnt_joiner_loss(enc, pred, weight, bias, tg, il, tl, int(blank))
    return _impl(dev).rnnt_joiner_loss(enc, pred, weight, bias, tg, il, tl, int(blank),
                                       prune=float(prune))
