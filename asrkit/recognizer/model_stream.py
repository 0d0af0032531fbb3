"""The acoustic model run on features that arrive in chunks: the model step of a stream.

A *model stream* takes normalised feature frames in chunks of any size and returns the
log-posteriors it can compute so far::

    ms = model_stream(model)              # ModelStream for one audio stream
    logp = ms.accept(feats)               # float32 [n', C] for feats [n, input_dim]
    logp = ms.finish()                    # the frames left at the end of the input

For a transducer (``asrkit.models.TransducerModel``) the same classes stream the encoder: the
output is its projection to the joiner, float32 ``[n', H]`` (``TransducerModel.encode``'s
frames), instead of log-posteriors (``is_encoder`` says which; ``num_classes`` is C or H).

Two kinds, chosen by the network (``model_stream``):

- ``CarriedStateStream``, exact, for networks without a backward-in-time layer (``lstm``,
  ``dense``, ``tdnn``, ``dropout``, frame stacking and subsampling, ``conv2d_subsampling``, a
  streaming ``conformer``: ``chunk_size > 0``): each layer keeps its state between chunks (an
  LSTM its ``h``/``c``; stacking and a TDNN the frames their windows still need; the Conformer
  its attention keys/values and convolution frames, :mod:`.model_stream_conformer`), so the
  concatenated outputs equal the whole-utterance output (to float32 rounding: the GEMMs see
  other row counts). A layer waits only for the frames its window reads ahead: frame stacking
  ``stack_frames - 1`` frames, a TDNN half its span, the Conv2d front end its span (x4: 6),
  the Conformer the rest of its chunk.
- ``WindowedStream`` for networks that look at the whole utterance (a ``blstm``, whose backward
  direction needs the future; a ``transformer``; a ``conformer`` without ``chunk_size``):
  the whole network is re-run over a window of ``left`` output frames of past context,
  the new frames and ``right`` frames of future context, keeping the new frames only. This
  adds ``right`` frames of latency and costs ``(left + new + right) / new`` times the offline
  compute; the output approaches the offline one as the contexts grow (it is not equal).

Both expose ``delay`` (input feature frames an output frame waits for, beyond its own) and
``subsampling`` (input frames per output frame).
"""

from __future__ import annotations

import types

import numpy as np

from asrkit.recognizer.options import RecognizerError

__all__ = ["CarriedStateStream", "WindowedStream", "model_stream", "subsampling_of",
           "whole_utterance_layer"]


def subsampling_of(network: dict) -> int:
    """Input frames per output frame: ``subsample_frames`` times every TDNN stride and Conv2d
    front end's factor."""
    s = int(network.get("subsample_frames", 1))
    for spec in network["layers"]:
        if spec["type"] == "tdnn":
            s *= int(spec.get("stride", 1))
        elif spec["type"] == "conv2d_subsampling":
            s *= int(spec["factor"])
    return s


def front_span(network: dict) -> int:
    """Input frames an output frame reads beyond its own first one in the valid (unpadded)
    windows of Conv2d front ends, which give no frame for a window past the input's end."""
    from asrkit.recognizer.model_stream_conformer import front_end_span

    span, scale = 0, int(network.get("subsample_frames", 1))
    for spec in network["layers"]:
        if spec["type"] == "conv2d_subsampling":
            span += front_end_span(spec["factor"]) * scale
            scale *= int(spec["factor"])
        elif spec["type"] == "tdnn":
            scale *= int(spec.get("stride", 1))
    return span


def whole_utterance_layer(network: dict) -> int | None:
    """Index of the first layer that looks at the whole utterance (a ``blstm``, a
    ``transformer``, a ``conformer`` without ``chunk_size``), or None: the network streams
    exactly with carried state."""
    for i, spec in enumerate(network["layers"]):
        if spec["type"] in ("blstm", "transformer") or (
                spec["type"] == "conformer" and not spec.get("chunk_size", 0)):
            return i
    return None


_CPU = types.SimpleNamespace(device="cpu", g_writable=False)  # what an op's forward reads


def _activation(name: str):
    """The graph's own CPU forward of activation ``name`` (identical numbers), or None."""
    from asrkit.config.acoustic_net import ACTIVATIONS

    fn = ACTIVATIONS[name]
    if fn is None:
        return None
    prim = fn.primitive
    return lambda x: prim.forward(_CPU, x)


