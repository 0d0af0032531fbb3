"""Parameter initialisers (CNTK/Glorot conventions), seeded for reproducible models.

An initialiser is ``init(shape, rng) -> float64 array``. Fan-in/fan-out follow the convention of
``times(x, W)``: ``W [in, out]``; for conv kernels ``[K, Cin, Cout]`` the receptive field counts.
"""

from __future__ import annotations

import numpy as np

_state = {"rng": np.random.default_rng(0)}


def set_seed(seed: int) -> None:
    """Reseed the generator that parameters draw from when no ``seed`` is given."""
    _state["rng"] = np.random.default_rng(seed)


def default_rng() -> np.random.Generator:
    """The generator shared by parameters created without an explicit seed."""
    return _state["rng"]


def _fans(shape):
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    receptive = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
    return shape[-2] * receptive, shape[-1] * receptive


def zeros():
    """All zeros."""
    return lambda shape, rng: np.zeros(shape)


def ones():
    """All ones."""
    return lambda shape, rng: np.ones(shape)


def constant_init(value: float):
    """Every entry ``value``."""
    return lambda shape, rng: np.full(shape, float(value))


def uniform(scale: float = 0.05):
    """Uniform on ``[-scale, scale]``."""
    return lambda shape, rng: rng.uniform(-scale, scale, shape)


def normal(scale: float = 0.01):
    """Normal with standard deviation ``scale``."""
    return lambda shape, rng: rng.normal(0.0, scale, shape)


def glorot_uniform(scale: float = 1.0):
    """Glorot/Xavier uniform: ``U[-a, a]``, ``a = scale * sqrt(6 / (fan_in + fan_out))``."""
    def init(shape, rng):
        fi, fo = _fans(shape)
        a = scale * np.sqrt(6.0 / (fi + fo))
        return rng.uniform(-a, a, shape)
    return init


def glorot_normal(scale: float = 1.0):
    """Glorot/Xavier normal: std ``scale * sqrt(2 / (fan_in + fan_out))``."""
    def init(shape, rng):
        fi, fo = _fans(shape)
        return rng.normal(0.0, scale * np.sqrt(2.0 / (fi + fo)), shape)
    return init


def he_normal(scale: float = 1.0):
    """He/Kaiming normal for ReLU nets: std ``scale * sqrt(2 / fan_in)``."""
    def init(shape, rng):
        fi, _ = _fans(shape)
        return rng.normal(0.0, scale * np.sqrt(2.0 / fi), shape)
    return init


def he_uniform(scale: float = 1.0):
    """He/Kaiming uniform: ``U[-a, a]``, ``a = scale * sqrt(6 / fan_in)``."""
    def init(shape, rng):
        fi, _ = _fans(shape)
        a = scale * np.sqrt(6.0 / fi)
        return rng.uniform(-a, a, shape)
    return init


INITIALIZERS = {
    "zeros": zeros, "ones": ones, "constant": constant_init, "uniform": uniform,
    "normal": normal, "glorot_uniform": glorot_uniform, "glorot_normal": glorot_normal,
    "he_normal": he_normal, "he_uniform": he_uniform,
}


def resolve_init(init, shape, seed=None) -> np.ndarray:
    """Materialise ``init`` for ``shape``: a callable, a name, a number or an array.

    Returns a float64 array of exactly ``shape``.
    """
    rng = np.random.default_rng(seed) if seed is not None else default_rng()
    if isinstance(init, str):
        if init not in INITIALIZERS:
            raise ValueError(f"unknown initializer {init!r}; known: {', '.join(INITIALIZERS)}")
        init = INITIALIZERS[init]()
    if callable(init):
        value = np.asarray(init(tuple(shape), rng), dtype=np.float64)
    elif np.isscalar(init):
        value = np.full(shape, float(init))
    else:
        value = np.asarray(init, dtype=np.float64)
    if value.shape != tuple(shape):
        raise ValueError(f"initial value has shape {value.shape}; the parameter is {tuple(shape)}")
    return value
