"""One BLSTM-CTC training step: asrkit's graph engine against the same model in torch (CPU).

The model is CNTK's/ESPnet's classic acoustic model: a stacked BLSTM (default 2 layers, 320 cells
per direction) and a Dense output over 80-dim features, CTC loss, SGD with momentum; the batch is
16 utterances of 240-300 frames with 60-token targets. A step is forward, backward and the
parameter update on both sides; torch runs ``pack_padded_sequence`` + ``nn.LSTM(bidirectional)``
+ ``Linear`` + ``log_softmax`` + ``ctc_loss(reduction="sum")`` + ``optim.SGD`` with the same
weights (moved with ``asrkit.models.to_torch_state_dict``), so the losses agree.

Each side is timed (median) and measured in its own fresh subprocess: in one process the three
thread pools (numba's OpenMP runtime, OpenBLAS, torch's own OpenMP runtime) spin against each
other and torch's step became 5-20x slower on a 2-core machine, which would flatter asrkit
(``--in-process`` adds those figures too). The two losses are compared in this process. Peak
memory is measured the same way for both sides: after a warm-up step (Numba compilation, torch's
lazy init), ``gc.collect()`` and glibc ``malloc_trim(0)``, the resident set size is sampled every
0.2 ms from ``/proc/self/statm`` by a thread during one more step; the figure is the peak minus
the RSS just before the step (what the step itself needs beyond the model and the inputs),
median over three steps. For asrkit the numpy allocations alone are also traced (tracemalloc
peak) as a cross-check. torch's intra-op threads default to the machine's cores; on the 2-core
VM this was written on, torch with 2 threads ran 10-15x slower than with 1, so compare with
``--threads 1`` there too.
"""

from __future__ import annotations

import os

import numpy as np

from asrkit.bench import Case, median_time
from asrkit.bench.sides import run_side

NAME = "train"
HELP = "one BLSTM-CTC training step (time and peak memory) against torch on the CPU"


def add_arguments(parser) -> None:
    """Model and batch shape options, threads and the memory measurement switch."""
    parser.add_argument("--frames", type=int, default=300, help="longest utterance, frames")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--dim", type=int, default=80, help="feature dimension")
    parser.add_argument("--hidden", type=int, default=320, help="LSTM cells per direction")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--classes", type=int, default=32, help="output tokens, blank included")
    parser.add_argument("--target-length", type=int, default=60)
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="torch intra-op threads")
    parser.add_argument("--in-process", action="store_true",
                        help="also time both sides in this one process (their thread pools -- "
                        "numba's OpenMP, OpenBLAS, torch's OpenMP -- then compete)")
    parser.add_argument("--seed", type=int, default=0)


def _inputs(a):
    rng = np.random.default_rng(a["seed"])
    T, B = a["frames"], a["batch"]
    x = rng.standard_normal((T, B, a["dim"])).astype(np.float32)
    lengths = rng.integers(int(0.8 * T), T + 1, B).astype(np.int32)
    lengths[0] = T
    for b, n in enumerate(lengths):
        x[n:, b] = 0
    y = rng.integers(1, a["classes"], (B, a["target_length"])).astype(np.int32)
    return x, lengths, y, np.full(B, a["target_length"], np.int32)


def asrkit_step(a):
    """Build the asrkit model and return ``(step, model)``; ``step()`` returns the loss."""
    from asrkit import ops
    from asrkit.graph import forward_backward, input_variable
    from asrkit.learners import SGD
    from asrkit.models import Model

    net = {"layers": [{"type": "blstm", "hidden": a["hidden"], "num_layers": a["layers"]}],
           "seed": a["seed"]}
    model = Model(net, a["dim"], ["<blk>"] + [f"t{i}" for i in range(1, a["classes"])])
    labels = input_variable((), dtype=np.int32, dynamic_axes=("labels", "batch"))
    loss = ops.sum_all(ops.ctc_loss(model.logits, labels))
    x, L, y, yl = _inputs(a)
    feeds = {model.feats: (x, L), labels: (np.ascontiguousarray(y.T), yl)}
    learner = SGD(model.params.values(), 1e-5, momentum=0.9)
    nodes = learner.parameters

    def step():
        values, grads = forward_backward(loss, nodes, feeds)
        learner.apply([grads[p] for p in nodes], 1, 1e-5)
        return float(np.asarray(values[0]))

    return step, model


