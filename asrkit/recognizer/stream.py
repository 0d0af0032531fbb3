"""Streaming recognition: ``Recognizer.stream()`` fed audio chunks, partial and final results.

::

    stream = rec.stream(partial_interval=0.2, hotwords=["seven eight :3"])
    events = stream.accept(samples, sample_rate)   # any chunk size; float [-1, 1) or int16
    events += stream.finish()                      # end of input: flush, final result
    for e in events:                               # StreamEvent: kind "partial" | "final"
        print(e.kind, e.segment, e.start, e.end, e.text, [w.as_dict() for w in e.words])

A chunk goes through the Recognizer's steps, each kept online: resampling to the model's rate
and Kaldi features (``asrkit.features.online``: equal to the offline ones), the model's CMVN
(online; ``utterance``/``speaker`` approximated by a running mean, see ``OnlineCmvn``), the
model (``model_stream``: exact for unidirectional networks, windows for a BLSTM; with the
Recognizer's ``vtln_warps``, one features-CMVN-model chain per warp, their log-probabilities
averaged as the whole-recording path averages them) and the TLG
search (``OnlineGraphDecoder``; a transducer folder: its encoder through the same model stream
and its greedy or modified beam search, ``OnlineTransducerDecoder``, on the encoder frames),
which gives partial results and ends a *segment* (an utterance within the stream) at an
endpoint (Kaldi's rules, ``EndpointConfig``): its final result (with n-best confidences) is
sent and the search starts the next segment. ``finish`` flushes every step and sends the last
segment's final result.

Times are seconds from the start of the stream. A partial event is sent when the best path's
words changed and ``partial_interval`` seconds of audio have passed since the last one; its
words' confidences are 1.0 (no n-best is computed for partial results). A segment in which
nothing was recognised sends no final event, except that a stream always ends with at least one.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from asrkit.decoders.ctm import WordTiming
from asrkit.recognizer.options import RecognizerError
from asrkit.recognizer.recognizer import average_log_probs

INT16_SCALE = 32768.0


@dataclasses.dataclass
class StreamEvent:
    """A partial or final result of a stream.

    kind: ``"partial"`` or ``"final"``; text and words (``WordTiming``: start and duration in
    seconds from the start of the stream, confidence in [0, 1]) as in ``Result``; start, end:
    the segment's span so far in seconds; segment: the index of the utterance within the
    stream (finals count 0, 1, 2, ...; partials carry the index their final will have).
    """

    kind: str
    text: str
    words: list[WordTiming]
    start: float
    end: float
    segment: int

    def as_dict(self) -> dict:
        """``{"kind", "segment", "start", "end", "text", "words": [...]}`` (times rounded to
        milliseconds)."""
        return {"kind": self.kind, "segment": self.segment, "start": round(self.start, 3),
                "end": round(self.end, 3), "text": self.text,
                "words": [w.as_dict() for w in self.words]}


@dataclasses.dataclass
class StreamOptions:
    """Options of ``Recognizer.stream`` (checked; RecognizerError names the option).

    endpoint: Kaldi's rules (None/True: the defaults; False: none; a dict of changes, e.g.
        ``{"rule2": {"min_trailing_silence": 0.3}}``; see ``EndpointConfig.from_options``).
    partial_interval: seconds of audio between partial results (0: after every chunk that
        changes the words; None: no partial results).
    hotwords: hotword phrases (a file path, or a list of ``"phrase :boost"`` lines or
        ``Hotword``); None: the Recognizer's.
    blstm_left, blstm_right: seconds of past and future context of the windows a BLSTM model
        (any whole-utterance network, a transducer's encoder too) is re-run over
        (``WindowedStream``; the right context is latency).
    cmvn_causal: ``sliding`` CMVN without waiting at the start (Kaldi's online CMN).
    cmvn_prior: ``utterance``/``speaker`` CMVN: seconds normalised with their own statistics
        before the running mean takes over.
    """

    endpoint: object = None
    partial_interval: float | None = 0.2
    hotwords: object = None
    blstm_left: float = 0.5
    blstm_right: float = 0.3
    cmvn_causal: bool = False
    cmvn_prior: float = 1.0

    def __post_init__(self):
        from asrkit.decoders.online import EndpointConfig
        from asrkit.decoders.options import finite

        try:
            self.endpoint = EndpointConfig.from_options(self.endpoint)
            if self.partial_interval is not None:
                self.partial_interval = finite("partial_interval", self.partial_interval, 0.0)
            self.blstm_left = finite("blstm_left", self.blstm_left, 0.0)
            self.blstm_right = finite("blstm_right", self.blstm_right, 0.0)
            self.cmvn_prior = finite("cmvn_prior", self.cmvn_prior, 0.0, strict=True)
        except ValueError as e:
            raise RecognizerError(str(e)) from None
        if not isinstance(self.cmvn_causal, bool):
            raise RecognizerError(f"cmvn_causal: expected true or false, got "
                                  f"{self.cmvn_causal!r}")


def _samples(samples, where: str) -> np.ndarray:
    """float32 samples in [-1, 1) from int16 or float input."""
    x = np.asarray(samples)
    if x.ndim != 1:
        raise RecognizerError(f"{where}: expected a 1-D array of samples, got shape {x.shape}")
    if x.dtype == np.int16:
        return x.astype(np.float32) / np.float32(INT16_SCALE)
    if np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float32)
        if x.size and not np.all(np.isfinite(x)):
            raise RecognizerError(f"{where}: the audio holds NaN or infinite samples")
        return x
    raise RecognizerError(f"{where}: samples must be int16 or float, got {x.dtype}")


class RecognizerStream:
    """One audio stream through a Recognizer; see the module docstring. Made by
    ``Recognizer.stream(**options)`` (``StreamOptions``)."""

    def __init__(self, recognizer, options: StreamOptions, context=None):
        from asrkit.decoders.online import OnlineGraphDecoder
        from asrkit.features.online import OnlineCmvn, OnlineFeatures
        from asrkit.recognizer.model_stream import model_stream

        recognizer.check_can_transcribe()
        self.rec, self.options = recognizer, options
        folder = recognizer.folder
        n = recognizer.normalization
        feature_shift = recognizer.feature_shift
        shift = recognizer.frame_shift
        self.chains = []  # (features, cmvn, model) of each VTLN warp (one chain: unwarped)
        for warp in recognizer.vtln_warps or [None]:
            try:
                features = OnlineFeatures(folder.feature_config.kind,
                                          **recognizer.feature_options(warp))
            except ValueError as e:
                raise RecognizerError(f"{folder.path}: features.toml: {e}") from None
            cmvn = OnlineCmvn(n["cmvn"], n["norm_vars"], n["cmn_window"], n["min_cmn_window"],
                              n["cmn_center"], options.cmvn_causal,
                              max(int(round(options.cmvn_prior / feature_shift)), 1),
                              n["global_stats"])
            model = model_stream(folder.model, left=int(round(options.blstm_left / shift)),
                                 right=int(round(options.blstm_right / shift)))
            self.chains.append((features, cmvn, model))
        self.features, self.cmvn, self.model = self.chains[0]
        self.search_name = "log-probabilities"
        if recognizer.transducer is not None:
            from asrkit.decoders.online import OnlineTransducerDecoder

            search = recognizer.transducer
            nbest = search.options.nbest if search.options.method == "beam" else 1
            self.decoder = OnlineTransducerDecoder(
                lambda start: search.new_search(context, start), shift, nbest)
            self.search_name = "encoder output"
        else:
            self.decoder = OnlineGraphDecoder(folder.graph, recognizer.options,
                                              folder.model.blank, context)
        self.frame_shift = shift
        self.sample_rate = None        # the rate of the input, from the first chunk
        self.resampler = None
        self.samples_in = 0            # input samples accepted
        self.segment = 0               # index of the segment being decoded
        self.segment_start = 0         # its first output frame (in the stream)
        self.frames = 0                # output frames decoded in the stream
        self.finals = 0
        self._last_partial_words = None
        self._last_partial_time = -math.inf
        self.finished = False

    @property
    def seconds(self) -> float:
        """Seconds of audio accepted so far."""
        return self.samples_in / self.sample_rate if self.sample_rate else 0.0

    @property
    def latency_frames(self) -> int:
        """Output frames the model and CMVN hold back at most (not counting the chunk)."""
        sub = self.model.subsampling
        return -(-(self.model.delay + self.cmvn.delay_frames) // sub)

    def accept(self, samples, sample_rate: int) -> list[StreamEvent]:
        """Feed a chunk of audio (1-D int16, or float in [-1, 1), at ``sample_rate`` Hz, the
        same for the whole stream); returns the events it gives (partial and final)."""
        if self.finished:
            raise RecognizerError("the stream has ended (finish was called)")
        if isinstance(sample_rate, bool) or not isinstance(sample_rate, (int, np.integer)) \
                or sample_rate < 1:
            raise RecognizerError(f"sample_rate must be a positive whole number of Hz, got "
                                  f"{sample_rate!r}")
        if self.sample_rate is None:
            from asrkit.features.online import OnlineResampler

            self.sample_rate = int(sample_rate)
            if self.sample_rate != self.rec.sample_rate:
                self.resampler = OnlineResampler(self.sample_rate, self.rec.sample_rate)
        elif int(sample_rate) != self.sample_rate:
            raise RecognizerError(f"sample_rate changed from {self.sample_rate} to "
                                  f"{sample_rate} Hz within a stream")
        x = _samples(samples, "chunk")
        self.samples_in += len(x)
        if self.resampler is not None:
            x = self.resampler.accept(x)
        return self._push(x, final=False)

    def finish(self) -> list[StreamEvent]:
        """End of input: flush every step; returns the last events (the last final)."""
        if self.finished:
            raise RecognizerError("the stream has ended (finish was called)")
        x = np.zeros(0, np.float32)
        if self.resampler is not None:
            x = self.resampler.finish()
        events = self._push(x, final=True)
        self.finished = True
        return events

    # -- the steps -----------------------------------------------------------------------------
    @staticmethod
    def _chain_push(chain, wave: np.ndarray, final: bool):
        """The model frames one (features, cmvn, model) chain gives for ``wave`` (None when
        the features wait for more samples)."""
        features, cmvn, model = chain
        feats = features.accept(wave) if len(wave) else None
        if final:
            rest = features.finish()
            feats = rest if feats is None else np.concatenate([feats, rest])
        if feats is None:
            return None
        feats = cmvn.accept(feats) if len(feats) else feats
        if final:
            rest = cmvn.finish()
            feats = rest if not len(feats) else np.concatenate([feats, rest]) if len(rest) \
                else feats
        logp = model.accept(feats) if len(feats) else None
        if final:
            rest = model.finish()
            logp = rest if logp is None or not len(logp) else np.concatenate([logp, rest])
        return logp

    def _push(self, x: np.ndarray, final: bool) -> list[StreamEvent]:
        wave = x * np.float32(INT16_SCALE)
        outs = [self._chain_push(chain, wave, final) for chain in self.chains]
        logp = outs[0]
        if logp is None and not final:
            return []
        if logp is not None and len(logp):
            # the warps change the mel banks, not the framing: every chain gives these frames
            logp = average_log_probs(outs)
        events = []
        if logp is not None and len(logp):
            if not np.all(np.isfinite(logp)):
                raise RecognizerError(f"the model gave NaN or infinite {self.search_name}")
            self.decoder.accept(logp)
            self.frames += len(logp)
            rule = self.decoder.endpoint(self.options.endpoint)
            if rule is not None and not final:
                events += self._final(endpoint=True)
            elif not final:
                events += self._partial()
        if final:
            events += self._final(endpoint=False)
        return events

    def _timings(self, res) -> list[WordTiming]:
        start = self.segment_start * self.frame_shift
        for t in res.timings:
            t.start += start
        return res.timings

    def _partial(self) -> list[StreamEvent]:
        interval = self.options.partial_interval
        now = self.frames * self.frame_shift
        if interval is None or now - self._last_partial_time < interval:
            return []
        res = self.decoder.partial()
        if res.words == (self._last_partial_words or []):
            return []  # unchanged (or still nothing at the start of a segment)
        self._last_partial_words = res.words
        self._last_partial_time = now
        return [StreamEvent("partial", res.text, self._timings(res),
                            self.segment_start * self.frame_shift, now, self.segment)]

    def _final(self, endpoint: bool) -> list[StreamEvent]:
        n = self.decoder.num_frames
        res = self.decoder.final() if n else None
        events = []
        if res is not None and res.words or not endpoint and not self.finals:
            words = self._timings(res) if res is not None else []
            events.append(StreamEvent("final", res.text if res is not None else "", words,
                                      self.segment_start * self.frame_shift,
                                      (self.segment_start + n) * self.frame_shift,
                                      self.segment))
            self.finals += 1
            self.segment += 1
        self.segment_start += n
        self.decoder.reset()
        self._last_partial_words = None
        self._last_partial_time = -math.inf
        return events


# -- sources of chunks (``asrkit transcribe --stream``) ----------------------------------------
def pcm_chunks(fileobj, sample_rate: int, chunk_s: float):
    """Yield int16 chunks of ``chunk_s`` seconds of raw mono s16le PCM read from the binary
    ``fileobj`` (a pipe: each read waits for its chunk or the end of input)."""
    size = max(int(round(chunk_s * sample_rate)), 1) * 2
    carry = b""
    while True:
        data = fileobj.read(size - len(carry))
        if not data:
            break
        data = carry + data
        whole = len(data) - len(data) % 2
        carry = data[whole:]
        if whole:
            yield np.frombuffer(data[:whole], "<i2").astype(np.int16)
    if carry:
        raise RecognizerError("the raw PCM input ends inside a sample (odd number of bytes; "
                              "expected s16le)")


def file_chunks(path: str, chunk_s: float, realtime: bool = False):
    """Yield ``(float32 samples, sample rate)`` chunks of ``chunk_s`` seconds of an audio file
    (any format soundfile reads, mixed to mono, at its own rate); with ``realtime``, a chunk
    is yielded no sooner than the audio up to its end lasts (as a live source sends it).
    RecognizerError naming the file when it cannot be read."""
    import time

    import soundfile as sf

    try:
        f = sf.SoundFile(path)
    except (OSError, RuntimeError, sf.LibsndfileError) as e:
        raise RecognizerError(f"{path}: cannot read the audio: {e}") from None
    with f:
        rate = f.samplerate
        size = max(int(round(chunk_s * rate)), 1)
        t0, sent = time.monotonic(), 0
        while True:
            try:
                block = f.read(size, dtype="float32", always_2d=True)
            except (RuntimeError, sf.LibsndfileError) as e:
                raise RecognizerError(f"{path}: cannot read the audio: {e}") from None
            if not len(block):
                break
            sent += len(block)
            if realtime:  # a live source has a chunk once its last sample was spoken
                wait = sent / rate - (time.monotonic() - t0)
                if wait > 0:
                    time.sleep(wait)
            yield block.mean(axis=1, dtype=np.float32), rate
