"""``Recognizer``: the one way to use a trained model folder from Python.

::

    from asrkit import Recognizer

    rec = Recognizer.from_dir("exp/final")                 # search options: from_dir(..., beam=12)
    result = rec.transcribe("call.wav")                    # or transcribe(samples, sample_rate)
    result.text, result.words[0].start, result.as_dict()   # words with times and confidences
    results = rec.transcribe_many(paths, nj=4)             # worker processes, input order
    rec.align("call.wav", "one two three").words           # forced alignment
    stream = rec.stream()                                  # streaming: asrkit.recognizer.stream
    events = stream.accept(chunk, 16000) + stream.finish() # partial and final StreamEvents

Transcription is a chain of steps a chunked (streaming) front end can call one by one:
``load_audio`` (any rate, resampled; int16 scale) -> ``features`` (Kaldi features of the folder's
config, no dither) -> ``normalize`` (the CMVN mode the model was trained with) -> ``log_probs``
(the network) -> ``decode`` (the graph search: words, times, n-best confidences). With
``vtln_warps`` (the folder's, or ``from_dir(..., vtln_warps=[0.9, 1, 1.1])``) the features are
computed under each VTLN warp factor (Kaldi's ``vtln_warp``: the mel banks stretched), each set
normalised and run through the network, and the log-probabilities averaged frame by frame
before the search: a test-time ensemble over vocal-tract lengths for speakers unlike the
training ones, at one network pass per warp.

A long recording is cut at quiet places into chunks of at most ``max_chunk`` seconds; its
features are computed and normalised over the whole recording first and then cut, so every chunk
is normalised as the training reader normalised that utterance (``speaker`` mode: the recording
is its own speaker).
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from asrkit.recognizer.model_folder import (
    MANIFEST,
    NORMALIZATION,
    ModelFolder,
    check_warps,
    load_model_folder,
)
from asrkit.recognizer.options import (
    RecognizerError,
    chunk_seconds,
    search_options,
    vtln_warps_option,
)
from asrkit.recognizer.result import Alignment, Result
from asrkit.recognizer.vad import check_vad

INT16_SCALE = 32768.0  # float samples in [-1, 1) -> Kaldi's int16 scale


def _name(audio) -> str:
    if isinstance(audio, (str, os.PathLike)):
        return os.fspath(audio)
    return "<samples>" if isinstance(audio, np.ndarray) else f"<{type(audio).__name__}>"


def _named(where: str, e: Exception) -> RecognizerError:
    msg = str(e)
    return RecognizerError(msg if where in msg else f"{where}: {msg}")


def _item(item, index: int) -> tuple:
    """``(audio, sample_rate, name)`` of ``transcribe_many``'s item ``index``: a path, bytes, or
    a ``(samples, sample_rate)`` pair (named "item INDEX" in errors)."""
    if isinstance(item, tuple):
        if len(item) != 2:
            raise RecognizerError(f"item {index}: expected (samples, sample_rate), got a tuple "
                                  f"of {len(item)}")
        return item[0], item[1], f"item {index}"
    return item, None, None if isinstance(item, (str, os.PathLike)) else f"item {index}"


def average_log_probs(logps: list[np.ndarray]) -> np.ndarray:
    """float32 ``[T', C]``: the frame-by-frame mean of same-shaped log-probabilities (summed in
    float64, in list order, so the whole-recording and streaming paths agree); one array is
    returned as it is."""
    if len(logps) == 1:
        return logps[0]
    total = logps[0].astype(np.float64)
    for logp in logps[1:]:
        total += logp
    return (total / len(logps)).astype(np.float32)


def is_transducer(folder: ModelFolder) -> bool:
    """Whether the folder's model is a transducer (searched without a decoding graph)."""
    return hasattr(folder.model, "transducer")


