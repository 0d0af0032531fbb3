"""Voice-activity segmentation of long recordings with Silero VAD, run by onnxruntime.

``Recognizer(..., vad="silero")`` decodes only the speech regions this module finds (each at
most ``max_chunk`` seconds); ``vad="energy"`` (the default) cuts the whole recording at its
quietest frames instead (``asrkit.recognizer.chunks``).

The model is the ONNX file that the ``silero-vad`` package ships inside its wheel
(``silero_vad/data/silero_vad.onnx``, MIT licence). It is found without importing that package
(whose Python code needs torch) and run here with onnxruntime alone: 512-sample windows at
16 kHz (256 at 8 kHz), each preceded by the last 64 (32) samples of the window before, with the
LSTM state carried across windows, exactly as silero's ``OnnxWrapper``. ``speech_segments`` is
a port of silero's ``get_speech_timestamps_from_probs`` (same options, same defaults, same
output) to plain Python; the tests compare both against silero's own torch code.

Other sample rates are resampled to 16 kHz for the VAD only; segment bounds are returned in
samples of the caller's rate.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import threading

import numpy as np

from asrkit.recognizer.options import RecognizerError

VAD_KINDS = ("energy", "silero")
WINDOW = {16000: 512, 8000: 256}   # samples per VAD decision (32 ms)
CONTEXT = {16000: 64, 8000: 32}    # samples of the previous window prepended to each
STATE_SHAPE = (2, 1, 128)          # the model's LSTM state [h/c, batch, units]
INSTALL_HINT = "pip install 'asrkit[vad]' (the silero-vad package ships the model)"


@dataclasses.dataclass(frozen=True)
class VadOptions:
    """Silero's ``get_speech_timestamps`` options, with its names and defaults."""

    threshold: float = 0.5               # speech when the probability is >= this
    neg_threshold: float | None = None   # leave speech below this (None: threshold - 0.15)
    min_speech_duration_ms: int = 250    # shorter speech regions are dropped
    max_speech_duration_s: float = float("inf")  # longer ones are split at their longest pause
    min_silence_duration_ms: int = 100   # a pause must last this long to end a region
    speech_pad_ms: int = 30              # padding added on both sides of each region
    min_silence_at_max_speech: int = 98  # ms: pauses shorter than this are never split points
    use_max_poss_sil_at_max_speech: bool = True  # split at the longest pause, else the last


def check_vad(kind) -> str:
    """``kind`` checked against ``VAD_KINDS``; RecognizerError otherwise."""
    if kind not in VAD_KINDS:
        raise RecognizerError(f"vad: expected one of {', '.join(VAD_KINDS)}, got {kind!r}")
    return kind


def silero_model_path() -> str:
    """Path of ``silero_vad.onnx`` inside the installed silero-vad package (not imported).
    RecognizerError naming the install command when the package or file is missing."""
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        raise RecognizerError(f"vad='silero' needs the silero-vad package: {INSTALL_HINT}")
    for folder in spec.submodule_search_locations:
        path = os.path.join(folder, "data", "silero_vad.onnx")
        if os.path.isfile(path):
            return path
    raise RecognizerError(f"the silero-vad package has no data/silero_vad.onnx: {INSTALL_HINT}")


