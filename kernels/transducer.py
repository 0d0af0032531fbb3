"""A trained transducer one label at a time, in numpy: the prediction networks' steps, the joiner,
greedy search and forced alignment.

The graph trains the prediction network over whole label sequences (``asrkit.layers.transducer``);
decoding runs it one emitted label at a time. Both read the same parameters, so this module is the
one home of the step functions that training's CV error (``asrkit.ops.transducer_greedy_errors``)
and the decoders (``asrkit.decoders.transducer``) share.

A predictor step object has ``start() -> (state, out)`` (the state before any label: the
start symbol, which is the blank) and ``step(state, label) -> (state, out)``; ``out`` is the
network's output projected to the joiner dimension, float32 ``[H]``. States are hashable for the
stateless network (its last ``context_size`` labels), opaque tuples of arrays for the LSTM.
"""

from __future__ import annotations

import numpy as np

from asrkit.kernels.lstm import lstm_forward


class StatelessPredictorStep:
    """icefall's stateless prediction network: the embeddings of the last ``K`` labels (the
    blank, i.e. the start, embeds to zeros), a depthwise causal convolution over them, ReLU, and
    the projection to the joiner dimension.

    embed float32 [V, D]; conv float32 [K, D] (``depthwise_conv1d``'s layout: tap ``K-1`` reads
    the newest label); proj_w [D, H]; proj_b [H].
    """

    def __init__(self, embed, conv, proj_w, proj_b, blank: int):
        self.embed = np.asarray(embed, np.float32)
        self.conv = np.asarray(conv, np.float32)
        self.proj_w = np.asarray(proj_w, np.float32)
        self.proj_b = np.asarray(proj_b, np.float32)
        self.blank = int(blank)
        self.context_size = self.conv.shape[0]
        self._cache: dict[tuple, np.ndarray] = {}

    def output(self, context: tuple) -> np.ndarray:
        """float32 [H]: the network's output after the labels ``context`` (K ids, oldest
        first; the blank stands for "no label yet")."""
        hit = self._cache.get(context)
        if hit is None:
            ids = np.array(context, np.int64)
            e = self.embed[ids] * (ids != self.blank)[:, None]
            h = np.maximum((e * self.conv).sum(axis=0), 0.0)
            hit = self._cache[context] = (h @ self.proj_w + self.proj_b).astype(np.float32)
        return hit

    def start(self):
        """(state, out) before any label."""
        ctx = (self.blank,) * self.context_size
        return ctx, self.output(ctx)

    def step(self, state, label: int):
        """(state, out) after ``label`` follows ``state``."""
        ctx = state[1:] + (int(label),)
        return ctx, self.output(ctx)


class LstmPredictorStep:
    """An LSTM prediction network: the label's embedding (zeros for the start symbol), stacked
    unidirectional LSTM layers, the projection to the joiner dimension.

    embed float32 [V, D]; layers: ``[(w_ih [4C, I], w_hh [4C, C], b_ih [4C], b_hh [4C]), ...]``
    (torch.nn.LSTM's names and layout); proj_w [C, H]; proj_b [H].
    """

    def __init__(self, embed, layers, proj_w, proj_b, blank: int):
        self.embed = np.asarray(embed, np.float32)
        self.layers = [tuple(np.ascontiguousarray(w, np.float32) for w in layer)
                       for layer in layers]
        self.proj_w = np.asarray(proj_w, np.float32)
        self.proj_b = np.asarray(proj_b, np.float32)
        self.blank = int(blank)
        self.cells = self.layers[0][1].shape[1]

    def _run(self, x, hs, cs):
        new_h, new_c = [], []
        inp = x.reshape(1, 1, -1)
        for (w_ih, w_hh, b_ih, b_hh), h, c in zip(self.layers, hs, cs):
            y, h_n, c_n, _ = lstm_forward(inp, h, c, w_ih, w_hh, b_ih, b_hh, device="cpu")
            new_h.append(h_n)
            new_c.append(c_n)
            inp = y
        out = (inp.reshape(-1) @ self.proj_w + self.proj_b).astype(np.float32)
        return (tuple(new_h), tuple(new_c)), out

    def start(self):
        """(state, out) before any label: the start symbol's zero embedding through the LSTM."""
        zeros = tuple(np.zeros((1, self.cells), np.float32) for _ in self.layers)
        return self._run(np.zeros(self.embed.shape[1], np.float32), zeros, zeros)

    def step(self, state, label: int):
        """(state, out) after ``label`` follows ``state``."""
        return self._run(self.embed[int(label)], *state)


def joiner_logits(enc, pred, weight, bias) -> np.ndarray:
    """The additive joiner ``tanh(enc + pred) @ weight.T + bias``: enc float32 [..., H] and pred
    [..., H] (broadcast), weight [V, H], bias [V] -> float32 [..., V] unnormalised logits (the
    joiner ``asrkit.kernels.rnnt_joiner_loss`` trains)."""
    return (np.tanh(enc + pred) @ weight.T + bias).astype(np.float32, copy=False)


