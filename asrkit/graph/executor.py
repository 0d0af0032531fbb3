"""Run a compiled :class:`~asrkit.graph.planner.Plan` on a device: forward, then backward.

The executor keeps the invariants of DESIGN.md's "Sequences": every sequence value has zeros on
its padding frames and every gradient flowing into a sequence node is zero there, so padding never
reaches a loss, a gradient or a statistic. Ops flagged ``keeps_padding_zero`` preserve that by
themselves (``grad_keeps_padding_zero``: in their backward only); the engine masks the others.
"""

from __future__ import annotations

from collections import OrderedDict
from contextlib import nullcontext

import numpy as np

from asrkit.graph.backends import get_backend
from asrkit.graph.errors import GraphError, format_shape
from asrkit.graph.node import Constant, Input, Parameter
from asrkit.graph.planner import BWD, Plan
from asrkit.graph.primitive import OpContext
from asrkit.graph.sequence import Sequence, zero_padding
from asrkit.utils.memory import keep_freed_memory

_PLANS: OrderedDict = OrderedDict()
_MAX_PLANS = 64


def get_plan(outputs, wrt=(), root=None, recompute=False, reuse=True) -> Plan:
    """Return the cached Plan for these outputs/gradients, compiling it on first use."""
    key = (tuple(map(id, outputs)), id(root), tuple(map(id, wrt)), recompute, reuse)
    plan = _PLANS.get(key)
    if plan is None:
        plan = Plan(outputs, wrt=wrt, root=root, recompute=recompute, reuse=reuse)
        _PLANS[key] = plan
        if len(_PLANS) > _MAX_PLANS:
            _PLANS.popitem(last=False)
    else:
        _PLANS.move_to_end(key)
    return plan


class RunResult:
    """What one run produced: output values, their lengths, gradients and buffer sizes."""

    def __init__(self, outputs, lengths, grads, sizes):
        self.outputs = outputs  # list of arrays (padded data for sequences)
        self.lengths = lengths  # list of int32[B] or None, parallel to outputs
        self.grads = grads      # {wrt node: array}
        self.sizes = sizes      # {("v"|"g", node): bytes}


def _lookup_feed(node: Input, feeds: dict):
    if node in feeds:
        return feeds[node]
    if node.name and node.name in feeds:
        return feeds[node.name]
    label = f"'{node.name}' " if node.name else ""
    raise GraphError(f"input {label}{format_shape(node.shape)} was not fed; pass it in the feeds "
                     "dict as {input: array} or {input: (array, lengths)}")


def bind_feed(node: Input, value, dtype=None):
    """Validate and convert one feed; returns ``(array, lengths or None)`` on the host.

    value: an array, ``(array, lengths)`` or a Sequence. Float data is cast to ``dtype`` (or the
    input's dtype); padding frames are zeroed on a copy, never in the caller's array.
    """
    label = f"input '{node.name}'" if node.name else f"input {format_shape(node.shape)}"
    lengths = None
    if isinstance(value, Sequence):
        value, lengths = value.data, value.lengths
    elif isinstance(value, tuple) and len(value) == 2:
        value, lengths = value
    a = np.asarray(value)
    want = np.dtype(dtype) if (dtype is not None and node.dtype.kind == "f") else node.dtype
    if a.dtype.kind == "f" and want.kind in "iu":
        if not np.all(a == np.round(a)):
            raise GraphError(f"{label} holds integer indices; got non-integer floats")
    a = a.astype(want, copy=False)
    if a.ndim != len(node.shape) or any(d is not None and d != s
                                        for d, s in zip(node.shape, a.shape)):
        raise GraphError(f"{label}: expected an array of shape {format_shape(node.shape)}, "
                         f"got {list(a.shape)}")
    if node.is_sequence:
        T, B = a.shape[:2]
        if lengths is None:
            lengths = np.full(B, T, np.int32)
        lengths = np.asarray(lengths)
        if lengths.shape != (B,) or lengths.dtype.kind not in "iu":
            raise GraphError(f"{label}: lengths must be {B} integers (one per sequence); got "
                             f"{lengths.dtype} {list(lengths.shape)}")
        if B and (lengths.min() < 0 or lengths.max() > T):
            bad = int(np.flatnonzero((lengths < 0) | (lengths > T))[0])
            raise GraphError(f"{label}: sequence {bad} has length {int(lengths[bad])}, outside "
                             f"[0, {T}] (T = {T} padded frames)")
        lengths = lengths.astype(np.int32, copy=False)
        a = zero_padding(a, lengths, copy=True)
    elif lengths is not None:
        raise GraphError(f"{label} is not a sequence input; it takes no lengths")
    return a, lengths