class _Window:
    """Frames of a windowed op (frame stacking, a TDNN): output frame ``t`` reads input frames
    ``t * stride - left + k * dilation`` (k < K), zeros outside ``[0, N)``; there are
    ``ceil(N / stride)`` outputs. Keeps the input frames later outputs read."""

    def __init__(self, K: int, stride: int, dilation: int, left: int, fn):
        self.K, self.stride, self.dilation, self.left, self.fn = K, stride, dilation, left, fn
        self.span = dilation * (K - 1)
        self.buf = None      # input frames [base, n_in)
        self.base = 0
        self.n_in = 0
        self.n_out = 0

    def _compute(self, stop: int) -> np.ndarray:
        t = np.arange(self.n_out, stop)
        src = t[:, None] * self.stride - self.left + np.arange(self.K)[None, :] * self.dilation
        valid = (src >= 0) & (src < self.n_in)
        idx = np.where(valid, src - self.base, 0)
        cols = self.buf[idx] * valid[:, :, None].astype(self.buf.dtype)  # [n, K, D]
        self.n_out = stop
        keep = max(self.n_out * self.stride - self.left, 0)
        if keep > self.base:
            self.buf = self.buf[keep - self.base:]
            self.base = keep
        return self.fn(cols)

    def accept(self, x: np.ndarray) -> np.ndarray:
        self.buf = x if self.buf is None else np.concatenate([self.buf, x])
        self.n_in += len(x)
        # output t is complete once its last tap is in
        stop = max((self.n_in - 1 + self.left - self.span) // self.stride + 1, self.n_out)
        return self._compute(stop) if stop > self.n_out else None

    def finish(self) -> np.ndarray | None:
        if self.buf is None:
            return None
        stop = max(-(-self.n_in // self.stride), self.n_out)
        return self._compute(stop) if stop > self.n_out else None


class _Frames:
    """A frame-by-frame op (dense, activation, the output layer): no state."""

    def __init__(self, fn):
        self.fn = fn

    def accept(self, x):
        return self.fn(x)

    def finish(self):
        return None


class _Lstm:
    """One forward LSTM direction with its state carried from chunk to chunk."""

    def __init__(self, w_ih, w_hh, b_ih, b_hh, w_hr):
        self.w = (w_ih, w_hh, b_ih, b_hh)
        self.w_hr = w_hr
        self.h = np.zeros((1, w_hh.shape[1]), np.float32)
        self.c = np.zeros((1, w_ih.shape[0] // 4), np.float32)

    def accept(self, x):
        from asrkit.kernels import lstm_forward

        if not len(x):
            return np.zeros((0, self.h.shape[1]), np.float32)
        kw = {"w_hr": self.w_hr} if self.w_hr is not None else {}
        y, h, c, _ = lstm_forward(np.ascontiguousarray(x[:, None], np.float32), self.h, self.c,
                                  *self.w, **kw)
        self.h, self.c = np.ascontiguousarray(h), np.ascontiguousarray(c)
        return y[:, 0]

    def finish(self):
        return None


def _dense(W, b, act):
    def fn(x):
        y = np.matmul(x.reshape(-1, W.shape[0]), W).reshape(x.shape[:-1] + (W.shape[1],)) + b
        return y if act is None else act(y)
    return fn


def _log_softmax(x):
    from asrkit.ops.softmax import _log_softmax as log_softmax  # the op's own arithmetic

    return np.ascontiguousarray(log_softmax(x, -1), np.float32)


def _is_encoder(model) -> bool:
    """Whether ``model`` is a transducer, whose stream gives encoder frames, not log-probs."""
    return hasattr(model, "transducer")


class CarriedStateStream:
    """The exact model stream of a network without a ``blstm`` layer (module docstring)."""

    def __init__(self, model):
        net = model.network
        self.is_encoder = _is_encoder(model)
        p = {k: v.value for k, v in model.params.items()}
        self.input_dim = model.input_dim
        self.subsampling = subsampling_of(net)
        self.stages = []
        delay, scale = 0, 1  # lookahead in input frames; input frames per frame at this depth
        size, stride = int(net.get("stack_frames", 1)), int(net.get("subsample_frames", 1))
        if size > 1 or stride > 1:
            self.stages.append(_Window(size, stride, 1, 0, lambda c: c.reshape(len(c), -1)))
            delay += size - 1
            scale *= stride
        for i, spec in enumerate(net["layers"]):
            pre = f"layers.{i}"
            kind = spec["type"]
            if kind == "lstm":
                for k in range(spec["num_layers"]):
                    n = f"{pre}.%s_l{k}"
                    self.stages.append(_Lstm(p[n % "weight_ih"], p[n % "weight_hh"],
                                             p[n % "bias_ih"], p[n % "bias_hh"],
                                             p.get(n % "weight_hr")))
            elif kind == "dense":
                self.stages.append(_Frames(_dense(p[f"{pre}.W"], p[f"{pre}.b"],
                                                  _activation(spec["activation"]))))
            elif kind == "tdnn":
                W, b = p[f"{pre}.W"], p[f"{pre}.b"]
                act = _activation(spec["activation"])
                K, d, s = spec["context"], spec["dilation"], spec["stride"]
                left = d * (K - 1) // 2   # padding="same"

                def conv(cols, W=W, b=b, act=act):
                    y = (cols.reshape(len(cols), -1) @ W.reshape(-1, W.shape[2])) + b
                    return y if act is None else act(y)

                self.stages.append(_Window(K, s, d, left, conv))
                delay += (d * (K - 1) - left) * scale
                scale *= s
            elif kind == "conv2d_subsampling":
                from asrkit.recognizer.model_stream_conformer import Conv2dFrontEnd

                stage = Conv2dFrontEnd(p, pre, spec["factor"])
                self.stages.append(stage)
                delay += stage.span * scale
                scale *= stage.stride
            elif kind == "conformer" and spec.get("chunk_size", 0):
                from asrkit.recognizer.model_stream_conformer import ConformerChunks

                stage = ConformerChunks(p, pre, spec)
                self.stages.append(stage)
                delay += stage.delay * scale
            elif kind == "dropout":
                continue
            else:
                raise RecognizerError(f"layer #{i} ({kind}) cannot run with carried state")
        self.stages.append(_Frames(_dense(p["output.W"], p["output.b"], None)))
        self.delay = delay
        self.num_classes = p["output.b"].shape[0]

    def _run(self, x, final: bool) -> np.ndarray:
        for stage in self.stages:
            y = stage.accept(x) if x is not None and len(x) else None
            if final:
                rest = stage.finish()
                if rest is not None and len(rest):
                    y = rest if y is None or not len(y) else np.concatenate([y, rest])
            if y is None or not len(y):
                if not final:
                    return np.zeros((0, self.num_classes), np.float32)
                x = None
                continue
            x = np.asarray(y, np.float32)
        if x is None:
            return np.zeros((0, self.num_classes), np.float32)
        return np.ascontiguousarray(x, np.float32) if self.is_encoder else _log_softmax(x)

    def accept(self, feats: np.ndarray) -> np.ndarray:
        """Log-posteriors float32 ``[n', C]`` (a transducer's encoder frames ``[n', H]``) that
        ``feats`` float32 ``[n, input_dim]`` completes."""
        return self._run(np.asarray(feats, np.float32), False)

    def finish(self) -> np.ndarray:
        """Log-posteriors (encoder frames) of the frames left at the end of the input."""
        return self._run(None, True)


class WindowedStream:
    """A network that looks at the whole utterance, re-run over windows (module docstring).

    left, right: past and future context in output frames; min_new: fewest new output frames
    worth a re-run (fewer wait for the next chunk).
    """

    def __init__(self, model, left: int, right: int, min_new: int = 1):
        self.model = model
        self.is_encoder = _is_encoder(model)
        self.run = model.encode if self.is_encoder else model
        self.input_dim = model.input_dim
        self.subsampling = subsampling_of(model.network)
        self.left, self.right, self.min_new = int(left), int(right), max(int(min_new), 1)
        self.span = front_span(model.network)
        self.delay = self.right * self.subsampling + self.span
        self.num_classes = (model.transducer["joiner_dim"] if self.is_encoder
                            else model.num_classes)
        self.buf = np.zeros((0, model.input_dim), np.float32)
        self.base = 0       # input frame of buf[0] (a multiple of the subsampling)
        self.n_in = 0
        self.n_out = 0      # output frames returned

    def _window(self, stop: int, final: bool) -> np.ndarray:
        s = self.subsampling
        first = max(self.n_out - self.left, 0)
        end_in = self.n_in if final else min((stop + self.right) * s + self.span, self.n_in)
        x = self.buf[first * s - self.base: end_in - self.base]
        logp, _ = self.run(x)
        out = np.ascontiguousarray(logp[self.n_out - first: stop - first], np.float32)
        self.n_out = stop
        keep = max(self.n_out - self.left, 0) * s
        if keep > self.base:
            self.buf = self.buf[keep - self.base:]
            self.base = keep
        return out

    def accept(self, feats: np.ndarray) -> np.ndarray:
        """Log-posteriors float32 ``[n', C]`` (a transducer's encoder frames ``[n', H]``) of
        the output frames whose right context is in; ``feats`` float32 ``[n, input_dim]``."""
        feats = np.asarray(feats, np.float32)
        self.buf = np.concatenate([self.buf, feats])
        self.n_in += len(feats)
        # output frames whose inputs are all in (frame t reads up to t * s + span)
        complete = max((self.n_in - 1 - self.span) // self.subsampling + 1, 0)
        stop = complete - self.right
        if stop - self.n_out < self.min_new:
            return np.zeros((0, self.num_classes), np.float32)
        return self._window(stop, False)

    def finish(self) -> np.ndarray:
        """Log-posteriors of the frames left (the last window sees the end of the input)."""
        total = -(-self.n_in // self.subsampling)
        if total <= self.n_out:
            return np.zeros((0, self.num_classes), np.float32)
        return self._window(total, True)


def model_stream(model, left: int = 50, right: int = 30, min_new: int = 1):
    """A new model stream for ``model`` (an ``asrkit.models.Model``, or a ``TransducerModel``
    whose encoder it streams): exact carried state
    unless a layer looks at the whole utterance (:func:`whole_utterance_layer`), else windows
    with ``left``/``right`` output frames of context (``min_new``: fewest new frames per
    re-run)."""
    if whole_utterance_layer(model.network) is not None:
        return WindowedStream(model, left, right, min_new)
    return CarriedStateStream(model)