class SileroVad:
    """The Silero VAD network in an onnxruntime session (one thread): speech probabilities of
    a recording's 32 ms windows. Safe to share between threads (calls are serialised)."""

    def __init__(self, path: str | None = None):
        try:
            import onnxruntime as ort
        except ImportError:
            raise RecognizerError(f"vad='silero' needs onnxruntime: {INSTALL_HINT}") from None
        self.path = path or silero_model_path()
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        try:
            self.session = ort.InferenceSession(self.path, opts,
                                                providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime raises its own exception types
            raise RecognizerError(f"{self.path}: cannot load the VAD model: {e}") from None
        self._lock = threading.Lock()

    def probabilities(self, samples: np.ndarray, sample_rate: int) -> np.ndarray:
        """float32 ``[ceil(n / window)]`` speech probabilities of float samples ``[n]`` in
        [-1, 1] at 8000 or 16000 Hz (the last window zero-padded), as silero computes them."""
        if sample_rate not in WINDOW:
            raise RecognizerError(f"the Silero VAD runs at 8000 or 16000 Hz, not {sample_rate}")
        win, ctx = WINDOW[sample_rate], CONTEXT[sample_rate]
        n = len(samples)
        num = -(-n // win)
        x = np.zeros(ctx + num * win, np.float32)  # silero's context starts as zeros
        x[ctx: ctx + n] = samples
        state = np.zeros(STATE_SHAPE, np.float32)
        sr = np.array(sample_rate, np.int64)
        out = np.empty(num, np.float32)
        with self._lock:
            for i in range(num):
                frame = x[i * win: i * win + ctx + win][None, :]
                prob, state = self.session.run(None, {"input": frame, "state": state, "sr": sr})
                out[i] = prob[0, 0]
        return out


def speech_segments(probs, sample_rate: int, num_samples: int | None = None,
                    options: VadOptions = VadOptions()) -> list[tuple[int, int]]:
    """Speech regions ``[(start, end)]`` in samples from per-window speech probabilities.

    probs: one probability per ``WINDOW[sample_rate]`` samples; num_samples: length of the
    audio (default: windows x window). The same regions silero's
    ``get_speech_timestamps_from_probs`` returns (as tuples, not dicts).
    """
    o = options
    win = WINDOW[sample_rate]
    n = len(probs) * win if num_samples is None else num_samples
    min_speech = sample_rate * o.min_speech_duration_ms / 1000
    pad = sample_rate * o.speech_pad_ms / 1000
    max_speech = sample_rate * o.max_speech_duration_s - win - 2 * pad
    min_silence = sample_rate * o.min_silence_duration_ms / 1000
    min_silence_at_max = sample_rate * o.min_silence_at_max_speech / 1000
    neg = max(o.threshold - 0.15, 0.01) if o.neg_threshold is None else o.neg_threshold

    triggered = False
    speeches: list[dict] = []
    cur: dict = {}
    temp_end = prev_end = next_start = 0
    possible_ends: list[tuple[int, int]] = []
    for i, p in enumerate(probs):
        sample = win * i
        if p >= o.threshold and temp_end:
            if sample - temp_end > min_silence_at_max:
                possible_ends.append((temp_end, sample - temp_end))
            temp_end = 0
            if next_start < prev_end:
                next_start = sample
        if p >= o.threshold and not triggered:
            triggered = True
            cur["start"] = sample
            continue
        if triggered and sample - cur["start"] > max_speech:
            if o.use_max_poss_sil_at_max_speech and possible_ends:
                prev_end, dur = max(possible_ends, key=lambda e: e[1])
                cur["end"] = prev_end
                speeches.append(cur)
                cur = {}
                next_start = prev_end + dur
                if next_start < prev_end + sample:
                    cur["start"] = next_start
                else:
                    triggered = False
                prev_end = next_start = temp_end = 0
                possible_ends = []
            elif prev_end:
                cur["end"] = prev_end
                speeches.append(cur)
                cur = {}
                if next_start < prev_end:
                    triggered = False
                else:
                    cur["start"] = next_start
                prev_end = next_start = temp_end = 0
                possible_ends = []
            else:
                cur["end"] = sample
                speeches.append(cur)
                cur = {}
                prev_end = next_start = temp_end = 0
                triggered = False
                possible_ends = []
                continue
        if p < neg and triggered:
            if not temp_end:
                temp_end = sample
            silence = sample - temp_end
            if not o.use_max_poss_sil_at_max_speech and silence > min_silence_at_max:
                prev_end = temp_end
            if silence < min_silence:
                continue
            cur["end"] = temp_end
            if cur["end"] - cur["start"] > min_speech:
                speeches.append(cur)
            cur = {}
            prev_end = next_start = temp_end = 0
            triggered = False
            possible_ends = []
    if cur and n - cur["start"] > min_speech:
        cur["end"] = n
        speeches.append(cur)
    for i, s in enumerate(speeches):
        if i == 0:
            s["start"] = int(max(0, s["start"] - pad))
        if i != len(speeches) - 1:
            gap = speeches[i + 1]["start"] - s["end"]
            if gap < 2 * pad:
                s["end"] += int(gap // 2)
                speeches[i + 1]["start"] = int(max(0, speeches[i + 1]["start"] - gap // 2))
            else:
                s["end"] = int(min(n, s["end"] + pad))
                speeches[i + 1]["start"] = int(max(0, speeches[i + 1]["start"] - pad))
        else:
            s["end"] = int(min(n, s["end"] + pad))
    return [(int(s["start"]), int(s["end"])) for s in speeches]


_SHARED: dict[str, SileroVad] = {}
_SHARED_LOCK = threading.Lock()


def shared_vad() -> SileroVad:
    """One SileroVad per process (the session is loaded on first use)."""
    with _SHARED_LOCK:
        if "silero" not in _SHARED:
            _SHARED["silero"] = SileroVad()
        return _SHARED["silero"]


def silero_cuts(wave: np.ndarray, sample_rate: int, max_chunk_s: float,
                options: VadOptions | None = None) -> list[tuple[int, int]]:
    """Speech regions ``[(start, end)]`` (samples at ``sample_rate``) of int16-scale ``wave``
    ``[n]``, each at most ``max_chunk_s`` seconds (longer speech is split at its longest pause,
    silero's ``max_speech_duration_s``). Audio at rates other than 8/16 kHz is resampled to
    16 kHz for the VAD."""
    from asrkit.features import resample

    x = np.asarray(wave, np.float32) / np.float32(32768.0)
    rate = sample_rate
    if rate not in WINDOW:
        x = np.asarray(resample(x, rate, 16000), np.float32)
        rate = 16000
    opts = dataclasses.replace(options or VadOptions(), max_speech_duration_s=max_chunk_s)
    probs = shared_vad().probabilities(x, rate)
    segs = speech_segments(probs, rate, len(x), opts)
    if rate == sample_rate:
        return segs
    scale = sample_rate / rate
    n = len(wave)
    return [(min(int(round(a * scale)), n), min(int(round(b * scale)), n)) for a, b in segs]


def segment_frames(segments: list[tuple[int, int]], num_frames: int,
                   shift_samples: int) -> list[tuple[int, int]]:
    """Feature-frame ranges ``(first, end)`` of sample ranges: frame ``i`` starts at sample
    ``i * shift_samples``; empty ranges are dropped."""
    out = []
    for a, b in segments:
        f0 = min(int(round(a / shift_samples)), num_frames)
        f1 = min(int(round(b / shift_samples)), num_frames)
        if f1 > f0:
            out.append((f0, f1))
    return out
