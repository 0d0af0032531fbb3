"""Decode with a TLG graph: 1-best words, n-best lists, CTM word times, and WER when a
reference is at hand.

Scores come either from an acoustic model run on a data directory with features
(`--model MODEL DATA_DIR`, as written by `asrkit compute-features`) or from a Kaldi table of
log-probabilities `[frames, tokens]` (`--logprobs ark:FILE` or `scp:FILE`).

Writes into OUT: hyp.txt (Kaldi text), ctm (utt 1 start dur word conf), nbest.txt
(`utt-N ac_cost graph_cost word ...`, the convention of Kaldi's `nbest-to-linear` that
`asrkit nnlm rescore` reads), and, when DATA_DIR has a `text` file, wer.txt (sclite-style
report) and score.json. In nbest.txt, costs are -ln p; ac_cost is already multiplied by
--acoustic-scale (Kaldi keeps it unscaled) and graph_cost holds the graph's weights (LM,
lexicon) plus the word insertion penalty, so ac_cost + graph_cost is the path's search cost and
`asrkit nnlm rescore --acoustic-scale 1` ranks as the decoder did; ref_text names the reference
it was scored against (for `asrkit report`). An utterance that fails
(missing or damaged features or scores, NaN/inf values, no surviving path) is reported by name,
counted and skipped. An archive damaged in the middle cannot be read past the damage: what was
decoded before it is written and the command exits 1. The outputs of a run replace those of an
earlier run as a set (a run without a reference removes an older wer.txt and score.json).
`--nj N` decodes in N processes (the outputs are the same, in the same order).

`--hotwords FILE` favours the phrases it lists (one per line, an optional `:boost` in nats per
word; words of the graph) without rebuilding the graph.

Examples:
  asrkit decode --graph exp/graph_tg --model exp/blstm/final.mdl data/fbank/test --out exp/dec
  asrkit decode --graph exp/graph --logprobs ark:exp/logprobs.ark --out exp/dec --beam 12
"""

from __future__ import annotations

import json
import os
import sys
import time

COMMAND = "decode"
HELP = "decode with a TLG graph (Viterbi beam search): words, n-best, CTM, WER"


def add_arguments(parser) -> None:
    """Options: graph, score source (--model + DATA_DIR, or --logprobs), search and output."""
    parser.add_argument("data_dir", nargs="?", metavar="DATA_DIR",
                        help="data dir with feats.scp (needed with --model; its text is scored)")
    parser.add_argument("--graph", required=True, help="graph folder from asrkit graph build")
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="acoustic model file (asrkit train's final.mdl)")
    src.add_argument("--logprobs", metavar="RSPEC",
                     help="Kaldi table of log-probabilities [frames, tokens]")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--beam", type=float, default=16.0)
    parser.add_argument("--max-active", type=int, default=7000)
    parser.add_argument("--acoustic-scale", type=float, default=1.0)
    parser.add_argument("--word-insertion-penalty", type=float, default=0.0)
    parser.add_argument("--lattice-beam", type=float, default=8.0)
    parser.add_argument("--nbest", type=int, default=10, help="n-best size (1: 1-best only)")
    parser.add_argument("--frame-shift", type=float, default=None,
                        help="seconds per output frame (default: from the model, else 0.01)")
    parser.add_argument("--pipe-timeout", type=float, default=None, metavar="S",
                        help="seconds a 'cmd |' in a table may run (default: "
                             "$ASRKIT_PIPE_TIMEOUT, else 300)")
    parser.add_argument("--tune-wip", default=None, metavar="LO:HI:STEP",
                        help="pick the word insertion penalty with the lowest WER on DATA_DIR's "
                             "text by rescoring the n-best lists of one search at the range's "
                             "midpoint (writes best_wip and tune_wip.json; hyp.txt, wer.txt and "
                             "score.json hold the best value's results)")
    parser.add_argument("--hotwords", metavar="FILE", default=None,
                        help="phrases to favour, one per line ('phrase :boost', boost in nats "
                             "per word)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--nj", type=int, default=1,
                        help="decoding processes (results stay in input order)")


