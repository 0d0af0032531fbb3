"""Streaming with a trained chunked causal Conformer-CTC model (tests/streaming/tone_conformer.py:
the five tone "words", sliding CMVN, Conv2d x4 front end, chunks of 160 ms): the stream runs the
model chunk by chunk and equals offline transcription, words come out soon after their chunk
ends, and ``asrkit transcribe --stream``, ``asrkit serve`` and ``asrkit bench stream`` use it."""

import json
import subprocess
import sys

import numpy as np
import pytest

from asrkit import Recognizer
from asrkit.cli.main import main
from asrkit.recognizer.model_stream import CarriedStateStream
from asrkit.recognizer.model_stream_conformer import ConformerChunks, Conv2dFrontEnd
from tests.recognizer.tone_lstm import RATE, tone_utterance, write_data_dir
from tests.streaming.tone_conformer import FOLDER


@pytest.fixture(scope="module")
def rec():
    return Recognizer.from_dir(FOLDER)


@pytest.fixture(scope="module")
def utterances():
    rng = np.random.default_rng(2025)
    return [tone_utterance(rng) for _ in range(5)]


def _stream(rec, samples, chunk_s, **options):
    """Events with the audio time (seconds) at which the chunk that gave them ended."""
    stream = rec.stream(**options)
    size = int(chunk_s * RATE)
    out = []
    for i in range(0, len(samples), size):
        out += [(e, min(i + size, len(samples)) / RATE) for e in stream.accept(
            samples[i:i + size], RATE)]
    return out + [(e, len(samples) / RATE) for e in stream.finish()]


def test_the_model_streams_chunk_by_chunk(rec):
    ms = rec.stream().model
    assert isinstance(ms, CarriedStateStream)
    assert [type(s) for s in ms.stages[:2]] == [Conv2dFrontEnd, ConformerChunks]
    assert ms.stages[1].chunk == 4 and ms.stages[1].left == 4
    assert ms.delay == 6 + 3 * 4 and ms.subsampling == 4


def test_streams_equal_offline_and_find_the_words(rec, utterances):
    for k, u in enumerate(utterances):
        offline = rec.transcribe(u.samples, RATE)
        assert offline.text == u.text
        # a chunked model learns to fire late, up to its chunk (160 ms) after the onset
        for w, (word, start, _) in zip(offline.words, u.words):
            assert w.word == word and -0.05 <= w.start - start <= 0.25
        events = _stream(rec, u.samples, [0.05, 0.13, 0.5][k % 3], endpoint=False)
        (final, _), = [(e, t) for e, t in events if e.kind == "final"]
        assert [w.as_dict() for w in final.words] == [w.as_dict() for w in offline.words]


def test_words_appear_in_partials_soon_after_their_chunk(rec, utterances):
    # 0.1 s chunks: a word shows within its attention chunk (160 ms), the front end's window
    # (60 ms), the feed chunk and CTC's spike of its end; sliding CMVN holds the first
    # min_cmn_window frames (1 s) until their window is there
    held = rec.normalization["min_cmn_window"] * 0.01 + 0.015
    for u in utterances:
        events = _stream(rec, u.samples, 0.1, partial_interval=0.0, cmvn_causal=False)
        seen = {}
        for e, t in events:
            for k, w in enumerate(e.words):
                seen.setdefault((e.segment, k), (w.word, t))
        finals = [e for e, _ in events if e.kind == "final"]
        assert " ".join(f.text for f in finals) == u.text
        flat = [(f.segment, k) for f in finals for k in range(len(f.words))]
        for (seg, k), (word, _, end) in zip(flat, u.words):
            first_word, t = seen[(seg, k)]
            assert first_word == word and t - max(end, held) <= 0.45, (word, end, t)


def test_transcribe_stream_command(rec, utterances):
    u = utterances[0]
    pcm = np.round(u.samples * 32767).astype("<i2").tobytes()
    r = subprocess.run([sys.executable, "-m", "asrkit", "transcribe", "--model-dir", FOLDER,
                        "--stream", "--json", "--no-endpoint", "-"], input=pcm,
                       capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    assert events[-1]["kind"] == "final" and events[-1]["text"] == u.text
    assert any(e["kind"] == "partial" for e in events[:-1])


def test_server_streams_the_conformer(rec, utterances):
    pytest.importorskip("aiohttp")
    from asrkit.serve import BackgroundServer, ServeOptions, make_app
    from asrkit.serve.client import stream_audio
    from tests.serve.fixtures import run

    u = utterances[1]
    with BackgroundServer(make_app(rec, ServeOptions(workers=1, max_queue=2))) as server:
        r = run(stream_audio(server.url, u.samples, RATE, chunk_s=0.1))
    assert not r.errors and r.text == u.text


def test_bench_stream_reports_latency_per_chunk(tmp_path, utterances, capsys):
    data = tmp_path / "data"
    write_data_dir(str(data), utterances[:3], "u")
    assert main(["bench", "stream", str(data), "--model-dir", FOLDER, "--chunks", "0.1",
                 "0.5", "--json"]) == 0
    cases = json.loads(capsys.readouterr().out)["cases"]
    for c in cases:
        x = c["extra"]
        assert x["wer_stream"] == 0.0 and x["wer_offline"] == 0.0
        assert x["words_timed"] == sum(len(u.words) for u in utterances[:3])
        assert x["first_partial_ms_p50"] <= x["final_ms_p50"]
    assert cases[0]["extra"]["first_partial_ms_p50"] < cases[1]["extra"]["first_partial_ms_p50"]