def log_softmax(x, axis: int = -1) -> np.ndarray:
    """float32 log-softmax of ``x`` over ``axis``."""
    m = x.max(axis=axis, keepdims=True)
    z = x - m
    return (z - np.log(np.exp(z).sum(axis=axis, keepdims=True))).astype(np.float32, copy=False)


class GreedySearch:
    """Greedy transducer decoding (icefall's ``greedy_search``) fed encoder frames as they
    come: at each frame emit the joiner's arg-max while it is not the blank, at most
    ``max_symbols`` labels per frame. The prediction network's state is kept between calls,
    so frames fed in any pieces give what the whole gives.

    predictor: a step object (see the module docstring); weight [V, H], bias [V]: the joiner's
    output layer; joiner: a function ``(enc [H], out [H]) -> logits float32 [V]`` to run
    instead of :func:`joiner_logits` over weight and bias (an exported joiner). ``tokens``,
    ``frames`` (int lists: the emitted ids and the frame of each, counted from the first frame
    fed), ``log_prob`` (the path's log-probability: the emitted labels' and the blanks') and
    ``T`` (frames fed) are the result so far.
    """

    def __init__(self, predictor, weight, bias, blank: int = 0, max_symbols: int = 3,
                 joiner=None):
        if joiner is None:
            def joiner(e, o):
                return joiner_logits(e, o, weight, bias)
        self.joiner, self.predictor = joiner, predictor
        self.blank, self.max_symbols = int(blank), int(max_symbols)
        self.state, self.out = predictor.start()
        self.tokens: list[int] = []
        self.frames: list[int] = []
        self.log_prob = 0.0
        self.T = 0

    def advance(self, enc, length: int | None = None) -> None:
        """Search the next frames: ``enc`` float32 ``[n, H]`` (its first ``length``)."""
        n = enc.shape[0] if length is None else int(length)
        for t in range(n):
            emitted = 0
            while True:
                logp = log_softmax(self.joiner(enc[t], self.out))
                y = int(np.argmax(logp))
                if y == self.blank or emitted >= self.max_symbols:
                    self.log_prob += float(logp[self.blank])
                    break
                self.log_prob += float(logp[y])
                self.tokens.append(y)
                self.frames.append(self.T + t)
                self.state, self.out = self.predictor.step(self.state, y)
                emitted += 1
        self.T += n


def greedy_search(enc, predictor, weight, bias, blank: int = 0, max_symbols: int = 3,
                  length: int | None = None, joiner=None):
    """Greedy transducer decoding over a whole utterance (:class:`GreedySearch`).

    enc float32 [T, H] (the encoder output projected to the joiner dimension); predictor: a
    step object (see the module docstring); weight [V, H], bias [V]; length: frames to read
    (default T); joiner: as :class:`GreedySearch`'s. Returns ``(tokens, frames, log_prob)``:
    the emitted ids, the frame each was emitted at, and the path's log-probability (the
    emitted labels' and the blanks').
    """
    search = GreedySearch(predictor, weight, bias, blank, max_symbols, joiner)
    search.advance(enc, length)
    return search.tokens, search.frames, search.log_prob


def force_align(enc, predictor, weight, bias, targets, blank: int = 0):
    """Viterbi forced alignment of a label sequence through the transducer lattice (icefall's
    transducer ``force_alignment``): at frame t with u labels emitted, either the blank (to
    frame t+1) or label u+1 (same frame), any number of labels per frame, as the RNN-T loss.

    enc float32 [T, H]; predictor: a step object; weight [V, H], bias [V]; targets: U label
    ids (no blank). Returns ``(frames, log_prob)``: the frame each label is emitted at (int
    list [U], non-decreasing) and the best path's log-probability (the final blank included;
    ``-inf`` when T is 0).
    """
    targets = [int(y) for y in targets]
    T, U = enc.shape[0], len(targets)
    if T == 0:
        return [], float("-inf")
    state, out = predictor.start()
    preds = [out]
    for y in targets:
        state, out = predictor.step(state, y)
        preds.append(out)
    preds = np.stack(preds)  # [U+1, H]
    stay = np.empty((T, U + 1))  # log p(blank | t, u)
    move = np.empty((T, U))  # log p(label u+1 | t, u)
    for t in range(T):
        logp = log_softmax(joiner_logits(enc[t][None, :], preds, weight, bias))  # [U+1, V]
        stay[t] = logp[:, blank]
        move[t] = logp[np.arange(U), targets]
    a = np.full((T, U + 1), -np.inf)
    emitted = np.zeros((T, U + 1), bool)  # the best way into (t, u) is label u's emission
    for t in range(T):
        for u in range(U + 1):
            best = 0.0 if t == 0 and u == 0 else -np.inf
            if t > 0:
                best = max(best, a[t - 1, u] + stay[t - 1, u])
            if u > 0 and a[t, u - 1] + move[t, u - 1] > best:
                best = a[t, u - 1] + move[t, u - 1]
                emitted[t, u] = True
            a[t, u] = best
    frames = [0] * U
    t, u = T - 1, U
    while u > 0:
        if emitted[t, u]:
            frames[u - 1] = t
            u -= 1
        else:
            t -= 1
    return frames, float(a[T - 1, U] + stay[T - 1, U])
