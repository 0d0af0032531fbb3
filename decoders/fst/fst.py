"""The WFST type: parallel numpy arrays of arcs, sorted by source state (CSR), as in k2.

An ``Fst`` is immutable by convention: algorithms return new machines. Build one arc by arc
with ``FstBuilder`` (``add_state``, ``add_arc``, ``set_final``, ``set_start``, ``compile``), from
arrays with ``Fst(...)``, or from OpenFst text with ``Fst.from_text``.

Arrays (A arcs, S states):
  src, dst          int32 [A]   source and destination state of each arc, sorted by src
  ilabel, olabel    int32 [A]   input and output label; 0 is epsilon
  weight            float [A]   -log weight (float32 or float64)
  final             float [S]   final weight per state; +inf means not final
  offsets           int64 [S+1] arcs of state s are the slice offsets[s]:offsets[s+1]
  start             int         the start state, -1 for the empty machine
"""

from __future__ import annotations

import os
from array import array

import numpy as np

from asrkit.decoders.fst.semiring import TROPICAL, check_semiring
from asrkit.decoders.fst.symbols import SymbolTable

LABEL_DTYPE = np.int32


def _weight_dtype(*arrays) -> np.dtype:
    dt = np.result_type(*[a.dtype for a in arrays if a is not None and a.size]) if any(
        a is not None and a.size for a in arrays) else np.dtype(np.float32)
    return np.dtype(np.float64) if dt == np.float64 else np.dtype(np.float32)


