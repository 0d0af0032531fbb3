"""Plain-numpy kernels of the affine map ``times`` (``x [..., K] @ W [K, N]``): the CPU path of
the op for inputs the numba kernel (:mod:`asrkit.kernels.cpu.linalg`) does not take, and the
specification it is tested against.

With ``lengths`` (``x`` a padded ``[T, B, K]`` sequence), the rows of padding frames are zero in
the result and in the input gradient, and contribute nothing to the weight gradient (the engine
keeps them zero in ``x`` and ``g`` anyway).
"""

from __future__ import annotations

import numpy as np

from asrkit.kernels.reference.normalization import valid_mask


def times(x, W, lengths=None, out=None):
    """``x [..., K] @ W [K, N]`` -> ``[..., N]`` (into ``out`` when given), zero on padding
    frames when ``lengths`` are given."""
    x2 = x.reshape(-1, x.shape[-1])
    shape = x.shape[:-1] + W.shape[1:]
    if out is not None:
        y = out
        np.matmul(x2, W, out=out.reshape(x2.shape[0], *W.shape[1:]))
    else:
        y = np.matmul(x2, W).reshape(shape)
    if lengths is not None:
        y *= valid_mask(y, lengths)
    return y


def times_backward(g, x, W, lengths=None, want=(True, True)):
    """``(gx, gW)`` of :func:`times` for the output gradient ``g`` (None where ``want`` is
    False); ``W`` may be a vector ``[K]`` (then ``g`` is ``[...]``)."""
    gx = gW = None
    g2 = g.reshape(-1, W.shape[1]) if W.ndim == 2 else g.reshape(-1)
    m = None if lengths is None else valid_mask(g, lengths)
    if want[0]:
        gx = (g2 @ W.T if W.ndim == 2 else g2[:, None] * W).reshape(x.shape)
        if m is not None:
            gx *= valid_mask(gx, lengths)
    if want[1]:
        g2 = g2 if m is None else (g * m).reshape(g2.shape)
        gW = x.reshape(-1, x.shape[-1]).T @ g2
    return gx, gW
