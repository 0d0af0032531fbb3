"""asrkit serve over loopback: uploads and streams give the Recognizer's words; malformed
messages, bad audio and overload give that client an error and never stop the server."""

import asyncio
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.serve.fixtures import RATE, WORDS, run

aiohttp = pytest.importorskip("aiohttp")

from asrkit.recognizer import Recognizer  # noqa: E402
from asrkit.serve import BackgroundServer, ServeOptions, make_app  # noqa: E402
from asrkit.serve.client import stream_audio, stream_url, upload  # noqa: E402


async def _get(url):
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        return r.status, await r.json()


async def _post(url, **kw):
    async with aiohttp.ClientSession() as s, s.post(url, **kw) as r:
        return r.status, await r.json()


def test_health(server):
    status, h = run(_get(server.url + "/health"))
    assert status == 200 and h["status"] == "ok"
    assert h["sample_rate"] == RATE and h["workers"] == 2 and h["max_queue"] == 4
    assert h["experiments"] is True and h["model"] == os.path.abspath(
        server.recognizer.folder.path)


def test_upload_gives_the_recognizers_result(server, wav):
    path, _, _ = wav
    expected = server.recognizer.transcribe(path).as_dict()
    status, body, _ = run(upload(server.url, path))
    assert status == 200
    assert {k: body[k] for k in expected} == expected
    assert body["text"] == " ".join(WORDS) and body["name"] == "words.wav"
    assert body["rtf"] > 0
    form = aiohttp.FormData()
    with open(path, "rb") as f:
        form.add_field("file", f.read(), filename="w.wav", content_type="audio/wav")
    status, body = run(_post(server.url + "/v1/transcribe", data=form))
    assert status == 200 and body["words"] == expected["words"] and body["name"] == "w.wav"


def test_bad_uploads_are_client_errors(server, wav, tmp_path):
    status, body = run(_post(server.url + "/v1/transcribe", data=b"RIFF not really a wav"))
    assert status == 400 and "cannot read audio" in body["error"]
    status, body = run(_post(server.url + "/v1/transcribe", data=b""))
    assert status == 400 and "empty upload" in body["error"]
    form = aiohttp.FormData()
    form.add_field("other", b"x", filename="x.wav")
    status, body = run(_post(server.url + "/v1/transcribe", data=form))
    assert status == 400 and "no 'file' field" in body["error"]
    big = np.zeros(40 * RATE, np.float32)  # 1.28 MB of int16 > the 1 MB limit
    import soundfile as sf

    sf.write(tmp_path / "big.wav", big, RATE, subtype="PCM_16")
    status, body, _ = run(upload(server.url, str(tmp_path / "big.wav")))
    assert status == 413 and "larger than the limit of 1 MB" in body["error"]
    status, body = run(_get(server.url + "/nope"))
    assert status == 404 and body["error"]
    assert run(_get(server.url + "/health"))[0] == 200  # still serving


def test_stream_gives_partial_and_final_results(server, wav):
    _, x, starts = wav
    r = run(stream_audio(server.url, x, RATE, chunk_s=0.1))
    assert not r.errors
    assert r.text == " ".join(WORDS)
    kinds = [e["type"] for e in r.events]
    assert "partial" in kinds and kinds[-1] == "final"
    words = [w for e in r.finals for w in e["words"]]
    assert [w["word"] for w in words] == WORDS
    for w, t in zip(words, starts):
        assert abs(w["start"] - t) < 0.1 and 0 <= w["confidence"] <= 1
    assert r.audio_s == pytest.approx(len(x) / RATE, abs=1e-3)


