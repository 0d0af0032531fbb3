"""1-bit SGD with error feedback (Seide, Fu, Droppo, Li and Yu, Interspeech 2014), as in CNTK.

Each gradient is viewed as a matrix ``[rows, cols]`` (the last axis is the column; vectors are one
column). Per column, the gradient plus the error carried from the previous minibatch is quantised
to one bit per value: values >= 0 are reconstructed as the mean of that column's non-negative
values, the others as the mean of its negative values (the reconstruction that minimises the
squared quantisation error for a sign split). What quantisation lost becomes the next residual, so
no gradient is ever dropped, only delayed.

Exchange: every rank all-gathers the others' packed bits and reconstruction values and sums the
reconstructions, so all ranks apply the same aggregate. (CNTK quantises a second time after a
reduce-scatter; for the 2-8 ranks of one machine or a small cluster, the all-gather halves the
quantisation error at the same traffic for 2 ranks.) Gradients smaller than ``min_size`` values
(biases, norms) are cheaper to send exact and go through a plain allreduce.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numba
import numpy as np

from asrkit.distributed.communicator import Communicator


def matrix_shape(shape: tuple[int, ...]) -> tuple[int, int]:
    """The ``[rows, cols]`` a gradient of ``shape`` is quantised as: columns are the last axis;
    a vector (or a scalar) is one column."""
    if len(shape) <= 1:
        return math.prod(shape), 1
    return math.prod(shape[:-1]), shape[-1]


def as_matrix(g: np.ndarray) -> np.ndarray:
    """View a gradient as ``[rows, cols]`` (see :func:`matrix_shape`); a view, not a copy, when
    ``g`` is C-contiguous."""
    return g.reshape(matrix_shape(g.shape))


@numba.njit(cache=True)
def _quantize(m, v, packed, pos, neg):
    """v float32 [R, C] (the residual) += m, then is overwritten with the new residual; packed
    uint8 [ceil(R*C/8)] receives the sign bits in np.packbits order (row-major, MSB first).

    Two row-major passes (per-column sums kept in small arrays) so memory is read in order; the
    residual update is fused into the first.
    """
    R, C = v.shape
    sp = np.zeros(C)
    sn = np.zeros(C)
    n_p = np.zeros(C, np.int64)
    for r in range(R):
        for c in range(C):
            x = v[r, c] + m[r, c]
            v[r, c] = x
            if x >= 0:
                sp[c] += x
                n_p[c] += 1
            else:
                sn[c] += x
    for c in range(C):
        pos[c] = sp[c] / n_p[c] if n_p[c] > 0 else 0.0
        neg[c] = sn[c] / (R - n_p[c]) if R - n_p[c] > 0 else 0.0
    acc = 0
    nbits = 0
    k = 0
    for r in range(R):
        for c in range(C):
            x = v[r, c]
            if x >= 0:
                acc = (acc << 1) | 1
                v[r, c] = x - pos[c]
            else:
                acc = acc << 1
                v[r, c] = x - neg[c]
            nbits += 1
            if nbits == 8:
                packed[k] = acc
                k += 1
                acc = 0
                nbits = 0
    if nbits:
        packed[k] = acc << (8 - nbits)


def quantize(matrix: np.ndarray, residual: np.ndarray, packed: np.ndarray | None = None
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One-bit quantise ``matrix + residual`` per column, updating ``residual`` in place.

    Args: matrix, residual float32 [R, C]; packed: optional uint8 [ceil(R*C/8)] to write the
    bits into (e.g. a slice of the outgoing message).
    Returns: (packed bits uint8 [ceil(R*C/8)], positive values float32 [C], negative values
    float32 [C]); ``residual`` then holds what quantisation lost.
    """
    if packed is None:
        packed = np.empty((matrix.size + 7) // 8, np.uint8)
    pos = np.empty(matrix.shape[1], np.float32)
    neg = np.empty(matrix.shape[1], np.float32)
    _quantize(matrix, residual, packed, pos, neg)
    return packed, pos, neg


def dequantize(packed: np.ndarray, pos: np.ndarray, neg: np.ndarray,
               shape: tuple[int, int]) -> np.ndarray:
    """Inverse of ``quantize``: float32 [R, C] of per-column reconstruction values."""
    R, C = shape
    bits = np.unpackbits(packed, count=R * C).reshape(R, C).astype(bool)
    return np.where(bits, pos[None, :], neg[None, :]).astype(np.float32)


class OneBitAggregator:
    """Averages gradients over ranks with 1-bit quantisation and per-rank error feedback.

    Keeps one residual per gradient, in the gradient's own shape (the state that must be
    checkpointed to resume exactly: ``state_dict`` gives arrays shaped like the parameters);
    quantisation works on its ``[rows, cols]`` view. ``bytes_per_step`` is what the last
    ``aggregate_`` sent from this rank.
    """

    def __init__(self, comm: Communicator, min_size: int = 256):
        self.comm = comm
        self.min_size = min_size
        self.residuals: list[np.ndarray] | None = None
        self.bytes_per_step = 0

    def state_dict(self) -> dict:
        """The residuals (each shaped like its gradient), for checkpoints."""
        return {"residuals": [r.copy() for r in self.residuals or []]}

    def load_state_dict(self, state: dict) -> None:
        """Restore residuals saved by ``state_dict`` (checked against the gradients' shapes at
        the next ``aggregate_``)."""
        # C order: the residual is updated in place through its [rows, cols] view
        self.residuals = [np.array(r, np.float32, order="C") for r in state["residuals"]] or None

    def aggregate_(self, grads: Sequence[np.ndarray]) -> None:
        """Replace each float32 gradient in ``grads`` by the average over ranks, in place.

        All quantised gradients travel in one message per rank (one all-gather per step, not
        one per tensor), and each rank's bits are decoded straight into the sum.
        """
        if self.residuals is None:
            self.residuals = [np.zeros(g.shape, np.float32) for g in grads]
        elif [r.shape for r in self.residuals] != [g.shape for g in grads]:
            raise ValueError(f"1-bit residuals of shapes {[r.shape for r in self.residuals]} "
                             f"do not match the gradients' {[g.shape for g in grads]}")
        before = self.comm.bytes_sent
        small = [g for g in grads if g.size < self.min_size]
        if small:
            self.comm.allreduce_(small, op="mean")
        large = [(g, res) for g, res in zip(grads, self.residuals) if g.size >= self.min_size]
        parts, layout, offset = [], [], 0
        for g, res in large:
            m = as_matrix(g)
            packed, pos, neg = quantize(m.astype(np.float32, copy=False), as_matrix(res))
            parts += [packed, pos.view(np.uint8), neg.view(np.uint8)]
            layout.append((m, offset, packed.size, m.shape[1]))
            offset += packed.size + 8 * m.shape[1]
        if not large:
            self.bytes_per_step = self.comm.bytes_sent - before
            return
        message = np.concatenate(parts)
        gathered = self.comm.allgather(message) if self.comm.size > 1 else message[None]
        n = len(gathered)
        for m, off, nb, C in layout:
            # decoded straight into the gradient: the first rank assigns, the last one scales
            out = m if m.dtype == np.float32 and m.flags.c_contiguous else \
                np.empty(m.shape, np.float32)
            for k, msg in enumerate(gathered):
                _accumulate(msg[off:off + nb], msg[off + nb:off + nb + 4 * C].view(np.float32),
                            msg[off + nb + 4 * C:off + nb + 8 * C].view(np.float32), out,
                            k == 0, np.float32(1.0 / n if k == n - 1 else 1.0))
            if out is not m:
                m[...] = out
        self.bytes_per_step = self.comm.bytes_sent - before


@numba.njit(cache=True)
def _accumulate(packed, pos, neg, out, first, scale):
    """out float32 [R, C] = (out, or 0 if ``first``, + the reconstruction of packed bits in
    np.packbits order per column) * scale."""
    R, C = out.shape
    if first:
        out[:] = 0  # (a plain store of the selected value does not vectorise; this does)
    for r in range(R):
        for c in range(C):
            i = r * C + c
            if (packed[i >> 3] >> (7 - (i & 7))) & 1:
                out[r, c] = (out[r, c] + pos[c]) * scale
            else:
                out[r, c] = (out[r, c] + neg[c]) * scale
