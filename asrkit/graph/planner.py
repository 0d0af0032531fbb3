"""Compile a graph once into a schedule: topological order, liveness, buffer reuse, recompute.

The plan is a list of steps (``fwd`` node, ``bwd`` node, ``recompute`` node). For every buffer
(the forward value of a node, or the gradient flowing into it) the planner knows the step that
makes it and the last step that reads it, so the executor drops each buffer right after its last
use and ops that can write into a given array (``out=``) get a *slot*: a storage shared with other
nodes whose lifetimes do not overlap (greedy interval colouring, as MXNet's memory planner),
kept between runs so that steady-state training allocates no new forward temporaries.
Elementwise ops may take over the slot of an input that dies at that very step (in place). In
the backward pass, an op may write an input's gradient into its own output gradient when the
engine owns that buffer and drops it after the step (``OpContext.g_writable``).

Views (reshape, transpose, identity) share the storage of their input, so that storage lives as
long as its longest-lived view. Outputs never get a slot: they belong to the caller.

With ``recompute=True`` (MXNet's "mirror"), a cheap op whose inputs stay alive into the backward
pass anyway is not kept from forward to backward: it is dropped after its last forward use and
recomputed just before the first backward step that reads it. That trades a little compute for
memory and never changes results.
"""

from __future__ import annotations

import threading

from asrkit.graph.node import Function, Input, Parameter
from asrkit.graph.topo import topological_order

FWD, BWD, RECOMPUTE = "fwd", "bwd", "recompute"


class Step:
    """One step of a plan: ``kind`` (fwd/bwd/recompute) on ``node``; buffers to free after it."""

    __slots__ = ("kind", "node", "free_values", "free_grads", "slot", "needs_grad")

    def __init__(self, kind, node):
        self.kind = kind
        self.node = node
        self.free_values: list = []
        self.free_grads: list = []
        self.slot: int | None = None  # storage slot the output is written into (out=)
        self.needs_grad: tuple | None = None

    def __repr__(self):
        return f"Step({self.kind}, {self.node!r}, slot={self.slot})"


