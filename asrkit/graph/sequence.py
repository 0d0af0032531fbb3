"""The value of a sequence node: a padded array ``[T, B, ...]`` with ``lengths: int32[B]``.

Padding frames (``t >= lengths[b]``) hold zeros everywhere inside the engine; they never reach a
loss, a gradient or a normalisation statistic.
"""

from __future__ import annotations

import numpy as np


class Sequence:
    """A batch of variable-length sequences.

    ``data``: array ``[T, B, ...]`` (padded); ``lengths``: ``int32[B]`` with ``0 <= lengths <= T``.
    ``np.asarray(seq)`` gives the padded data.
    """

    __slots__ = ("data", "lengths")

    def __init__(self, data, lengths=None):
        data = np.asarray(data) if not hasattr(data, "__cuda_array_interface__") else data
        if data.ndim < 2:
            raise ValueError(f"a Sequence needs data of rank >= 2 ([T, B, ...]); got {data.shape}")
        T, B = data.shape[:2]
        if lengths is None:
            lengths = np.full(B, T, np.int32)
        lengths = np.asarray(lengths)
        if lengths.shape != (B,) or lengths.dtype.kind not in "iu":
            raise ValueError(f"lengths must be an int array of shape ({B},); got "
                             f"{lengths.dtype} {lengths.shape}")
        if B and (lengths.min() < 0 or lengths.max() > T):
            raise ValueError(f"lengths must lie in [0, {T}]; got {lengths.tolist()}")
        self.data = data
        self.lengths = lengths.astype(np.int32, copy=False)

    @classmethod
    def from_list(cls, arrays, dtype=None) -> Sequence:
        """Pad a list of ``B`` arrays ``[T_b, ...]`` into a Sequence ``[max T_b, B, ...]``."""
        arrays = [np.asarray(a, dtype=dtype) for a in arrays]
        lengths = np.array([len(a) for a in arrays], np.int32)
        T = int(lengths.max()) if len(arrays) else 0
        tail = arrays[0].shape[1:] if arrays else ()
        out = np.zeros((T, len(arrays), *tail), arrays[0].dtype if arrays else np.float32)
        for b, a in enumerate(arrays):
            out[: len(a), b] = a
        return cls(out, lengths)

    def unpad(self) -> list:
        """Return the ``B`` sequences as a list of arrays ``[lengths[b], ...]``."""
        return [self.data[: int(n), b] for b, n in enumerate(self.lengths)]

    @property
    def shape(self):
        """Shape of the padded data."""
        return self.data.shape

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.data, dtype=dtype)

    def __repr__(self):
        return f"Sequence(shape={tuple(self.data.shape)}, lengths={self.lengths.tolist()})"


def padding_mask(lengths: np.ndarray, T: int) -> np.ndarray:
    """Return ``bool [T, B]``: True on padding frames (``t >= lengths[b]``)."""
    return np.arange(T)[:, None] >= np.asarray(lengths)[None, :]


def valid_mask(lengths: np.ndarray, T: int, ndim: int = 2, dtype=bool) -> np.ndarray:
    """Return the mask ``[T, B, 1, ...]`` (``ndim`` axes) as ``dtype``: 1 on real frames."""
    m = np.arange(T)[:, None] < np.asarray(lengths)[None, :]
    return m.reshape(m.shape + (1,) * (ndim - 2)).astype(dtype, copy=False)


def zero_padding(x: np.ndarray, lengths: np.ndarray, copy: bool = False) -> np.ndarray:
    """Return ``x`` ``[T, B, ...]`` with padding frames set to zero (in place unless ``copy``)."""
    if lengths is None or x.shape[0] == 0:
        return x
    if int(np.min(lengths, initial=x.shape[0])) >= x.shape[0]:
        return x
    pad = padding_mask(lengths, x.shape[0])
    if copy:
        x = x.copy()
    x[pad] = 0
    return x