def test_stream_at_another_rate_and_as_float(server, wav):
    from asrkit.features import resample

    _, x, _ = wav
    x8 = resample(x, RATE, 8000)
    r = run(stream_audio(server.url, x8, 8000, chunk_s=0.25))
    assert r.text == " ".join(WORDS)

    async def as_float():
        async with aiohttp.ClientSession() as s, \
                s.ws_connect(stream_url(server.url, RATE, "f32le")) as ws:
            assert (await ws.receive_json())["format"] == "f32le"
            await ws.send_bytes(x.astype("<f4").tobytes())
            await ws.send_str("EOF")
            out = []
            async for m in ws:
                out.append(json.loads(m.data))
            return out

    events = run(as_float())
    assert events[-1]["type"] == "done"
    assert " ".join(e["text"] for e in events if e["type"] == "final") == " ".join(WORDS)


def test_malformed_messages_get_errors_and_the_stream_goes_on(server, wav):
    _, x, _ = wav
    pcm = (x * 32767).astype("<i2").tobytes()
    half = len(pcm) // 4 * 2

    async def go():
        async with aiohttp.ClientSession() as s, \
                s.ws_connect(stream_url(server.url, RATE)) as ws:
            await ws.receive_json()
            await ws.send_bytes(pcm[:half])
            await ws.send_bytes(b"\x01\x02\x03")          # not whole samples
            await ws.send_str("{not json")
            await ws.send_str(json.dumps({"type": "reset"}))
            await ws.send_str(json.dumps([1, 2]))
            await ws.send_bytes(pcm[half:])
            await ws.send_json({"type": "end"})
            return [json.loads(m.data) async for m in ws]

    events = run(go())
    errors = [e["message"] for e in events if e["type"] == "error"]
    assert len(errors) == 4
    assert "3 bytes is not a whole number of 2-byte samples" in errors[0]
    assert errors[1].startswith("not JSON") and "unknown message" in errors[2]
    assert " ".join(e["text"] for e in events if e["type"] == "final") == " ".join(WORDS)
    assert events[-1]["type"] == "done"

    async def nan_floats():
        async with aiohttp.ClientSession() as s, \
                s.ws_connect(stream_url(server.url, RATE, "f32le")) as ws:
            await ws.receive_json()
            await ws.send_bytes(np.array([0.1, np.nan], "<f4").tobytes())
            return await ws.receive_json()

    assert "NaN or infinite" in run(nan_floats())["message"]


@pytest.mark.parametrize("query,message", [
    ("", "rate: give the sample rate"),
    ("?rate=abc", "rate: expected a whole number of Hz, got 'abc'"),
    ("?rate=12", "rate: expected 1000 to 384000 Hz, got 12"),
    ("?rate=16000&format=mp3", "format: expected one of s16le, f32le, got 'mp3'"),
    ("?rate=16000&partial_interval=-1", "partial_interval"),
])
def test_a_bad_stream_request_is_refused_with_a_reason(server, query, message):
    async def go():
        async with aiohttp.ClientSession() as s, \
                s.ws_connect(server.url.replace("http", "ws") + "/v1/stream" + query) as ws:
            first = await ws.receive_json()
            await ws.receive()
            return first, ws.close_code

    first, code = run(go())
    assert first["type"] == "error" and message in first["message"] and code == 1008


class SlowRecognizer(Recognizer):
    """The tone model, with transcribe taking at least DELAY seconds."""

    DELAY = 1.5

    def transcribe(self, *args, **kw):
        time.sleep(self.DELAY)
        return super().transcribe(*args, **kw)