def _is_device_array(a) -> bool:
    """numba.cuda device arrays (and the simulator's, which only have ``copy_to_host``)."""
    return not isinstance(a, np.ndarray) and hasattr(a, "copy_to_host")


def _device_feed(node: Input, value, backend):
    """A device array fed to a non-sequence input (no lengths, no cast): checked, passed on."""
    label = f"input '{node.name}'" if node.name else f"input {format_shape(node.shape)}"
    if backend.name == "cpu":
        raise GraphError(f"{label}: got a device array on the 'cpu' backend; pass a numpy array")
    if node.is_sequence:
        raise GraphError(f"{label}: a device array can only feed a non-sequence input (a "
                         "sequence needs lengths); pass a numpy array or (array, lengths)")
    if value.ndim != len(node.shape) or any(d is not None and d != s for d, s in
                                            zip(node.shape, value.shape)):
        raise GraphError(f"{label}: expected an array of shape {format_shape(node.shape)}, "
                         f"got {list(value.shape)}")
    if node.dtype.kind != "f" and np.dtype(value.dtype) != node.dtype:
        raise GraphError(f"{label}: expected {node.dtype}, got {value.dtype}")
    return value


class Executor:
    """Runs one plan on one device."""

    def __init__(self, plan: Plan, device: str = "cpu"):
        self.plan = plan
        self.backend = get_backend(device)
        self.device = device
        keep_freed_memory()  # steps reuse the last step's freed memory (no fresh pages)

    def _slot_out(self, step, xs, attrs):
        plan = self.plan
        shape = tuple(step.node.op.out_shape(*xs, **attrs))
        dtype = np.result_type(*xs)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        bufs = plan.slot_buffers()
        buf = bufs[step.slot]
        if buf is None or buf.nbytes < nbytes:
            buf = np.empty(max(nbytes, 1), np.uint8)
            bufs[step.slot] = buf
        return buf[:nbytes].view(dtype).reshape(shape)

    def run(self, feeds: dict, *, train=False, seed=0, params=None, dtype=None,
            root_grad=None) -> RunResult:
        """Run forward (and backward when the plan has gradients).

        feeds: ``{Input or name: value}``; params: optional ``{Parameter: array}`` overriding
        values (the gradient checker); dtype: cast every float leaf to it (e.g. float64);
        root_grad: the seed gradient of the root (default ones, i.e. d sum(root)).
        """
        plan, be = self.plan, self.backend
        values, lengths, shapes, states, sizes = {}, {}, {}, {}, {}
        rng = np.random.default_rng(seed)
        params = params or {}
        for n in plan.order:
            if isinstance(n, Input):
                value = _lookup_feed(n, feeds)
                if _is_device_array(value):  # a device path feeding a subgraph (recurrence)
                    values[n] = _device_feed(n, value, be)
                    shapes[n] = tuple(value.shape)
                    continue
                a, L = bind_feed(n, value, dtype)
                values[n] = be.to_device(a)
                if L is not None:
                    lengths[n] = L
            elif isinstance(n, Parameter):
                v = params.get(n, n.value)
                if dtype is not None and v.dtype.kind == "f":
                    v = np.asarray(v, dtype)
                values[n] = be.to_device(v)
            elif isinstance(n, Constant):
                v = n.value
                if dtype is not None and v.dtype.kind == "f":
                    v = v.astype(dtype)
                values[n] = be.to_device(v)
            else:
                continue
            shapes[n] = tuple(values[n].shape)
        grads: dict = {}
        # Ops compute on padding frames too (log(0), 0/0) before the engine masks them; silence
        # numpy only for batches that have padding, so warnings on real data still show.
        padded = any(len(L) and int(L.min()) < values[n].shape[0] for n, L in lengths.items())
        with np.errstate(divide="ignore", invalid="ignore") if padded else nullcontext():
            for step in plan.steps:
                if step.kind == BWD:
                    self._backward_step(step, values, lengths, shapes, states, grads, sizes,
                                        train, rng, root_grad)
                else:
                    self._forward_step(step, values, lengths, shapes, states, sizes, train, rng)
                for v in step.free_values:
                    values.pop(v, None)
                for v in step.free_grads:
                    grads.pop(v, None)
                    states.pop(v, None)
        outs = [values[o] for o in plan.outputs]
        out_lengths = [lengths.get(o) for o in plan.outputs]
        wrt_grads = {}
        for w in plan.wrt:
            if w in grads:
                wrt_grads[w] = grads[w][0]
            else:
                wrt_grads[w] = be.to_device(np.zeros(shapes[w], values[w].dtype
                                                     if w in values else np.float32))
        return RunResult(outs, out_lengths, wrt_grads, sizes)

    def _context(self, n, lengths, L, train, rng, needs_grad=None):
        in_len = tuple(lengths.get(i) for i in n.inputs)
        return OpContext(n, in_len, L, train, rng, self.device, needs_grad)

    def _output_lengths(self, n, xs, lengths, ctx):
        op = n.op
        if not n.is_sequence:
            return None
        if op.lengths_rule is not None:
            return np.asarray(op.lengths_rule(ctx, *xs, **n.attrs), np.int32)
        L = None
        for i in n.inputs:
            if i.is_sequence and i.seq_axis == n.seq_axis:
                Li = lengths[i]
                if L is None:
                    L = Li
                elif Li is not L and not np.array_equal(Li, L):
                    raise GraphError(f"{ctx.where()}: inputs on sequence axis '{n.seq_axis}' "
                                     f"have different lengths {L.tolist()} and {Li.tolist()}")
        if L is None:
            raise GraphError(f"{ctx.where()}: cannot tell the output lengths")
        return L

    def _forward_step(self, step, values, lengths, shapes, states, sizes, train, rng):
        n, be = step.node, self.backend
        op = n.op
        xs = [values[i] for i in n.inputs]
        ctx = self._context(n, lengths, None, train, rng)
        L = self._output_lengths(n, xs, lengths, ctx)
        ctx.lengths = L
        out = None
        if step.slot is not None and self.device == "cpu":
            out = self._slot_out(step, xs, n.attrs)
        res = be.run(op, ctx, xs, n.attrs, out=out)
        if op.stateful:
            res, state = res
            if n in self.plan.grad_nodes:
                states[n] = state
        if out is None and not op.view and any(be.may_share_memory(res, x) for x in xs):
            res = res.copy()  # an op returned (part of) an input: keep buffers independent
        if L is not None and not op.keeps_padding_zero:
            res = be.zero_padding(res, L, copy=op.view)
        if n.is_sequence and tuple(res.shape[:2]) != (res.shape[0], len(L)):
            raise GraphError(f"{ctx.where()}: output batch {res.shape[1]} != {len(L)} lengths")
        values[n] = res
        if L is not None:
            lengths[n] = L
        shapes[n] = tuple(res.shape)
        sizes[("v", n)] = 0 if op.view else int(res.nbytes)

    def _backward_step(self, step, values, lengths, shapes, states, grads, sizes, train, rng,
                       root_grad):
        n, be = step.node, self.backend
        op = n.op
        if n is self.plan.root and n not in grads:
            if root_grad is None:
                g = be.ones(shapes[n], values[n].dtype if n in values else np.float32)
                if n in lengths:
                    g = be.zero_padding(g, lengths[n])
            elif _is_device_array(root_grad):
                g = root_grad
            else:
                g = be.to_device(np.asarray(root_grad, dtype=np.result_type(values[n])
                                            if n in values else None))
                if tuple(g.shape) != shapes[n]:
                    raise GraphError(f"root_grad has shape {list(g.shape)}; the root is "
                                     f"{list(shapes[n])}")
                if n in lengths:
                    g = be.zero_padding(g, lengths[n], copy=True)
            grads[n] = (g, root_grad is None and n not in self.plan.wrt)
        if n not in grads:
            return  # no gradient reaches this node (e.g. it only feeds a metric)
        g, owned = grads[n]
        y = values.get(n) if "out" in op.needs else None
        xs = [values.get(i) if k in op.needs else None for k, i in enumerate(n.inputs)]
        ctx = self._context(n, lengths, lengths.get(n), train, rng, step.needs_grad)
        # This node's gradient dies at this step: an op may then write its input gradient
        # into it (in-place backward, as MXNet's), when the engine owns it exclusively.
        ctx.g_writable = bool(owned and self.plan.reuse and n not in self.plan.wrt
                              and self.device == "cpu")
        gs = be.run_backward(op, ctx, g, y, xs, n.attrs, states.get(n))
        if len(gs) != len(n.inputs):
            raise GraphError(f"{ctx.where()}: backward returned {len(gs)} gradients for "
                             f"{len(n.inputs)} inputs")
        for i, gi, need in zip(n.inputs, gs, step.needs_grad):
            if not need or gi is None:
                continue
            gi0 = gi
            gi = be.unbroadcast(gi, shapes[i])
            exclusive = gi is gi0 and sum(x is gi for x in gs) == 1 and (
                (gi is g and ctx.g_writable) or (gi is not g and _fresh(gi)))
            if i in lengths and not op.grad_keeps_padding_zero:
                gi = be.zero_padding(gi, lengths[i], copy=not exclusive)
                exclusive = exclusive or gi is not gi0
            if i in grads:
                acc, acc_owned = grads[i]
                grads[i] = (be.add(acc, gi, inplace=acc_owned), True)
            else:
                grads[i] = (gi, exclusive)
                sizes[("g", i)] = 0 if (gi is g) else int(gi.nbytes)
                if gi is g:
                    sizes[("g_inplace", i)] = int(gi.nbytes)