def torch_step(a, model=None):
    """The same model, loss and update in torch; returns ``step()`` giving the loss."""
    import torch

    torch.set_num_threads(a["threads"])
    torch.manual_seed(a["seed"])

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([torch.nn.LSTM(
                a["dim"], a["hidden"], a["layers"], bidirectional=True)])
            self.output = torch.nn.Linear(2 * a["hidden"], a["classes"])

    net = Net()
    if model is not None:
        from asrkit.models import to_torch_state_dict

        net.load_state_dict({k: torch.from_numpy(v)
                             for k, v in to_torch_state_dict(model).items()})
    x, L, y, yl = (torch.from_numpy(v) for v in _inputs(a))
    opt = torch.optim.SGD(net.parameters(), lr=1e-5, momentum=0.9)

    def step():
        opt.zero_grad(set_to_none=True)
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, L, enforce_sorted=False)
        h, _ = net.layers[0](packed)
        h, _ = torch.nn.utils.rnn.pad_packed_sequence(h, total_length=x.shape[0])
        logp = torch.log_softmax(net.output(h), -1)
        loss = torch.nn.functional.ctc_loss(logp, y, L, yl, reduction="sum")
        loss.backward()
        opt.step()
        return float(loss.detach())

    return step


def measure_side(side: str, a: dict, repeat: int = 3) -> dict:
    """Run in a fresh process (``asrkit.bench.sides.run_side``): the step's timing, and the
    median peak RSS growth (bytes) of three steps after the warm-up (see the module docstring)."""
    from asrkit.bench.sides import measure_step

    step = asrkit_step(a)[0] if side == "asrkit" else torch_step(a)
    return measure_step(step, repeat=repeat, trace_numpy=side == "asrkit")


def run(args) -> list[Case]:
    """Time one step of each side alone in its own process (the ratio) and side by side in
    this process; measure each side's peak memory; check that the two losses agree."""
    a = {k: getattr(args, k) for k in ("frames", "batch", "dim", "hidden", "layers", "classes",
                                       "target_length", "threads", "seed")}
    try:
        import torch
        ref_name = f"torch {torch.__version__}"
    except ImportError:
        torch, ref_name = None, "torch"
    extra = {}
    ours, model = asrkit_step(a)
    if torch is not None:
        theirs = torch_step(a, model)
        la, lt = ours(), theirs()
        extra["loss_rel_diff"] = f"{abs(la - lt) / abs(lt):.2e}"
        if args.in_process:
            extra["in_process_asrkit_ms"] = round(1e3 * median_time(ours, repeat=args.repeat), 1)
            extra["in_process_torch_ms"] = round(1e3 * median_time(theirs, repeat=args.repeat),
                                                 1)
    del ours, model
    m_ours = run_side(__name__, "asrkit", a, args.repeat)
    extra["asrkit_peak_MB"] = round(m_ours["peak_bytes"] / 2**20, 1)
    extra["asrkit_numpy_traced_peak_MB"] = round(m_ours["traced_bytes"] / 2**20, 1)
    ref_s = ref_q = None
    if torch is not None:
        m_ref = run_side(__name__, "torch", a, args.repeat)
        ref_s, ref_q = m_ref["timing"]["median"], (m_ref["timing"]["q1"], m_ref["timing"]["q3"])
        extra["torch_peak_MB"] = round(m_ref["peak_bytes"] / 2**20, 1)
        extra["memory_ratio"] = round(m_ours["peak_bytes"] / max(m_ref["peak_bytes"], 1), 3)
    name = (f"{a['layers']}x BLSTM {a['hidden']} + CTC, T={a['frames']} B={a['batch']} "
            f"D={a['dim']}")
    ours_t = m_ours["timing"]
    return [Case(name, ours_t["median"], ref_name, ref_s, extra,
                 asrkit_spread=(ours_t["q1"], ours_t["q3"]), reference_spread=ref_q)]