class Plan:
    """A compiled schedule for ``outputs`` (and gradients of ``root`` w.r.t. ``wrt``)."""

    def __init__(self, outputs, wrt=(), root=None, recompute=False, reuse=True):
        self.outputs = list(outputs)
        self.root = root
        self.wrt = list(wrt)
        self.recompute = recompute
        self.reuse = reuse
        roots = self.outputs + ([root] if root is not None and root not in self.outputs else [])
        self.order = topological_order(roots)
        self.inputs = [n for n in self.order if isinstance(n, Input)]
        self.parameters = [n for n in self.order if isinstance(n, Parameter)]
        self.functions = [n for n in self.order if isinstance(n, Function)]
        self.grad_nodes = self._gradient_set()
        self.recomputed: set = set()
        self.steps = self._schedule()
        self.n_slots = 0
        self._storage = threading.local()
        self._liveness()
        if reuse:
            self._assign_slots()

    def slot_buffers(self) -> list:
        """This thread's storage of the slots (uint8 arrays or None, ``n_slots`` long), kept
        between runs: one list per thread, since runs of one plan in several threads at once
        (a server's model threads) must not write into each other's values."""
        bufs = getattr(self._storage, "buffers", None)
        if bufs is None:
            bufs = self._storage.buffers = []
        while len(bufs) < self.n_slots:
            bufs.append(None)
        return bufs

    # -- which nodes carry a gradient ------------------------------------------------------
    def _gradient_set(self) -> set:
        if self.root is None or not self.wrt:
            return set()
        for w in self.wrt:
            if w not in set(self.order):
                raise ValueError(f"{w!r} is not an input of the graph of {self.root!r}")
        reach = set(self.wrt)
        for n in self.order:
            if isinstance(n, Function) and n.op.differentiable and any(i in reach
                                                                        for i in n.inputs):
                reach.add(n)
        ancestors = set(topological_order([self.root]))
        return reach & ancestors

    def _backward_nodes(self):
        return [n for n in reversed(self.functions) if n in self.grad_nodes]

    # -- the schedule ----------------------------------------------------------------------
    def _reads(self, step):
        """Yield the forward values a step reads."""
        n = step.node
        if step.kind in (FWD, RECOMPUTE):
            yield from n.inputs
            return
        for k in n.op.needs:
            if k == "out":
                yield n
            elif k < len(n.inputs):  # optional trailing inputs
                yield n.inputs[k]

    def _schedule(self) -> list[Step]:
        steps = [Step(FWD, n) for n in self.functions]
        bwd = []
        for n in self._backward_nodes():
            s = Step(BWD, n)
            s.needs_grad = tuple(i in self.grad_nodes and i.dtype.kind == "f" for i in n.inputs)
            bwd.append(s)
        if not self.recompute or not bwd:
            return steps + bwd
        # Mirror: find cheap nodes worth recomputing, given the lifetimes without recompute.
        F = len(steps)
        last_fwd, first_bwd, last_any = {}, {}, {}
        for i, s in enumerate(steps):
            for v in self._reads(s):
                last_fwd[v] = i
        for j, s in enumerate(bwd):
            for v in self._reads(s):
                first_bwd.setdefault(v, F + j)
                last_any[v] = F + j
        keep = set(self.outputs)
        for n in self.functions:
            if (not n.op.cheap or n.op.stochastic or n.op.stateful or n in keep
                    or n not in first_bwd):
                continue
            need_at = first_bwd[n]
            if all(not isinstance(i, Function) or (i not in self.recomputed
                                                  and last_any.get(i, -1) >= need_at)
                   for i in n.inputs):
                self.recomputed.add(n)
        out = list(steps)
        done = set()
        for s in bwd:
            for v in self._reads(s):
                if v in self.recomputed and v not in done:
                    out.append(Step(RECOMPUTE, v))
                    done.add(v)
            out.append(s)
        return out

    # -- liveness --------------------------------------------------------------------------
    def _liveness(self):
        """Fill each step's free lists; record births and deaths of value buffers."""
        end = len(self.steps)
        value_death, grad_death = {}, {}
        self.value_birth = {}
        self.value_death = {}  # (node, version) -> last reading step
        version = {}
        for i, s in enumerate(self.steps):
            if s.kind in (FWD, RECOMPUTE):
                for v in s.node.inputs:
                    value_death[(v, version.get(v, 0))] = i
                ver = version[s.node] = version.get(s.node, -1) + 1
                self.value_birth[(s.node, ver)] = i
                value_death.setdefault((s.node, ver), i)
            else:
                for v in self._reads(s):
                    value_death[(v, version.get(v, 0))] = i
                grad_death[s.node] = i
        for n in self.outputs:
            value_death[(n, version.get(n, 0))] = end
        for key, i in value_death.items():
            node = key[0]
            if isinstance(node, Function) and i < end:
                self.steps[i].free_values.append(node)
        for n, i in grad_death.items():
            if n not in self.wrt:
                self.steps[i].free_grads.append(n)
        self.value_death = value_death

    def _assign_slots(self):
        """Greedy slot colouring of the forward values written through ``out=``."""
        storage = {}  # node -> storage owner (views map to their base's owner)
        death = {}    # owner -> last step any alias of it is read
        outputs = set(self.outputs)
        for n in self.functions:
            owner = n
            if n.op.view and isinstance(n.inputs[0], Function):
                owner = storage[n.inputs[0]]
            storage[n] = owner
            d = len(self.steps) + 1 if n in outputs else self.value_death.get((n, 0), -1)
            death[owner] = max(death.get(owner, -1), d)
        # Slots persist between runs, so only values that die within the forward pass get one;
        # activations kept for the backward pass are plain arrays freed after their last use.
        end = len(self.steps) + 1
        first_bwd = next((i for i, s in enumerate(self.steps) if s.kind != FWD), end)
        free, slot_of_owner, n_slots = [], {}, 0
        dying_at: dict[int, list] = {}
        for owner, d in death.items():
            dying_at.setdefault(d, []).append(owner)
        for i, s in enumerate(self.steps):
            n = s.node
            taken = None
            if s.kind == FWD and n.op.out_shape is not None and storage.get(n) is n \
                    and n not in outputs and death.get(n, end) < first_bwd:
                x0 = n.inputs[0] if n.inputs else None
                o0 = storage.get(x0) if isinstance(x0, Function) else None
                if (n.op.inplace and o0 is not None and o0 in slot_of_owner
                        and death.get(o0) == i):
                    slot = slot_of_owner[o0]
                    taken = o0
                elif free:
                    slot = free.pop()
                else:
                    slot, n_slots = n_slots, n_slots + 1
                slot_of_owner[n] = slot
                s.slot = slot
            for owner in dying_at.get(i, ()):
                if owner in slot_of_owner and owner is not taken:
                    free.append(slot_of_owner[owner])
        self.n_slots = n_slots

    # -- reporting -------------------------------------------------------------------------
    def memory_report(self, sizes: dict) -> dict:
        """Peak bytes of this schedule against keeping every buffer (a naive engine).

        sizes: ``{("v", node): bytes, ("g", node): bytes}`` recorded by the executor (views and
        gradients computed in place 0; those count under ``("g_inplace", node)`` for naive).
        Returns ``{"naive_bytes", "planned_bytes", "slot_bytes", "slots"}``: naive = every forward
        value and gradient kept for the whole run; planned = slot storage plus the peak of the
        other buffers alive at once under this plan's liveness.
        """
        naive = sum(sizes.values())
        slot_cap = [0] * self.n_slots
        live, peak = 0, 0
        alive_v, alive_g = {}, {}
        for s in self.steps:
            n = s.node
            if s.kind in (FWD, RECOMPUTE):
                b = sizes.get(("v", n), 0)
                if s.slot is not None:
                    slot_cap[s.slot] = max(slot_cap[s.slot], b)
                else:
                    alive_v[n] = b
                    live += b
            else:
                for inp, need in zip(n.inputs, s.needs_grad):
                    if need and inp not in alive_g:
                        alive_g[inp] = sizes.get(("g", inp), 0)
                        live += alive_g[inp]
            peak = max(peak, live)
            for v in s.free_values:
                live -= alive_v.pop(v, 0)
            for g in s.free_grads:
                live -= alive_g.pop(g, 0)
        return {"naive_bytes": int(naive), "planned_bytes": int(sum(slot_cap) + peak),
                "slot_bytes": int(sum(slot_cap)), "slots": self.n_slots}