def _scores_from_table(rspec):
    """``(utt, log_probs or None, error or None)`` per entry of a table of log-probabilities.

    A damaged entry is a failed utterance. When nothing after it can be read (an archive
    damaged in the middle) TableError is raised after that entry; also when the table cannot
    be opened at all.
    """
    from asrkit.io import TableError, read_table_entries

    for entry in read_table_entries(rspec):
        yield entry.key, entry.value, None if entry.error is None else str(entry.error)
        if entry.error is not None and entry.fatal:
            raise TableError(f"{rspec}: nothing after key {entry.key!r} can be read")


def _non_finite(logp) -> str | None:
    """Why ``logp`` is unusable as log-probabilities, or None."""
    import numpy as np

    bad = ~np.isfinite(logp)
    if not bad.any():
        return None
    t, c = np.argwhere(bad)[0]
    return (f"log-probabilities are not finite ({int(bad.sum())} NaN/inf values, the first "
            f"{logp[t, c]} at frame {t}, token {c})")


def _check_options(args):
    """Numbers given on the command line: finite and in range, else CommandError."""
    import math

    from asrkit.cli.main import CommandError, check_workers

    for name in ("beam", "lattice_beam", "acoustic_scale", "word_insertion_penalty",
                 "frame_shift", "pipe_timeout"):
        value = getattr(args, name)
        if value is not None and not math.isfinite(value):
            raise CommandError(f"--{name.replace('_', '-')} must be a finite number, got {value}")
    for name in ("beam", "lattice_beam", "acoustic_scale", "frame_shift", "pipe_timeout"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            raise CommandError(f"--{name.replace('_', '-')} must be > 0, got {value}")
    check_workers(args.nj, "--nj")
    for name in ("max_active", "nbest"):
        if getattr(args, name) < 1:
            raise CommandError(f"--{name.replace('_', '-')} must be >= 1, got "
                               f"{getattr(args, name)}")


def _decode_one(graph, logp, error, opts, context=None) -> tuple:
    """``(frames, UtteranceResult, None)`` of one utterance's scores, or ``(0, None, why)``
    when they are missing (``error``), of the wrong shape, not finite, or the search fails.
    ``context``: the hotwords' ContextGraph (None: none)."""
    from asrkit.decoders.decode import decode_utterance

    try:
        if error is not None:
            raise ValueError(error)
        if logp.ndim != 2 or logp.shape[1] != graph.info.get("num_tokens", logp.shape[1]):
            raise ValueError(f"scores have shape {logp.shape}, the graph expects "
                             f"[frames, {graph.info.get('num_tokens')}]")
        why = _non_finite(logp)
        if why is not None:
            raise ValueError(why)
        return logp.shape[0], decode_utterance(graph, logp, opts, context), None
    except Exception as e:  # one bad utterance must not kill the run
        return 0, None, str(e)


_worker = {}  # a decoding worker process's graph and options


def _start_worker(graph_dir: str, opts, context=None) -> None:
    from asrkit.recognizer.parallel import THREAD_VARIABLES

    for name in THREAD_VARIABLES:  # one core per worker (set before numba's pool starts)
        os.environ[name] = "1"
    from asrkit.decoders.decode import DecodingGraph

    _worker.update(graph=DecodingGraph.load(graph_dir), opts=opts, context=context)


def _decode_in_worker(logp, error) -> tuple:
    return _decode_one(_worker["graph"], logp, error, _worker["opts"], _worker["context"])


def _decoded(source, graph, graph_dir: str, opts, nj: int, context=None):
    """``(utt, frames, UtteranceResult or None, error or None)`` of each ``(utt, log_probs,
    error)`` of ``source``, in input order, decoded here (``nj`` 1) or by ``nj`` worker
    processes (spawned; each loads the graph once). An exception of ``source`` is raised after
    the results of every entry read before it."""
    if nj <= 1:
        for utt, logp, error in source:
            yield utt, *_decode_one(graph, logp, error, opts, context)
        return
    import collections
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    from asrkit.cli.main import CommandError

    pool = ProcessPoolExecutor(nj, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_start_worker, initargs=(graph_dir, opts, context))
    pending = collections.deque()  # (utt, future) in input order, at most 4 * nj
    items, broken = iter(source), None
    try:
        while True:
            try:
                utt, logp, error = next(items)
            except StopIteration:
                break
            except Exception as e:  # re-raised below, after what was read before it
                broken = e
                break
            pending.append((utt, pool.submit(_decode_in_worker, logp, error)))
            while len(pending) > 4 * nj or pending[0][1].done():
                utt, future = pending.popleft()
                yield utt, *future.result()
                if not pending:
                    break
        while pending:
            utt, future = pending.popleft()
            yield utt, *future.result()
    except BrokenProcessPool as e:
        raise CommandError(f"a decoding worker process died ({e}); the machine may be out of "
                           "memory: try a smaller --nj") from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    if broken is not None:
        raise broken


def _publish(out: str, files: dict[str, str | None]) -> None:
    """Write the outputs of one run as a set: every file goes to a temporary first, then all
    are renamed into place; a file mapped to None (a score of an earlier run) is removed."""
    import contextlib
    import tempfile

    os.makedirs(out, exist_ok=True)
    staged = []
    try:
        for name, text in files.items():
            if text is None:
                continue
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=out)
            staged.append((tmp, os.path.join(out, name)))
            with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
    except BaseException:
        for tmp, _ in staged:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise
    for name, text in files.items():
        if text is None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(out, name))
    for tmp, final in staged:
        os.chmod(tmp, 0o644)
        os.replace(tmp, final)


