"""One plan run by several threads at once (a server's model threads share one loaded model):
each run's values are its own."""

import threading

import numpy as np

from asrkit.models import Model


def _model():
    net = {"seed": 0, "layers": [{"type": "dense", "dim": 64, "activation": "relu"},
                                 {"type": "dense", "dim": 64, "activation": "tanh"}]}
    return Model(net, 20, ["<b>", "a", "b", "c"], blank=0)


def test_concurrent_runs_of_one_plan_equal_sequential_runs(rng):
    model = _model()
    inputs = [rng.standard_normal((int(rng.integers(50, 400)), 20)).astype(np.float32)
              for _ in range(16)]
    expected = [model(x)[0].copy() for x in inputs]
    assert model(inputs[0])[0].shape == (len(inputs[0]), 4)
    mismatches = []

    def work(k):
        for _ in range(20):
            for i in range(k, len(inputs), 4):
                got = model(inputs[i])[0]
                if not np.array_equal(got, expected[i]):
                    mismatches.append(i)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert mismatches == []