class Recognizer:
    """A loaded model folder with checked search options; see the module docstring.

    folder: a ``ModelFolder``; options: ``DecodeOptions`` (``search_options``); max_chunk:
    longest chunk decoded at once, in seconds; vad: how a recording is cut into chunks,
    ``"energy"`` (at its quietest frames, everything decoded) or ``"silero"`` (only the speech
    regions the Silero VAD finds; ``asrkit.recognizer.vad``); hotwords: phrases the search
    favours (a hotword file's path, or a list of ``"phrase :boost"`` lines;
    ``asrkit.recognizer.hotwords``).
    """

    def __init__(self, folder: ModelFolder, options, max_chunk: float = 30.0,
                 vad: str = "energy", hotwords=None, vtln_warps=None):
        from asrkit.recognizer.hotwords import load_hotwords

        self.folder = folder
        warps = vtln_warps_option(vtln_warps)
        check_warps(warps, folder.model, folder.feature_config, "")
        self.vtln_warps = warps  # None: one pass with the feature config as it is
        self.options = options
        self.max_chunk = chunk_seconds(max_chunk)
        self.vad = check_vad(vad)
        self.hotwords = load_hotwords(hotwords)
        self._contexts: dict = {}
        self.transducer = None  # the search of a transducer folder (asrkit.recognizer.transducer)
        if is_transducer(folder):
            from asrkit.recognizer.transducer import TransducerSearch

            self.transducer = TransducerSearch(folder, options, self.hotwords)
        if self.hotwords and folder.graph is not None:
            self.context()  # a hotword the graph cannot output is an error now, not per file
        shift_ms = float(folder.feature_config.options.get("frame_shift", 10.0))
        self.feature_shift = shift_ms / 1000.0  # seconds per feature frame
        self.shift_samples = max(int(round(self.feature_shift * folder.sample_rate)), 1)

    @classmethod
    def from_dir(cls, path: str | os.PathLike, *, max_chunk: float = 30.0, vad: str = "energy",
                 hotwords=None, vtln_warps=None, **search) -> Recognizer:
        """Load the model folder ``path`` (``asrkit package``'s output).

        ``search``: ``beam``, ``max_active``, ``min_active``, ``beam_delta``, ``acoustic_scale``,
        ``word_insertion_penalty``, ``lattice_beam``, ``nbest`` (None: the folder's default,
        else DecodeOptions'); ``vad``, ``hotwords``: see the class; ``vtln_warps``: warp
        factors whose log-probabilities are averaged (None: the folder's ``vtln_warps``, else
        one unwarped pass; ``[1.0]`` turns a folder's off). Raises RecognizerError
        (ModelFolderError for the folder) naming the file or option at fault. A folder without
        a decoding graph can align, not transcribe. A transducer folder needs no graph and
        takes ``asrkit.recognizer.transducer``'s options instead (``method``, ``beam``, ``lm``,
        ...).
        """
        folder = load_model_folder(path, need_graph=False)
        where = f"{os.path.join(folder.path, MANIFEST)}: decode."
        if is_transducer(folder):
            from asrkit.recognizer.transducer import transducer_options

            opts = transducer_options(search, folder.manifest["decode"], where)
        else:
            opts = search_options(search, folder.manifest["decode"], folder.frame_shift, where)
        if vtln_warps is None:
            vtln_warps = folder.manifest.get("vtln_warps")
        return cls(folder, opts, max_chunk, vad, hotwords, vtln_warps)

    # -- settings ----------------------------------------------------------------------------
    @property
    def sample_rate(self) -> int:
        """The model's sample rate (Hz); audio at other rates is resampled to it."""
        return self.folder.sample_rate

    @property
    def frame_shift(self) -> float:
        """Seconds per network output frame (feature shift x subsampling)."""
        return self.folder.frame_shift

    @property
    def normalization(self) -> dict:
        """The CMVN settings (``cmvn``, ``norm_vars``, ``cmn_window``, ``min_cmn_window``,
        ``cmn_center``, ``global_stats``) the model was trained with."""
        return {k: self.folder.manifest[k] for k in (*NORMALIZATION, "global_stats")}

    def settings(self) -> dict:
        """Keyword arguments that rebuild this Recognizer with ``from_dir`` (worker processes)."""
        opts = dataclasses.asdict(self.options)
        opts.pop("frame_shift", None)
        from asrkit.recognizer.hotwords import hotword_lines

        return {"path": os.path.abspath(self.folder.path), "max_chunk": self.max_chunk,
                "vad": self.vad, "hotwords": hotword_lines(self.hotwords) or None,
                "vtln_warps": list(self.vtln_warps) if self.vtln_warps else None, **opts}

    def check_can_transcribe(self) -> None:
        """RecognizerError unless the folder has a decoding graph (alignment needs none)."""
        if self.folder.graph is None and self.transducer is None:
            raise RecognizerError(f"{self.folder.path}: the model folder has no decoding graph "
                                  "(package it with --graph to transcribe)")

    # -- the steps ---------------------------------------------------------------------------
    def load_audio(self, audio, sample_rate: int | None = None) -> np.ndarray:
        """float32 ``[n]`` samples at ``self.sample_rate``, int16 scale (Kaldi's).

        ``audio``: a path or the bytes of a file in any format soundfile reads (mixed to mono;
        ``sample_rate`` must then be None), or a 1-D array of samples at ``sample_rate`` Hz:
        int16 values, or floats in [-1, 1] (soundfile's convention). Raises RecognizerError
        naming the file.
        """
        from asrkit.features import resample
        from asrkit.io import load_audio

        where = _name(audio)
        if isinstance(audio, (str, os.PathLike, bytes, bytearray)):
            if sample_rate is not None:
                raise RecognizerError(f"{where}: sample_rate goes with samples, not a file (a "
                                      "file has its own rate)")
            try:
                wave, _ = load_audio(audio, sample_rate=self.sample_rate, scale="int16")
            except (OSError, ValueError, MemoryError) as e:
                raise _named(where, e) from None
        else:
            x = np.asarray(audio)
            if sample_rate is None:
                raise RecognizerError(f"{where}: samples need their sample_rate")
            if isinstance(sample_rate, bool) or not isinstance(sample_rate, (int, np.integer)) \
                    or sample_rate < 1:
                raise RecognizerError(f"{where}: sample_rate must be a positive whole number of "
                                      f"Hz, got {sample_rate!r}")
            if x.ndim != 1 or x.size == 0:
                raise RecognizerError(f"{where}: expected a 1-D array of samples, got shape "
                                      f"{x.shape}")
            if x.dtype == np.int16:
                x = x.astype(np.float32) / np.float32(INT16_SCALE)
            elif np.issubdtype(x.dtype, np.floating):
                x = x.astype(np.float32)
            else:
                raise RecognizerError(f"{where}: samples must be int16 or float, got {x.dtype}")
            if int(sample_rate) != self.sample_rate:
                x = np.asarray(resample(x, int(sample_rate), self.sample_rate), np.float32)
            wave = x * np.float32(INT16_SCALE)
        if not np.all(np.isfinite(wave)):
            raise RecognizerError(f"{where}: the audio holds NaN or infinite samples")
        return wave

    def feature_options(self, warp: float | None = None) -> dict:
        """The folder's feature options without dither (so that results repeat), with
        ``vtln_warp`` set to ``warp`` unless it is None."""
        opts = dict(self.folder.feature_config.options)
        opts["dither"] = 0.0
        if warp is not None:
            opts["vtln_warp"] = float(warp)
        return opts

    def features(self, wave: np.ndarray, warp: float | None = None) -> np.ndarray:
        """float32 ``[frames, dim]`` features of int16-scale samples (the folder's feature
        config, without dither; under VTLN warp factor ``warp`` unless None). Every warp gives
        the same frames."""
        from asrkit.features import compute

        return compute(self.folder.feature_config.kind, wave, **self.feature_options(warp))

    def normalize(self, feats: np.ndarray, stats: np.ndarray | None = None) -> np.ndarray:
        """float32 ``[frames, dim]``: ``feats`` normalised as in training (``normalization``).
        ``stats``: speaker CMVN stats ``[2, dim+1]`` for ``speaker`` mode (default: those of
        ``feats`` itself, the recording being its own speaker)."""
        from asrkit.features import cmvn_stats, normalize

        n = self.normalization
        if n["cmvn"] == "global":
            stats = n["global_stats"]
        elif n["cmvn"] == "speaker" and stats is None:
            stats = cmvn_stats(feats)
        return normalize(feats, n["cmvn"], n["norm_vars"], stats, n["cmn_window"],
                         n["min_cmn_window"], n["cmn_center"])

    def log_probs(self, feats: np.ndarray) -> np.ndarray:
        """float32 ``[T', C]`` log-posteriors of one utterance's normalised features."""
        model = self.folder.model
        if self.transducer is not None:
            raise RecognizerError(f"{self.folder.path}: a transducer model has no per-frame "
                                  "log-probabilities (use encode)")
        if feats.ndim != 2 or feats.shape[1] != model.input_dim:
            raise RecognizerError(f"features of shape {list(feats.shape)} do not fit the model "
                                  f"([frames, {model.input_dim}]): is features.toml the "
                                  "training config?")
        logp, _ = model(feats)
        logp = np.ascontiguousarray(logp)
        if not np.all(np.isfinite(logp)):
            raise RecognizerError("the model gave NaN or infinite log-probabilities")
        return logp

    def mean_log_probs(self, views: list[np.ndarray]) -> np.ndarray:
        """float32 ``[T', C]``: ``log_probs`` of each view (the same recording's normalised
        features ``[frames, dim]`` under each of ``vtln_warps``), averaged frame by frame."""
        return average_log_probs([self.log_probs(v) for v in views])

    def encode(self, feats: np.ndarray) -> np.ndarray:
        """float32 ``[T', H]`` encoder output of a transducer model for one utterance's
        normalised features."""
        model = self.folder.model
        if feats.ndim != 2 or feats.shape[1] != model.input_dim:
            raise RecognizerError(f"features of shape {list(feats.shape)} do not fit the model "
                                  f"([frames, {model.input_dim}]): is features.toml the "
                                  "training config?")
        enc, _ = model.encode(feats)
        if not np.all(np.isfinite(enc)):
            raise RecognizerError("the encoder gave NaN or infinite values")
        return np.ascontiguousarray(enc)

    def context(self, hotwords=None):
        """The hotword ``ContextGraph`` of ``hotwords`` (None: the Recognizer's own; see
        ``load_hotwords``) over the graph's words (a transducer: over the model's tokens,
        ``TransducerSearch.make_context``), or None without hotwords."""
        from asrkit.recognizer.hotwords import hotword_lines, load_hotwords, word_context

        self.check_can_transcribe()
        hw = self.hotwords if hotwords is None else load_hotwords(hotwords)
        key = tuple(hotword_lines(hw))
        if key not in self._contexts:
            self._contexts[key] = (self.transducer.make_context(hw) if self.transducer
                                   else word_context(hw, self.folder.graph.words))
        return self._contexts[key]

    def decode(self, log_probs: np.ndarray, start: float = 0.0):
        """Search the graph over ``log_probs`` ``[T', C]`` (with the hotwords); returns the
        decoder's ``UtteranceResult`` with word times shifted by ``start`` seconds."""
        from asrkit.decoders.decode import decode_utterance

        self.check_can_transcribe()
        res = decode_utterance(self.folder.graph, log_probs, self.options, self.context())
        for t in res.timings:
            t.start += start
        return res

    # -- whole recordings --------------------------------------------------------------------
    def _prepared(self, audio, sample_rate) -> tuple[np.ndarray, list[np.ndarray]]:
        """(int16-scale wave, its normalised features ``[frames, dim]`` under each of
        ``vtln_warps``, or once unwarped) of a recording."""
        wave = self.load_audio(audio, sample_rate)
        views = [self.normalize(self.features(wave, w)) for w in self.vtln_warps or [None]]
        if views[0].shape[0] == 0:
            raise RecognizerError(f"{len(wave)} samples ({1000 * len(wave) / self.sample_rate:.0f}"
                                  " ms) are too short for one feature frame")
        return wave, views

    def _frame_ranges(self, wave: np.ndarray, num_frames: int) -> list[tuple[int, int]]:
        """Feature-frame ranges to decode one by one: ``vad`` regions of ``max_chunk``."""
        from asrkit.recognizer.chunks import frame_cuts, quiet_cuts

        if self.vad == "silero":
            from asrkit.recognizer.vad import segment_frames, silero_cuts

            segments = silero_cuts(wave, self.sample_rate, self.max_chunk)
            return segment_frames(segments, num_frames, self.shift_samples)
        cuts = quiet_cuts(wave, self.sample_rate, self.max_chunk)
        return frame_cuts(cuts, num_frames, self.shift_samples)

    def transcribe(self, audio, sample_rate: int | None = None, name: str | None = None) -> Result:
        """Transcribe one recording (a path, file bytes, or samples with ``sample_rate``; see
        ``load_audio``). Returns a Result; raises RecognizerError naming the file (or ``name``,
        e.g. an utterance id)."""
        where = name or _name(audio)
        self.check_can_transcribe()
        try:
            wave, views = self._prepared(audio, sample_rate)
            words = []
            for f0, f1 in self._frame_ranges(wave, views[0].shape[0]):
                if self.transducer is not None:
                    enc = self.encode(views[0][f0:f1]) if f1 > f0 else None
                    if enc is not None and enc.shape[0]:
                        words += self.transducer.decode(enc, start=f0 * self.feature_shift)
                    continue
                logp = self.mean_log_probs([v[f0:f1] for v in views]) if f1 > f0 else None
                if logp is None or logp.shape[0] == 0:
                    continue
                words += self.decode(logp, start=f0 * self.feature_shift).timings
        except (OSError, ValueError, MemoryError) as e:
            raise _named(where, e) from None
        return Result(" ".join(w.word for w in words), words, len(wave) / self.sample_rate)

    def transcribe_iter(self, items, nj: int | None = None):
        """Transcribe ``items`` (paths, file bytes, or ``(samples, sample_rate)`` pairs) with
        ``nj`` worker processes (None: one per CPU core); yields, in input order, a Result or
        the RecognizerError of each item (a bad item never stops the others)."""
        items = list(items)
        if nj is None:
            nj = os.cpu_count() or 1
        if isinstance(nj, bool) or not isinstance(nj, int) or nj < 1:
            raise RecognizerError(f"nj: expected a positive number of processes, got {nj!r}")
        nj = min(nj, len(items))
        if nj <= 1:
            for i, item in enumerate(items):
                try:
                    yield self.transcribe(*_item(item, i))
                except RecognizerError as e:
                    yield e
            return
        from asrkit.recognizer.parallel import transcribe_in_workers

        yield from transcribe_in_workers(self.settings(),
                                         [_item(item, i) for i, item in enumerate(items)], nj)

    def transcribe_many(self, items, nj: int | None = None, errors: str = "raise") -> list:
        """Results of ``items`` in input order (see ``transcribe_iter``; ``nj`` None: all
        cores). ``errors="raise"`` raises the first item's RecognizerError; ``"keep"`` leaves
        it in the list in that item's place."""
        if errors not in ("raise", "keep"):
            raise ValueError(f"errors: expected 'raise' or 'keep', got {errors!r}")
        out = []
        for res in self.transcribe_iter(items, nj):
            if isinstance(res, RecognizerError) and errors == "raise":
                raise res
            out.append(res)
        return out

    def stream(self, **options):
        """A ``RecognizerStream`` (``asrkit.recognizer.stream``) fed audio chunks: ``accept(
        samples, sample_rate)`` and ``finish()`` return partial and final ``StreamEvent``.
        ``options``: ``StreamOptions`` (endpoint, partial_interval, hotwords, blstm_left,
        blstm_right, cmvn_causal, cmvn_prior). A transducer folder streams its encoder
        through the same model streams into its resumable greedy or modified beam search
        (``asrkit.decoders.online.OnlineTransducerDecoder``; hotwords need the beam search).
        RecognizerError for an unknown or bad option."""
        from asrkit.recognizer.stream import RecognizerStream, StreamOptions

        self.check_can_transcribe()
        known = [f.name for f in dataclasses.fields(StreamOptions)]
        unknown = [k for k in options if k not in known]
        if unknown:
            raise RecognizerError(f"{unknown[0]}: unknown stream option (known: "
                                  f"{', '.join(known)})")
        opts = StreamOptions(**options)
        return RecognizerStream(self, opts, self.context(opts.hotwords))

    def align(self, audio, text: str | list[str], sample_rate: int | None = None,
              name: str | None = None) -> Alignment:
        """Forced alignment of ``text`` (a string or a list of words) to a recording: each
        word's start and duration (``asrkit align``). Raises RecognizerError (naming the file,
        or ``name``) for an empty transcript, a word the model has no tokens for, or a
        transcript too long for the audio."""
        from asrkit.recognizer.alignment import align_words

        where = name or _name(audio)
        words = text.split() if isinstance(text, str) else list(text)
        try:
            if not words:
                raise RecognizerError("empty transcript: nothing to align")
            wave, views = self._prepared(audio, sample_rate)
            if self.transducer is not None:
                aligned, score = self.transducer.align(self.encode(views[0]), words)
            else:
                aligned, score = align_words(self.mean_log_probs(views), words,
                                             self.folder.tokens, self.folder.lexicon,
                                             self.frame_shift)
        except (OSError, ValueError, MemoryError) as e:
            raise _named(where, e) from None
        return Alignment(aligned, score, len(wave) / self.sample_rate)
