"""An exported model's WER on a test set, through asrkit's own features and search.

``score_exports(model_dir, data_dir, networks)`` transcribes a Kaldi data directory with the
model folder's own network and with each stand-in network: ``asrkit.export.OnnxModel`` for a
CTC export, ``asrkit.export.OnnxTransducer`` for a transducer's three files (fp32 or int8). The
features, normalisation, chunking and search are the folder's (its decoding graph; a
transducer's greedy or modified beam search with its word bonus and LM, as its ``decode`` table
says), so the WERs differ only by the networks. ``asrkit export --test`` prints it.
"""

from __future__ import annotations

import dataclasses
import sys
import time


def score_exports(model_dir: str, data_dir: str, networks: dict, max_utts: int | None = None
                  ) -> dict:
    """Transcribe ``data_dir`` (``wav.scp`` + ``text``) with the model folder ``model_dir``
    and with each of ``networks`` ({name: a network standing in for the folder's model, with
    a ``seconds`` counter of its own time}) in its place; at most ``max_utts`` utterances.

    Returns ``{"data_dir", "utterances": int, "unreadable": int (left out of every WER, each
    named on stderr), "audio_seconds": float, "search": {option: value} (the folder's),
    "models": {"asrkit" and each name: {"wer": percent, "wer_line": str, "seconds": total
    transcription time; the networks also "network_seconds", "network_rtf",
    "same_text_as_asrkit": utterances}}}``. Raises RecognizerError (a folder that cannot
    transcribe), OSError or ValueError (a data dir without text, or with no readable audio).
    """
    from asrkit.decoders.scoring import score_texts
    from asrkit.io import DataDir
    from asrkit.recognizer import Recognizer
    from asrkit.utils import progress

    base = Recognizer.from_dir(model_dir)
    base.check_can_transcribe()
    d = DataDir.read(data_dir)
    if not d.has("text"):
        raise ValueError(f"{data_dir}: no text file: the test set needs references")
    ref = d.text()
    utts = d.utt_ids()[:max_utts]
    recs = {"asrkit": base, **{
        name: Recognizer(dataclasses.replace(base.folder, model=net), base.options,
                         base.max_chunk) for name, net in networks.items()}}
    hyps = {name: {} for name in recs}
    seconds = dict.fromkeys(recs, 0.0)
    audio_s, unreadable = 0.0, 0
    for u in progress(d.audio(utts, sample_rate=base.sample_rate), total=len(utts),
                      desc="test set", unit="utt"):
        if u.error is not None:
            print(f"{data_dir}: {u.utt_id}: {u.error}; skipped", file=sys.stderr)
            unreadable += 1
            continue
        audio_s += len(u.waveform) / base.sample_rate
        for name, rec in recs.items():
            t0 = time.perf_counter()
            hyps[name][u.utt_id] = rec.transcribe(u.waveform, base.sample_rate,
                                                  name=u.utt_id).text
            seconds[name] += time.perf_counter() - t0
    if not hyps["asrkit"]:
        raise ValueError(f"{data_dir}: no utterance could be read")
    search = {k: v for k, v in dataclasses.asdict(base.options).items() if k != "frame_shift"}
    out = {"data_dir": data_dir, "utterances": len(hyps["asrkit"]), "unreadable": unreadable,
           "audio_seconds": round(audio_s, 2), "search": search, "models": {}}
    for name in recs:
        rep = score_texts({u: ref.get(u, "") for u in hyps[name]}, hyps[name])
        row = {"wer": round(rep.error_rate, 3), "wer_line": rep.summary_line(),
               "seconds": round(seconds[name], 3)}
        if name in networks:
            net_s = networks[name].seconds
            row["network_seconds"] = round(net_s, 6)
            row["network_rtf"] = round(net_s / audio_s, 5) if audio_s else None
            row["same_text_as_asrkit"] = sum(hyps[name][u] == hyps["asrkit"][u]
                                              for u in hyps[name])
        out["models"][name] = row
    return out
