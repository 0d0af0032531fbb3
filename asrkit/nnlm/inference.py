"""One LSTM LM step in numpy, for the stateful (decoder) API.

The batched sentence scorer runs the training graph; this is the same network written as plain
numpy on parameter arrays, one word at a time for ``N`` states: embedding lookup, per layer the
torch.nn.LSTM cell (gates i, f, g, o; optional projection), then the output layer and a
log-softmax over the vocabulary (``<s>`` excluded, as in the graph).
"""

from __future__ import annotations

import numpy as np

from asrkit.nnlm.network import output_mask

LN10 = float(np.log(10.0))


def _sigmoid(x):
    return 0.5 * (np.tanh(0.5 * x) + 1.0)  # overflow-free logistic


class StepModel:
    """Parameter arrays of one model arranged for stepping (views, not copies)."""

    def __init__(self, values: dict[str, np.ndarray], num_layers: int, tied: bool):
        self.embedding = values["embedding.E"]
        self.layers = []
        for k in range(num_layers):
            w_hr = values.get(f"lstm.weight_hr_l{k}")
            self.layers.append((values[f"lstm.weight_ih_l{k}"].T, values[f"lstm.weight_hh_l{k}"].T,
                                values[f"lstm.bias_ih_l{k}"] + values[f"lstm.bias_hh_l{k}"],
                                None if w_hr is None else w_hr.T))
        self.out_w = values["embedding.E"].T if tied else values["output.W"]
        self.out_b = values["output.b"] + output_mask(self.out_w.shape[1])
        self.hidden = self.layers[0][1].shape[1] // 4
        self.proj = self.layers[0][1].shape[0]

    def zero_state(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """``h`` float32 ``[L, n, P]`` and ``c`` float32 ``[L, n, H]``, all zero."""
        L = len(self.layers)
        return (np.zeros((L, n, self.proj), np.float32), np.zeros((L, n, self.hidden), np.float32))

    def step(self, ids: np.ndarray, h: np.ndarray, c: np.ndarray):
        """Feed word ids int ``[n]`` to states ``h [L, n, P]``, ``c [L, n, H]``.

        Returns the new ``(h, c)`` (fresh arrays of the same shapes).
        """
        x = self.embedding[ids]
        h_out, c_out = np.empty_like(h), np.empty_like(c)
        H = self.hidden
        for k, (w_ih, w_hh, b, w_hr) in enumerate(self.layers):
            gates = x @ w_ih + h[k] @ w_hh + b
            i, f = _sigmoid(gates[:, :H]), _sigmoid(gates[:, H:2 * H])
            g, o = np.tanh(gates[:, 2 * H:3 * H]), _sigmoid(gates[:, 3 * H:])
            c_out[k] = f * c[k] + i * g
            hk = o * np.tanh(c_out[k])
            h_out[k] = hk @ w_hr if w_hr is not None else hk
            x = h_out[k]
        return h_out, c_out

    def log10_probs(self, h_top: np.ndarray) -> np.ndarray:
        """log10 p(next word) float64 ``[n, V]`` from the top layer's output ``[n, P]``."""
        z = (h_top @ self.out_w).astype(np.float64) + self.out_b
        z -= z.max(axis=1, keepdims=True)
        z -= np.log(np.exp(z).sum(axis=1, keepdims=True))
        return z / LN10