def _fresh(a) -> bool:
    """A writable array that owns its memory (an op's new result, not a view of anything)."""
    return isinstance(a, np.ndarray) and a.base is None and a.flags.writeable


def _wrap(value, L, backend):
    value = backend.to_host(value)
    return Sequence(value, L) if L is not None else value


def evaluate(outputs, feeds, *, train=False, device="cpu", seed=0, params=None, dtype=None):
    """Evaluate ``outputs`` (nodes) on ``feeds``; returns arrays, or Sequences for sequences."""
    outputs = list(outputs)
    plan = get_plan(outputs)
    ex = Executor(plan, device)
    res = ex.run(feeds, train=train, seed=seed, params=params, dtype=dtype)
    return [_wrap(v, L, ex.backend) for v, L in zip(res.outputs, res.lengths)]


def forward_backward(root, wrt, feeds, *, outputs=(), train=True, device="cpu", seed=0,
                     params=None, dtype=None, root_grad=None, recompute=False, reuse=True):
    """One forward and backward pass.

    root: the node differentiated (gradient of the sum of its valid entries unless root_grad);
    wrt: nodes to differentiate with respect to; outputs: extra nodes to return values of.
    Returns ``(values, grads)``: a list parallel to ``[root, *outputs]`` (Sequences for
    sequences) and ``{node: gradient array}`` for each node of ``wrt``.
    """
    outs = [root, *[o for o in outputs if o is not root]]
    plan = get_plan(outs, wrt=list(wrt), root=root, recompute=recompute, reuse=reuse)
    ex = Executor(plan, device)
    res = ex.run(feeds, train=train, seed=seed, params=params, dtype=dtype, root_grad=root_grad)
    values = [_wrap(v, L, ex.backend) for v, L in zip(res.outputs, res.lengths)]
    grads = {w: ex.backend.to_host(g) for w, g in res.grads.items()}
    return values, grads


