"""Streaming with a trained chunked causal Conformer-transducer (tests/streaming/
tone_conformer_transducer.py: the five tone "words", sliding CMVN, Conv2d x4 front end, chunks
of 160 ms, stateless prediction network): the encoder runs chunk by chunk through the CTC
models' model stream, greedy and modified beam search fed its frames as they come equal offline
transcription, words come out soon after their chunk ends, and ``asrkit transcribe --stream``,
``asrkit serve`` and ``asrkit bench stream`` use it."""

import json
import subprocess
import sys

import numpy as np
import pytest

from asrkit import Recognizer
from asrkit.decoders.online import OnlineTransducerDecoder
from asrkit.decoders.transducer import TransducerBeamSearch, TransducerGreedySearch
from asrkit.recognizer.model_stream import CarriedStateStream
from asrkit.recognizer.model_stream_conformer import ConformerChunks, Conv2dFrontEnd
from tests.recognizer.tone_lstm import (
    RATE,
    check_bench_stream,
    check_partials_come_soon,
    check_streams_equal_offline,
    tone_utterance,
)
from tests.streaming.tone_conformer_transducer import FOLDER


@pytest.fixture(scope="module", params=["beam", "greedy"])
def rec(request):
    return Recognizer.from_dir(FOLDER, method=request.param)


@pytest.fixture(scope="module")
def utterances():
    rng = np.random.default_rng(2025)
    return [tone_utterance(rng) for _ in range(5)]


def test_the_encoder_streams_chunk_by_chunk(rec):
    stream = rec.stream()
    ms = stream.model
    assert isinstance(ms, CarriedStateStream) and ms.is_encoder and ms.num_classes == 32
    assert [type(s) for s in ms.stages[:2]] == [Conv2dFrontEnd, ConformerChunks]
    assert ms.delay == 6 + 3 * 4 and ms.subsampling == 4
    assert isinstance(stream.decoder, OnlineTransducerDecoder)
    kind = TransducerBeamSearch if rec.transducer.options.method == "beam" else \
        TransducerGreedySearch
    assert isinstance(stream.decoder.search, kind)


def test_streams_equal_offline_and_find_the_words(rec, utterances):
    # a transducer emits a word near its onset (its frame may start a little before)
    check_streams_equal_offline(rec, utterances, (-0.08, 0.25))


def test_words_appear_in_partials_soon_after_their_chunk(rec, utterances):
    # 0.1 s chunks: within the attention chunk (160 ms), the front end's window (60 ms) and
    # the feed chunk; sliding CMVN holds the first min_cmn_window frames (1 s)
    check_partials_come_soon(rec, utterances, 0.45, cmvn_causal=False)


def test_transcribe_stream_command(utterances):
    u = utterances[0]
    pcm = np.round(u.samples * 32767).astype("<i2").tobytes()
    r = subprocess.run([sys.executable, "-m", "asrkit", "transcribe", "--model-dir", FOLDER,
                        "--stream", "--json", "-"], input=pcm, capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    assert " ".join(e["text"] for e in events if e["kind"] == "final") == u.text
    assert any(e["kind"] == "partial" for e in events)


def test_server_streams_the_conformer_transducer(utterances):
    pytest.importorskip("aiohttp")
    from asrkit.serve import BackgroundServer, ServeOptions, make_app
    from asrkit.serve.client import stream_audio
    from tests.serve.fixtures import run

    u = utterances[1]
    rec = Recognizer.from_dir(FOLDER)
    with BackgroundServer(make_app(rec, ServeOptions(workers=1, max_queue=2))) as server:
        r = run(stream_audio(server.url, u.samples, RATE, chunk_s=0.1))
    assert not r.errors and r.text == u.text


def test_bench_stream_reports_latency_per_chunk(tmp_path, utterances, capsys):
    check_bench_stream(tmp_path, utterances, FOLDER, capsys)


def test_bench_stream_measures_each_search_method_side_by_side(tmp_path, utterances, capsys):
    """``asrkit bench stream --method greedy beam`` on two utterances (one reference word
    changed, so the WERs are not zero): one case per chunk size and method, in that order; each
    method's offline WER is jiwer's of that method's own transcripts, its stream gives the
    same words, every word is timed. A CTC folder refuses --method in one line."""
    import jiwer

    from asrkit.cli.main import main
    from tests.recognizer.tone_lstm import FOLDER as CTC_FOLDER
    from tests.recognizer.tone_lstm import write_data_dir

    data = tmp_path / "data"
    write_data_dir(str(data), utterances[:3], "u")
    refs = dict(line.split(" ", 1) for line in (data / "text").read_text().splitlines())
    words = refs["u-0000"].split()
    words[0] = "five" if words[0] != "five" else "one"
    refs["u-0000"] = " ".join(words)
    (data / "text").write_text("".join(f"{u} {t}\n" for u, t in refs.items()))
    assert main(["bench", "stream", str(data), "--model-dir", FOLDER, "--method", "greedy",
                 "beam", "--chunks", "0.1", "0.5", "--max-utts", "2", "--json"]) == 0
    cases = json.loads(capsys.readouterr().out)["cases"]
    assert [(c["extra"]["chunk_s"], c["extra"]["method"]) for c in cases] == [
        (0.1, "greedy"), (0.1, "beam"), (0.5, "greedy"), (0.5, "beam")]
    assert cases[0]["name"] == "stream chunk 0.1 s greedy"
    used = sorted(refs)[:2]
    for c in cases:
        x = c["extra"]
        rec = Recognizer.from_dir(FOLDER, method=x["method"])
        hyps = [rec.transcribe(u.samples, RATE).text for u in utterances[:2]]
        want = 100 * jiwer.wer([refs[u] for u in used], hyps)
        assert 0 < x["wer_offline"] == pytest.approx(want, abs=0.01)
        assert x["wer_stream"] == x["wer_offline"] and x["utterances"] == 2
        assert x["words_timed"] == sum(len(u.words) for u in utterances[:2]) - 1
        assert 0 < x["rtf"] and 0 < x["offline_rtf"] and c["reference_s"] > 0
    assert main(["bench", "stream", str(data), "--model-dir", CTC_FOLDER, "--method",
                 "beam"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--method picks a transducer's search (beam); this is a CTC " \
        "model" in err[0], err