class Fst:
    """A weighted finite-state transducer stored as arrays (see the module docstring).

    ``Fst(num_states, start, final, src, dst, ilabel, olabel, weight, semiring="tropical",
    isymbols=None, osymbols=None)`` sorts the arcs by source state (stable, so the order within
    a state is kept) and computes the CSR offsets.
    """

    __slots__ = ("start", "final", "src", "dst", "ilabel", "olabel", "weight", "offsets",
                 "semiring", "isymbols", "osymbols")

    def __init__(self, num_states: int, start: int, final, src, dst, ilabel, olabel, weight,
                 semiring: str = TROPICAL, isymbols: SymbolTable | None = None,
                 osymbols: SymbolTable | None = None, dtype=None):
        src = np.asarray(src, dtype=LABEL_DTYPE).ravel()
        n = src.size
        dst = np.asarray(dst, dtype=LABEL_DTYPE).ravel()
        ilabel = np.asarray(ilabel, dtype=LABEL_DTYPE).ravel()
        olabel = np.asarray(olabel, dtype=LABEL_DTYPE).ravel()
        weight = np.asarray(weight).ravel()
        final = np.asarray(final).ravel()
        if dtype is None:
            dtype = _weight_dtype(weight, final)
        weight = weight.astype(dtype, copy=False)
        final = final.astype(dtype, copy=False)
        if not (dst.size == ilabel.size == olabel.size == weight.size == n):
            raise ValueError("arc arrays differ in length: "
                             f"{n}, {dst.size}, {ilabel.size}, {olabel.size}, {weight.size}")
        num_states = int(num_states)
        if final.size != num_states:
            raise ValueError(f"final has {final.size} entries for {num_states} states")
        if n and (src.min() < 0 or dst.min() < 0 or src.max() >= num_states
                  or dst.max() >= num_states):
            raise ValueError(f"arc state out of range [0, {num_states})")
        if n and (ilabel.min() < 0 or olabel.min() < 0):
            raise ValueError("negative label")
        start = int(start)
        if not -1 <= start < num_states:
            raise ValueError(f"start state {start} out of range for {num_states} states")
        if n > 1 and np.any(src[1:] < src[:-1]):
            order = np.argsort(src, kind="stable")
            src, dst, ilabel, olabel, weight = (src[order], dst[order], ilabel[order],
                                                olabel[order], weight[order])
        self.start = start
        self.final = final
        self.src, self.dst, self.ilabel, self.olabel, self.weight = src, dst, ilabel, olabel, weight
        self.offsets = np.zeros(num_states + 1, dtype=np.int64)
        if n:
            np.cumsum(np.bincount(src, minlength=num_states), out=self.offsets[1:])
        self.semiring = check_semiring(semiring)
        self.isymbols = isymbols
        self.osymbols = osymbols

    # -- basic properties ---------------------------------------------------------------------

    @property
    def num_states(self) -> int:
        """Number of states."""
        return self.final.size

    @property
    def num_arcs(self) -> int:
        """Number of arcs."""
        return self.src.size

    @property
    def dtype(self) -> np.dtype:
        """Weight dtype (float32 or float64)."""
        return self.weight.dtype

    def num_arcs_of(self, state: int) -> int:
        """Number of arcs leaving ``state``."""
        return int(self.offsets[state + 1] - self.offsets[state])

    def arcs(self, state: int):
        """Arcs of ``state`` as ``(ilabel, olabel, weight, dst)`` tuples (OpenFst order)."""
        a, b = self.offsets[state], self.offsets[state + 1]
        return list(zip(self.ilabel[a:b].tolist(), self.olabel[a:b].tolist(),
                        self.weight[a:b].tolist(), self.dst[a:b].tolist(), strict=True))

    def is_final(self, state: int) -> bool:
        """True when ``state`` has a finite final weight."""
        return bool(np.isfinite(self.final[state]))

    def final_states(self) -> np.ndarray:
        """int64 [F]: the final states in increasing order."""
        return np.flatnonzero(np.isfinite(self.final))

    @property
    def is_acceptor(self) -> bool:
        """True when every arc has ilabel == olabel."""
        return bool(np.array_equal(self.ilabel, self.olabel))

    def is_ideterministic(self) -> bool:
        """True when no state has two arcs with the same input label (epsilon counts as a label)."""
        if self.num_arcs < 2:
            return True
        order = np.lexsort((self.ilabel, self.src))
        s, i = self.src[order], self.ilabel[order]
        return not bool(np.any((s[1:] == s[:-1]) & (i[1:] == i[:-1])))

    # -- copies -------------------------------------------------------------------------------

    def replace(self, **changes) -> Fst:
        """A new Fst with some of num_states/start/final/src/dst/ilabel/olabel/weight/semiring/
        isymbols/osymbols replaced (the others shared, since Fsts are not mutated in place)."""
        kw = dict(num_states=self.num_states, start=self.start, final=self.final, src=self.src,
                  dst=self.dst, ilabel=self.ilabel, olabel=self.olabel, weight=self.weight,
                  semiring=self.semiring, isymbols=self.isymbols, osymbols=self.osymbols)
        kw.update(changes)
        if "dtype" not in kw:
            kw["dtype"] = self.dtype
        return Fst(**kw)

    def copy(self) -> Fst:
        """A deep copy."""
        return Fst(self.num_states, self.start, self.final.copy(), self.src.copy(),
                   self.dst.copy(), self.ilabel.copy(), self.olabel.copy(), self.weight.copy(),
                   self.semiring, self.isymbols, self.osymbols)

    def astype(self, dtype) -> Fst:
        """The same machine with weights of ``dtype`` (float32 or float64)."""
        return self.replace(weight=self.weight.astype(dtype), final=self.final.astype(dtype),
                            dtype=np.dtype(dtype))

    def with_semiring(self, semiring: str) -> Fst:
        """The same arrays read in another semiring (weights unchanged, as OpenFst's arcmap)."""
        return self.replace(semiring=semiring)

    @classmethod
    def empty(cls, semiring: str = TROPICAL, dtype=np.float32) -> Fst:
        """The machine with no states (accepts nothing)."""
        z = np.zeros(0, dtype=np.int32)
        return cls(0, -1, np.zeros(0, dtype), z, z, z, z, np.zeros(0, dtype), semiring,
                   dtype=dtype)

    # -- I/O (implemented in text_format.py and binary.py) -------------------------------------

    @classmethod
    def from_text(cls, text: str, isymbols: SymbolTable | None = None,
                  osymbols: SymbolTable | None = None, acceptor: bool = False,
                  semiring: str = TROPICAL, dtype=np.float32, name: str = "<string>") -> Fst:
        """Parse OpenFst AT&T text (see ``asrkit.decoders.fst.text_format.fst_from_text``)."""
        from asrkit.decoders.fst.text_format import fst_from_text

        return fst_from_text(text, isymbols=isymbols, osymbols=osymbols, acceptor=acceptor,
                             semiring=semiring, dtype=dtype, name=name)

    def to_text(self, isymbols: SymbolTable | None = None, osymbols: SymbolTable | None = None,
                acceptor: bool = False) -> str:
        """OpenFst AT&T text (see ``asrkit.decoders.fst.text_format.fst_to_text``)."""
        from asrkit.decoders.fst.text_format import fst_to_text

        return fst_to_text(self, isymbols=isymbols, osymbols=osymbols, acceptor=acceptor)

    def save(self, path: str | os.PathLike) -> None:
        """Write the fast binary form (npz), atomically."""
        from asrkit.decoders.fst.binary import save_fst

        save_fst(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Fst:
        """Read the binary form written by ``save``."""
        from asrkit.decoders.fst.binary import load_fst

        return load_fst(path)

    def to_pynini(self):
        """This machine as a ``pynini.Fst`` (pynini is needed only for this call)."""
        from asrkit.decoders.fst.pynini_bridge import to_pynini

        return to_pynini(self)

    @classmethod
    def from_pynini(cls, fst, dtype=np.float64) -> Fst:
        """Convert a ``pynini.Fst`` (standard or log arcs) to an Fst."""
        from asrkit.decoders.fst.pynini_bridge import from_pynini

        return from_pynini(fst, dtype=dtype)

    def __repr__(self) -> str:
        return (f"Fst({self.semiring}, {self.num_states} states, {self.num_arcs} arcs, "
                f"start={self.start})")


class FstBuilder:
    """A mutable machine: add states and arcs, then ``compile()`` to an ``Fst``.

    >>> b = FstBuilder()
    >>> s0, s1 = b.add_state(), b.add_state()
    >>> b.set_start(s0); b.add_arc(s0, s1, 1, 2, 0.5); b.set_final(s1)
    >>> b.compile().num_arcs
    1
    """

    def __init__(self, semiring: str = TROPICAL, isymbols: SymbolTable | None = None,
                 osymbols: SymbolTable | None = None):
        self.semiring = check_semiring(semiring)
        self.isymbols, self.osymbols = isymbols, osymbols
        self._src, self._dst = array("i"), array("i")
        self._ilabel, self._olabel = array("i"), array("i")
        self._weight = array("d")
        self._final = array("d")
        self.start = -1

    @property
    def num_states(self) -> int:
        """States added so far."""
        return len(self._final)

    @property
    def num_arcs(self) -> int:
        """Arcs added so far."""
        return len(self._src)

    def add_state(self) -> int:
        """Add a non-final state; return its id."""
        self._final.append(np.inf)
        return len(self._final) - 1

    def add_states(self, n: int) -> range:
        """Add ``n`` states; return their ids."""
        first = len(self._final)
        self._final.extend([np.inf] * n)
        return range(first, first + n)

    def add_arc(self, src: int, dst: int, ilabel: int, olabel: int | None = None,
                weight: float = 0.0) -> None:
        """Add an arc ``src -> dst`` with labels ``ilabel:olabel`` (olabel defaults to ilabel)."""
        n = len(self._final)
        if not (0 <= src < n and 0 <= dst < n):
            raise ValueError(f"arc {src} -> {dst}: state out of range [0, {n})")
        self._src.append(src)
        self._dst.append(dst)
        self._ilabel.append(ilabel)
        self._olabel.append(ilabel if olabel is None else olabel)
        self._weight.append(weight)

    def set_final(self, state: int, weight: float = 0.0) -> None:
        """Make ``state`` final with ``weight`` (+inf makes it non-final again)."""
        self._final[state] = weight

    def final(self, state: int) -> float:
        """The final weight of ``state`` (+inf when not final)."""
        return self._final[state]

    def set_start(self, state: int) -> None:
        """Make ``state`` the start state."""
        if not 0 <= state < len(self._final):
            raise ValueError(f"start state {state} out of range")
        self.start = state

    def compile(self, dtype=np.float32) -> Fst:
        """The arrays form of the machine, with weights of ``dtype``."""
        def arr(a, dt):
            return np.array(a, dtype=dt)

        return Fst(len(self._final), self.start, arr(self._final, np.float64),
                   arr(self._src, np.int32), arr(self._dst, np.int32),
                   arr(self._ilabel, np.int32), arr(self._olabel, np.int32),
                   arr(self._weight, np.float64), self.semiring, self.isymbols,
                   self.osymbols, dtype=dtype)