def test_overload_is_refused_at_once_and_timeouts_answer(tone_folder, wav):
    path, x, _ = wav
    base = Recognizer.from_dir(tone_folder)
    rec = SlowRecognizer(base.folder, base.options)
    app = make_app(rec, ServeOptions(workers=1, max_queue=1, timeout=0.5, max_streams=1,
                                     idle_timeout=0.5), warm_up=False)

    async def burst(url):
        async with aiohttp.ClientSession() as s:
            return await asyncio.gather(*[upload(url, path, session=s) for _ in range(4)])

    async def two_streams(url):
        async with aiohttp.ClientSession() as s, s.ws_connect(stream_url(url, RATE)) as a:
            assert (await a.receive_json())["type"] == "ready"
            async with s.ws_connect(stream_url(url, RATE)) as b:
                refused = await b.receive_json()
                await b.receive()
                code = b.close_code
            idle = await a.receive_json()  # a sends nothing: closed after idle_timeout
            return refused, code, idle

    with BackgroundServer(app) as slow:
        results = run(burst(slow.url))
        statuses = sorted(r[0] for r in results)
        # one runs, one waits; both outlive the 0.5 s timeout; the other two are refused
        assert statuses == [503, 503, 504, 504]
        for status, body, seconds in results:
            if status == 503:
                assert "busy" in body["error"] and seconds < SlowRecognizer.DELAY
            else:
                assert "took longer than 0.5 s" in body["error"]
        deadline = time.monotonic() + 60  # the timed-out jobs end on their own
        while True:
            h = run(_get(slow.url + "/health"))[1]
            if h["running"] + h["waiting"] == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert (h["refused"], h["timed_out"], h["running"], h["waiting"]) == (2, 2, 0, 0)
        refused, code, idle = run(two_streams(slow.url))
        assert "busy (1 streams open)" in refused["message"] and code == 1013
        assert idle["type"] == "error" and "no message for 0.5 s" in idle["message"]
        assert run(_get(slow.url + "/health"))[1]["streams"] == 0


def test_options_are_checked():
    for kw, msg in (({"workers": 0}, "workers must be"), ({"max_queue": -1}, "max_queue"),
                    ({"timeout": float("nan")}, "timeout must be a positive number"),
                    ({"max_upload_mb": 0}, "max_upload_mb"),
                    ({"exp_dir": "/nonexistent"}, "no such experiments folder")):
        with pytest.raises(ValueError, match=msg):
            ServeOptions(**kw)


def test_the_command_serves_and_stops_on_sigterm(tone_folder, wav, tmp_path):
    import signal

    proc = subprocess.Popen([sys.executable, "-m", "asrkit", "serve", "--model-dir", tone_folder,
                             "--port", "0", "--workers", "1"], stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        assert "asrkit serve:" in line and "http://127.0.0.1:" in line, line
        url = line.split(" on ")[1].split("/ ")[0]
        status, body, _ = run(upload(url, wav[0]))
        assert status == 200 and body["text"] == " ".join(WORDS)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    bad = subprocess.run([sys.executable, "-m", "asrkit", "serve", "--model-dir",
                          str(tmp_path / "nope")], capture_output=True, text=True)
    assert bad.returncode == 2 and "nope: no such folder" in bad.stderr
    bad = subprocess.run([sys.executable, "-m", "asrkit", "serve", "--model-dir", tone_folder,
                          "--workers", "0"], capture_output=True, text=True)
    assert bad.returncode == 2 and "workers must be a whole number >= 1" in bad.stderr


class BrokenStreams(Recognizer):
    """The tone model, with streams whose steps fail as a bug would."""

    def stream(self, **options):
        inner = super().stream(**options)

        class Broken:
            def accept(self, samples, rate):
                if len(samples) > RATE:
                    raise RuntimeError("a bug in a step")
                return inner.accept(samples, rate)

            def finish(self):
                return inner.finish()

        return Broken()


def test_a_failing_step_ends_that_stream_only(tone_folder, wav):
    _, x, _ = wav
    base = Recognizer.from_dir(tone_folder)
    app = make_app(BrokenStreams(base.folder, base.options), ServeOptions(workers=1),
                   warm_up=False)

    async def go(url):
        async with aiohttp.ClientSession() as s, s.ws_connect(stream_url(url, RATE)) as ws:
            await ws.receive_json()
            await ws.send_bytes((x * 32767).astype("<i2").tobytes())
            return [json.loads(m.data) async for m in ws]

    with BackgroundServer(app) as broken:
        events = run(go(broken.url))
        assert events[-1] == {"type": "error",
                              "message": "internal error: RuntimeError: a bug in a step"}
        r = run(stream_audio(broken.url, x[: RATE // 2], RATE))  # small chunks still work
        assert not r.errors
        assert run(_get(broken.url + "/health"))[1]["streams"] == 0
