"""The two semirings of speech graphs, on weights stored as -log probabilities.

tropical: plus = min, times = +, zero = +inf, one = 0 (Viterbi; OpenFst "standard").
log:      plus = -log(exp(-a) + exp(-b)), times = +, zero = +inf, one = 0 (OpenFst "log").

Both share times, zero and one, so only ``plus`` differs; the njit versions are used by the
kernels, the numpy versions by vectorised code.
"""

from __future__ import annotations

import numpy as np
from numba import njit

TROPICAL = "tropical"
LOG = "log"
SEMIRINGS = (TROPICAL, LOG)
ZERO = np.inf
ONE = 0.0
# OpenFst's kDelta: weights closer than this are equal (convergence of shortest distance,
# quantisation in determinisation and minimisation).
DELTA = 1.0 / 1024.0
PYNINI_ARC_TYPE = {TROPICAL: "standard", LOG: "log"}


def check_semiring(semiring: str) -> str:
    """Return ``semiring`` if known, else raise ValueError."""
    if semiring not in SEMIRINGS:
        raise ValueError(f"unknown semiring {semiring!r}; expected 'tropical' or 'log'")
    return semiring


def semiring_code(semiring: str) -> int:
    """0 for tropical, 1 for log: the flag the njit kernels take."""
    return SEMIRINGS.index(check_semiring(semiring))


@njit(cache=True, inline="always")
def log_plus(a: float, b: float) -> float:
    """-log(exp(-a) + exp(-b)), exact at infinities."""
    if a == np.inf:
        return b
    if b == np.inf:
        return a
    if a < b:
        return a - np.log1p(np.exp(a - b))
    return b - np.log1p(np.exp(b - a))


@njit(cache=True, inline="always")
def plus(a: float, b: float, code: int) -> float:
    """Semiring plus: min for code 0 (tropical), log-add for code 1 (log)."""
    if code == 0:
        return a if a < b else b
    return log_plus(a, b)


def plus_np(a, b, semiring: str):
    """Elementwise semiring plus of numpy arrays (or scalars)."""
    if semiring == TROPICAL:
        return np.minimum(a, b)
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    m = np.minimum(a, b)
    with np.errstate(invalid="ignore"):
        out = m - np.log1p(np.exp(-np.abs(a - b)))
    return np.where(np.isinf(m), m, out)


def sum_np(values, semiring: str) -> float:
    """Semiring sum of a 1-D array (zero for an empty one)."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return ZERO
    m = float(values.min())
    if semiring == TROPICAL or m == np.inf:
        return m
    return m - float(np.log(np.exp(-(values - m)).sum()))