def run(args) -> int:
    """Decode every utterance; exit 0 when every entry was read (failed utterances are
    reported and counted), 1 when a table could not be read to its end, 2 when nothing could
    be decoded."""
    from asrkit.cli.main import CommandError
    from asrkit.decoders.decode import DecodeOptions, DecodingGraph
    from asrkit.decoders.scoring import read_text_table, score_texts
    from asrkit.io import DataDirError, PipeError, TableError, set_pipe_timeout
    from asrkit.utils import progress

    _check_options(args)
    tune = None
    if args.tune_wip is not None:
        from asrkit.decoders.tuning import penalty_values

        try:
            tune = penalty_values(args.tune_wip)
        except ValueError as e:
            raise CommandError(f"--tune-wip: {e}") from None
        if not args.data_dir or not os.path.exists(os.path.join(args.data_dir, "text")):
            raise CommandError("--tune-wip needs a DATA_DIR with a text file to score against")
        # one search at the middle of the range; its n-best lists are rescored for each value
        args.word_insertion_penalty = tune[len(tune) // 2]
        args.nbest = max(args.nbest, 20)
    if args.pipe_timeout is not None:
        set_pipe_timeout(args.pipe_timeout)
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise CommandError(f"{args.out}: exists and is not a directory (--out is a folder)")
    if args.data_dir and not os.path.isdir(args.data_dir):
        raise CommandError(f"{args.data_dir}: no such data directory")
    try:
        graph = DecodingGraph.load(args.graph)
    except (OSError, ValueError, KeyError) as e:
        raise CommandError(str(e)) from e
    context = None
    if args.hotwords:
        from asrkit.recognizer.hotwords import load_hotwords, word_context
        from asrkit.recognizer.options import RecognizerError

        try:
            context = word_context(load_hotwords(args.hotwords), graph.words)
        except RecognizerError as e:
            raise CommandError(str(e)) from e
    frame_shift = args.frame_shift
    try:
        if args.model:
            if not args.data_dir:
                raise CommandError("--model needs a DATA_DIR with feats.scp")
            from asrkit.cli._model_scores import model_scores

            source, model_shift = model_scores(args.model, args.data_dir)
            frame_shift = frame_shift or model_shift
        else:
            source = _scores_from_table(args.logprobs)
        opts = DecodeOptions(beam=args.beam, max_active=args.max_active,
                             acoustic_scale=args.acoustic_scale,
                             word_insertion_penalty=args.word_insertion_penalty,
                             lattice_beam=args.lattice_beam, nbest=max(args.nbest, 1),
                             frame_shift=frame_shift or 0.01)
    except (DataDirError, TableError, PipeError, ValueError) as e:
        raise CommandError(str(e)) from e
    hyps, ctm, nbest_lines, failed, nbests = {}, [], [], {}, {}
    frames = 0
    unreadable = None  # why the input could not be read to its end
    t0 = time.perf_counter()
    items = _decoded(progress(source, desc="decode", unit="utt"), graph, args.graph, opts,
                     args.nj, context)
    while True:
        try:
            utt, num_frames, res, error = next(items)
        except StopIteration:
            break
        except Exception as e:  # the source broke: keep what was decoded, say where it stopped
            message = str(e) if isinstance(e, (TableError, PipeError, DataDirError, OSError)) \
                else f"{type(e).__name__}: {e}"
            if not hyps and not failed:
                raise CommandError(message) from e
            unreadable = message
            break
        if error is not None:
            failed[utt] = error
            print(f"asrkit decode: {utt}: {error}; skipped", file=sys.stderr)
            continue
        frames += num_frames
        if not res.reached_final:
            print(f"asrkit decode: {utt}: no final state reached; using the best partial path",
                  file=sys.stderr)
        hyps[utt] = res.text
        ctm += [f"{utt} 1 {t.start:.3f} {t.duration:.3f} {t.word} {t.confidence:.4f}"
                for t in res.timings]
        nbest_lines += [f"{utt}-{i + 1} {ac:.4f} {g:.4f} {' '.join(words)}".rstrip()
                        for i, ((words, _), (ac, g)) in
                        enumerate(zip(res.nbest, res.nbest_costs))]
        if tune is not None:
            nbests[utt] = [(words, ac, g) for (words, _), (ac, g) in
                           zip(res.nbest, res.nbest_costs)]
    elapsed = time.perf_counter() - t0
    if unreadable is not None:
        print(f"asrkit decode: error: {unreadable}; decoding stopped there", file=sys.stderr)
    if not hyps:
        raise CommandError(f"no utterance could be decoded ({len(failed)} failed)")
    outputs = {
        "hyp.txt": "".join(f"{u} {h}".rstrip() + "\n" for u, h in sorted(hyps.items())),
        "ctm": "".join(line + "\n" for line in ctm),
        "nbest.txt": "".join(line + "\n" for line in nbest_lines),
        "wer.txt": None, "score.json": None, "ref_text": None,
    }
    audio_s = frames * opts.frame_shift
    summary = {"decoded": len(hyps), "failed": len(failed), "seconds": round(elapsed, 3),
               "audio_seconds": round(audio_s, 3),
               "rtf": round(elapsed / audio_s, 5) if audio_s else None,
               "complete": unreadable is None}
    text_path = os.path.join(args.data_dir, "text") if args.data_dir else None
    if text_path and os.path.exists(text_path):
        try:
            ref = read_text_table(text_path)
        except (OSError, ValueError) as e:
            raise CommandError(f"{text_path}: {e}") from e
        ref = {u: r for u, r in ref.items() if u in hyps or u in failed}
        if tune is not None:
            from asrkit.decoders.tuning import tune_penalty

            tuned = tune_penalty(nbests, ref, tune, args.word_insertion_penalty)
            hyps.update(tuned.hyps)
            outputs["hyp.txt"] = "".join(f"{u} {h}".rstrip() + "\n"
                                         for u, h in sorted(hyps.items()))
            outputs["best_wip"] = f"{tuned.best:g}\n"
            outputs["tune_wip.json"] = json.dumps(
                {"searched_at": args.word_insertion_penalty, "best": tuned.best,
                 "wer": {f"{v:g}": round(w, 4) for v, w in tuned.curve}}, indent=2) + "\n"
            summary["best_wip"] = tuned.best
        rep = score_texts(ref, hyps)
        outputs["wer.txt"] = rep.report() + "\n"
        outputs["ref_text"] = os.path.abspath(text_path) + "\n"  # what asrkit report scores
        outputs["score.json"] = json.dumps(rep.as_dict(), indent=2) + "\n"
        summary["wer"] = round(rep.error_rate, 3)
        summary["wer_line"] = rep.summary_line()
    try:
        _publish(args.out, outputs)
    except OSError as e:
        raise CommandError(f"{args.out}: cannot write the outputs: {e.strerror or e}") from e
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"decoded {summary['decoded']} utterances ({summary['failed']} failed) in "
              f"{elapsed:.1f} s, RTF {summary['rtf']}" +
              (f"; {summary['wer_line']}" if "wer_line" in summary else "") +
              (f" (word insertion penalty {summary['best_wip']:g}, the best on this set)"
               if "best_wip" in summary else ""))
    return 0 if unreadable is None else 1
