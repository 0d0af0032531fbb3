"""Streaming with a trained unidirectional LSTM-CTC model (tests/recognizer/tone_lstm.py: five
tone "words", sliding CMVN, 3-frame stacking): chunked streams equal offline transcription,
words come out in partial results soon after they end, and ``asrkit bench stream`` measures it.
"""

import json

import numpy as np
import pytest

from asrkit import Recognizer
from asrkit.cli.main import main
from asrkit.recognizer.model_stream import CarriedStateStream
from tests.recognizer.tone_lstm import FOLDER, RATE, tone_utterance, write_data_dir


@pytest.fixture(scope="module")
def rec():
    return Recognizer.from_dir(FOLDER)


@pytest.fixture(scope="module")
def utterances():
    rng = np.random.default_rng(2024)
    return [tone_utterance(rng) for _ in range(6)]


def _stream(rec, samples, chunk_s, **options):
    """Events with the audio time (seconds) at which the chunk that gave them ended."""
    stream = rec.stream(**options)
    size = int(chunk_s * RATE)
    out = []
    for i in range(0, len(samples), size):
        out += [(e, min(i + size, len(samples)) / RATE) for e in stream.accept(
            samples[i:i + size], RATE)]
    return out + [(e, len(samples) / RATE) for e in stream.finish()]


def test_the_model_streams_with_carried_state(rec):
    assert isinstance(rec.stream().model, CarriedStateStream)
    assert rec.normalization["cmvn"] == "sliding"


def test_streams_equal_offline_and_find_the_words(rec, utterances):
    for k, u in enumerate(utterances):
        offline = rec.transcribe(u.samples, RATE)
        assert offline.text == u.text
        for w, (word, start, _) in zip(offline.words, u.words):
            assert w.word == word and abs(w.start - start) <= 0.1
        events = _stream(rec, u.samples, [0.05, 0.13, 0.5][k % 3], endpoint=False)
        (final, _), = [(e, t) for e, t in events if e.kind == "final"]
        assert [w.as_dict() for w in final.words] == [w.as_dict() for w in offline.words]


def test_words_appear_in_partials_soon_after_they_end(rec, utterances):
    # 0.1 s chunks: a word shows in a partial result within a few chunks of its end (the
    # network's 2-frame stacking lookahead, the chunk, CTC's spike); exact sliding CMVN holds
    # the first min_cmn_window frames (1 s) until their window is there
    held = rec.normalization["min_cmn_window"] * 0.01 + 0.015
    for u in utterances:
        events = _stream(rec, u.samples, 0.1, partial_interval=0.0)
        seen = {}
        for e, t in events:
            for k, w in enumerate(e.words):
                seen.setdefault((e.segment, k), (w.word, t))
        finals = [e for e, _ in events if e.kind == "final"]
        assert " ".join(f.text for f in finals) == u.text
        flat = [(f.segment, k) for f in finals for k in range(len(f.words))]
        for (seg, k), (word, _, end) in zip(flat, u.words):
            first_word, t = seen[(seg, k)]
            assert first_word == word and t - max(end, held) <= 0.35, (word, end, t)


def test_causal_cmvn_does_not_hold_the_start(rec, utterances):
    u = utterances[0]
    assert u.words[0][2] < 0.7
    exact = _stream(rec, u.samples, 0.1, partial_interval=0.0)
    causal = _stream(rec, u.samples, 0.1, partial_interval=0.0, cmvn_causal=True)
    assert rec.stream(cmvn_causal=True).cmvn.delay_frames == 0
    assert exact[0][1] > 1.0 and causal[0][1] <= u.words[0][2] + 0.35


def test_bench_stream_reports_latency_per_chunk(tmp_path, utterances, capsys):
    data = tmp_path / "data"
    write_data_dir(str(data), utterances[:3], "u")
    assert main(["bench", "stream", str(data), "--model-dir", FOLDER, "--chunks", "0.1",
                 "0.5", "--json"]) == 0
    cases = json.loads(capsys.readouterr().out)["cases"]
    assert [c["extra"]["chunk_s"] for c in cases] == [0.1, 0.5]
    for c in cases:
        x = c["extra"]
        assert x["wer_stream"] == 0.0 and x["wer_offline"] == 0.0
        assert x["words_timed"] == sum(len(u.words) for u in utterances[:3])
        # the final comes at an endpoint (0.5 s of trailing blank) or at the end of the input
        assert x["first_partial_ms_p50"] <= x["final_ms_p50"]
        assert 0 < x["rtf"] and 0 < x["offline_rtf"]
    # bigger chunks wait longer for their first partial
    assert cases[0]["extra"]["first_partial_ms_p50"] < cases[1]["extra"]["first_partial_ms_p50"]
