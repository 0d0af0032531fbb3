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
`asrkit nnlm rescore --acoustic-scale 1` ranks as the decoder did. An utterance that fails
(missing features, no surviving path) is reported, counted and skipped.

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
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def _scores_from_table(rspec):
    from asrkit.io import read_table

    for utt, mat in read_table(rspec):
        yield utt, mat, None


def run(args) -> int:
    """Decode every utterance; exit 0 unless nothing could be decoded."""
    from asrkit.cli.main import CommandError
    from asrkit.decoders.decode import DecodeOptions, DecodingGraph, decode_utterance
    from asrkit.decoders.scoring import read_text_table, score_texts
    from asrkit.utils import atomic_write_text, progress

    try:
        graph = DecodingGraph.load(args.graph)
    except (OSError, ValueError) as e:
        raise CommandError(str(e)) from e
    frame_shift = args.frame_shift
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
    hyps, ctm, nbest_lines, failed = {}, [], [], {}
    frames = 0
    t0 = time.perf_counter()
    for utt, logp, _ in progress(source, desc="decode", unit="utt"):
        try:
            if logp.ndim != 2 or logp.shape[1] != graph.info.get("num_tokens", logp.shape[1]):
                raise ValueError(f"scores have shape {logp.shape}, the graph expects "
                                 f"[frames, {graph.info.get('num_tokens')}]")
            res = decode_utterance(graph, logp, opts)
        except Exception as e:  # one bad utterance must not kill the run
            failed[utt] = str(e)
            print(f"asrkit decode: {utt}: {e}; skipped", file=sys.stderr)
            continue
        frames += logp.shape[0]
        if not res.reached_final:
            print(f"asrkit decode: {utt}: no final state reached; using the best partial path",
                  file=sys.stderr)
        hyps[utt] = res.text
        ctm += [f"{utt} 1 {t.start:.3f} {t.duration:.3f} {t.word} {t.confidence:.4f}"
                for t in res.timings]
        nbest_lines += [f"{utt}-{i + 1} {ac:.4f} {g:.4f} {' '.join(words)}".rstrip()
                        for i, ((words, _), (ac, g)) in
                        enumerate(zip(res.nbest, res.nbest_costs))]
    elapsed = time.perf_counter() - t0
    if not hyps:
        raise CommandError(f"no utterance could be decoded ({len(failed)} failed)")
    os.makedirs(args.out, exist_ok=True)
    atomic_write_text(os.path.join(args.out, "hyp.txt"),
                      "".join(f"{u} {h}".rstrip() + "\n" for u, h in sorted(hyps.items())))
    atomic_write_text(os.path.join(args.out, "ctm"), "".join(line + "\n" for line in ctm))
    atomic_write_text(os.path.join(args.out, "nbest.txt"),
                      "".join(line + "\n" for line in nbest_lines))
    audio_s = frames * opts.frame_shift
    summary = {"decoded": len(hyps), "failed": len(failed), "seconds": round(elapsed, 3),
               "audio_seconds": round(audio_s, 3),
               "rtf": round(elapsed / audio_s, 5) if audio_s else None}
    text_path = os.path.join(args.data_dir, "text") if args.data_dir else None
    if text_path and os.path.exists(text_path):
        ref = read_text_table(text_path)
        ref = {u: r for u, r in ref.items() if u in hyps or u in failed}
        rep = score_texts(ref, hyps)
        atomic_write_text(os.path.join(args.out, "wer.txt"), rep.report() + "\n")
        atomic_write_text(os.path.join(args.out, "score.json"),
                          json.dumps(rep.as_dict(), indent=2) + "\n")
        summary["wer"] = round(rep.error_rate, 3)
        summary["wer_line"] = rep.summary_line()
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"decoded {summary['decoded']} utterances ({summary['failed']} failed) in "
              f"{elapsed:.1f} s, RTF {summary['rtf']}" +
              (f"; {summary['wer_line']}" if "wer_line" in summary else ""))
    return 0
