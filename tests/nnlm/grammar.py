"""A small stochastic grammar whose sentences the tests train on (number agreement included).

S -> NP(n) VP(n); NP(n) -> Det(n) [Adj] N(n) [PP]; PP -> P NP(any); VP(n) -> Vt(n) NP(any) | Vi(n)
where n is singular or plural and the verb agrees with the head noun of the subject, possibly
several words back (over an adjective and a prepositional phrase).
"""

from __future__ import annotations

import numpy as np

DET = {"sg": ["the", "a"], "pl": ["the", "some"]}
ADJ = ["big", "small", "red"]
NOUN = {"sg": ["cat", "dog", "bird"], "pl": ["cats", "dogs", "birds"]}
PREP = ["near", "behind"]
VT = {"sg": ["sees", "likes"], "pl": ["see", "like"]}
VI = {"sg": ["sleeps", "runs"], "pl": ["sleep", "run"]}


def _np(rng, number, depth=0):
    words = [rng.choice(DET[number])]
    if rng.random() < 0.4:
        words.append(rng.choice(ADJ))
    words.append(rng.choice(NOUN[number]))
    if depth == 0 and rng.random() < 0.25:
        words += [rng.choice(PREP)] + _np(rng, rng.choice(["sg", "pl"]), depth + 1)
    return words


def sentence(rng: np.random.Generator) -> list[str]:
    """One sentence of the grammar as a list of words."""
    number = "sg" if rng.random() < 0.5 else "pl"
    words = _np(rng, number)
    if rng.random() < 0.6:
        words += [rng.choice(VT[number])] + _np(rng, rng.choice(["sg", "pl"]), 1)
    else:
        words.append(rng.choice(VI[number]))
    return [str(w) for w in words]


def corpus(n: int, seed: int) -> list[str]:
    """``n`` sentences (strings) drawn with ``seed``."""
    rng = np.random.default_rng(seed)
    return [" ".join(sentence(rng)) for _ in range(n)]
