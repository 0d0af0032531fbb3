"""Streaming recognition: latency and real-time factor per chunk size (``Recognizer.stream``).

Each utterance of a Kaldi data directory (``wav.scp``, ``text``) is fed to a stream in chunks of
``--chunks`` seconds, as a live source sends them: a chunk arrives when its last sample has been
spoken, and an event counts as sent when the ``accept`` call that gave it returns. For every
reference word the stream recognised (edit-distance alignment of the finals to ``text``):

- *first partial*: from the end of the word to the first event (partial or final) whose words
  hold it at its place;
- *final*: from the end of the word to the final result that holds it.

Word ends come from ``times.json`` in the data directory when there is one (``{utt: [[word,
start, end], ...]}``, the synthetic tone corpus of the tests writes it), else from a forced
alignment of ``text`` with the model itself (CTC alignments put a word's end at its last token's
frame). The time an ``accept`` call takes is its CPU time by default (``--clock cpu``: what an
idle core would take, so other processes' load does not count; threads that run in parallel
count in full) or its wall time. The RTF is that compute time over the audio's duration. The
reference side is the offline ``Recognizer.transcribe`` of the same files, by the same clock.

A transducer folder streams with the search of its ``decode`` table; ``--method greedy beam``
(``asrkit transcribe``'s names: greedy search, modified beam search) measures each in turn, one
case per chunk size and method, the methods of a chunk size side by side. A CTC folder has one
search, its decoding graph's, and takes no ``--method``.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

from asrkit.bench import Case

NAME = "stream"
HELP = "streaming latency (word end -> first partial, -> final) and RTF per chunk size"


def add_arguments(parser) -> None:
    """Options: --model-dir, DATA_DIR, --chunks, --max-utts, stream options, --method."""
    from asrkit.recognizer.transducer import METHODS

    parser.add_argument("data_dir", metavar="DATA_DIR", help="data dir with wav.scp and text")
    parser.add_argument("--model-dir", required=True, help="model folder")
    parser.add_argument("--chunks", type=float, nargs="+", default=[0.1, 0.2, 0.5],
                        help="chunk sizes in seconds (default 0.1 0.2 0.5)")
    parser.add_argument("--max-utts", type=int, default=40, help="utterances used (first N)")
    parser.add_argument("--partial-interval", type=float, default=0.0)
    parser.add_argument("--blstm-right", type=float, default=0.3,
                        help="future context of a BLSTM's windows, seconds")
    parser.add_argument("--blstm-left", type=float, default=0.5)
    parser.add_argument("--cmvn-prior", type=float, default=1.0,
                        help="utterance/speaker CMVN: seconds normalised with their own stats")
    parser.add_argument("--method", nargs="+", choices=METHODS, default=None,
                        help="transducer folders: the searches to measure, each in turn "
                             "(default: the folder's)")
    parser.add_argument("--clock", choices=["cpu", "wall"], default="cpu",
                        help="time an accept call takes: its CPU time (default: what an idle "
                             "core gives, robust to other load) or wall time")


def _read(data_dir: str, max_utts: int):
    """[(utt, samples float32, rate, ref words, word ends or None)] of the first utterances
    (at their own rates; wav.scp pipes and segments as ``asrkit.io.DataDir`` reads them)."""
    from asrkit.io.datadir import DataDir

    d = DataDir.read(data_dir)
    text = d.text()
    times = {}
    tpath = os.path.join(data_dir, "times.json")
    if os.path.exists(tpath):
        with open(tpath) as f:
            times = {u: [float(e) for _, _, e in ws] for u, ws in json.load(f).items()}
    out = []
    for u in d.audio(sorted(text)[:max_utts]):
        if u.error is None:
            out.append((u.utt_id, u.waveform, u.sample_rate, text[u.utt_id].split(),
                        times.get(u.utt_id)))
    return out


def _feed(rec, samples, rate, chunk_s, options, clock):
    """``(events with their send times, compute seconds by clock, wall seconds)`` of one
    streamed utterance."""
    stream = rec.stream(**options)
    size = max(int(round(chunk_s * rate)), 1)
    sent, compute, wall = [], 0.0, 0.0
    for i in range(0, len(samples) + size, size):
        w0, c0 = time.perf_counter(), clock()
        events = stream.accept(samples[i:i + size], rate) if i < len(samples) else \
            stream.finish()
        dt = clock() - c0
        wall += time.perf_counter() - w0
        compute += dt
        arrival = min(i + size, len(samples)) / rate
        sent += [(e, arrival + dt) for e in events]
    return sent, compute, wall


def _latencies(sent, ref: list[str], ends: list[float]):
    """(first-partial latencies, final latencies, hypothesis words) of one utterance."""
    from asrkit.decoders.scoring import align

    finals = [(e, t) for e, t in sent if e.kind == "final"]
    hyp, where = [], []  # every final word, and (segment, position, send time of its final)
    for e, t in finals:
        for k, w in enumerate(e.words):
            hyp.append(w.word)
            where.append((e.segment, k, t))
    first_seen = {}
    for e, t in sent:
        for k, w in enumerate(e.words):
            first_seen.setdefault((e.segment, k, w.word), t)
    a = align(ref, hyp)
    i = j = 0
    partial, final = [], []
    for r, h, op in zip(a.ref, a.hyp, a.ops):
        if op == "C":
            seg, k, t_final = where[j]
            final.append(t_final - ends[i])
            partial.append(first_seen.get((seg, k, h), t_final) - ends[i])
        i += r is not None
        j += h is not None
    return partial, final, hyp


def _recognizers(args) -> dict:
    """``{method: Recognizer}`` of the folder: one per ``--method`` for a transducer (the
    folder's own search without it: ``{method or None: ...}``); CommandError for ``--method``
    on a CTC folder."""
    from asrkit.cli.main import CommandError
    from asrkit.recognizer import Recognizer, RecognizerError

    try:
        rec = Recognizer.from_dir(args.model_dir)
        if rec.transducer is None:
            if args.method:
                raise CommandError(
                    f"{args.model_dir}: --method picks a transducer's search "
                    f"({', '.join(args.method)}); this is a CTC model, searched with its "
                    "decoding graph only (its options are its decode table's)")
            return {None: rec}
        methods = list(dict.fromkeys(args.method or [rec.transducer.options.method]))
        return {m: Recognizer.from_dir(args.model_dir, method=m) for m in methods}
    except RecognizerError as e:
        raise CommandError(str(e)) from e


def _stream_all(rec, utts, ends, chunk, options, clock):
    """Every utterance streamed in chunks of ``chunk`` seconds: ``(compute seconds, wall
    seconds, first-partial latencies, final latencies, {utt: hypothesis})``."""
    partial, final, hyps, compute, wall = [], [], {}, 0.0, 0.0
    for u, x, rate, ws, _ in utts:
        sent, c, w = _feed(rec, x, rate, chunk, options, clock)
        compute += c
        wall += w
        p, f, hyp = _latencies(sent, ws, ends[u])
        partial += p
        final += f
        hyps[u] = " ".join(hyp)
    return compute, wall, partial, final, hyps


def run(args) -> list[Case]:
    """One case per chunk size (and per search method of a transducer, side by side); extra:
    WERs, latency quantiles (ms), RTF."""
    from asrkit.cli.main import CommandError
    from asrkit.decoders.scoring import score_texts

    recs = _recognizers(args)
    utts = _read(args.data_dir, args.max_utts)
    if not utts:
        raise CommandError(f"{args.data_dir}: no utterance with text could be read")
    audio_s = sum(len(x) / rate for _, x, rate, _, _ in utts)
    refs = {u: " ".join(ws) for u, _, _, ws, _ in utts}
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    options = dict(partial_interval=args.partial_interval, blstm_left=args.blstm_left,
                   blstm_right=args.blstm_right, cmvn_prior=args.cmvn_prior)
    offline = {}  # method -> (seconds, texts)
    for method, rec in recs.items():
        _, x, rate, _, _ = utts[0]  # untimed warm-up (compilation): no method pays for it
        rec.transcribe(x, rate)
        _feed(rec, x, rate, args.chunks[0], options, clock)
        t0 = clock()
        texts = {u: rec.transcribe(x, rate).text for u, x, rate, _, _ in utts}
        offline[method] = (clock() - t0, texts)
    ends = {}
    for u, x, rate, ws, given in utts:
        if given is None:
            al = next(iter(recs.values())).align(x, ws, rate)
            given = [w.start + w.duration for w in al.words]
        ends[u] = given
    q = (lambda v, p: round(1000 * float(np.percentile(v, p)), 1) if v else None)
    cases = []
    for chunk in args.chunks:
        for method, rec in recs.items():
            compute, wall, partial, final, hyps = _stream_all(rec, utts, ends, chunk, options,
                                                              clock)
            offline_s, texts = offline[method]
            extra = {"chunk_s": chunk, "utterances": len(utts), "audio_s": round(audio_s, 2),
                     "rtf": round(compute / audio_s, 4), "rtf_wall": round(wall / audio_s, 4),
                     "clock": args.clock,
                     "offline_rtf": round(offline_s / audio_s, 4),
                     "wer_stream": round(score_texts(refs, hyps).error_rate, 2),
                     "wer_offline": round(score_texts(refs, texts).error_rate, 2),
                     "first_partial_ms_p50": q(partial, 50),
                     "first_partial_ms_p90": q(partial, 90),
                     "final_ms_p50": q(final, 50), "final_ms_p90": q(final, 90),
                     "words_timed": len(final)}
            name = f"stream chunk {chunk:g} s"
            if method is not None:
                extra["method"] = method
                name += f" {method}"
            cases.append(Case(name, compute, "offline transcribe", offline_s, extra))
    return cases
