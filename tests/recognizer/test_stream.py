"""``Recognizer.stream()``: chunked audio gives the offline transcription (tone model folder of
tests/recognizer/tones.py), segments end at endpoints, hotwords bias offline and streaming
search alike; the model step (``model_stream``) equals the whole-utterance network; and
``asrkit transcribe --stream`` reads raw PCM from stdin or files."""

import json
import subprocess
import sys

import numpy as np
import pytest

from asrkit import Recognizer
from asrkit.features import resample
from asrkit.models import Model
from asrkit.recognizer import RecognizerError
from asrkit.recognizer.model_stream import CarriedStateStream, WindowedStream, model_stream
from tests.recognizer.tones import make_tone_folder, recording, set_manifest, write_wav

WORDS = ["one", "two", "three", "two", "one"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_tone_folder(str(tmp_path_factory.mktemp("tones")))


@pytest.fixture(scope="module")
def rec(folder):
    return Recognizer.from_dir(folder)


def _feed(stream, samples, rate, seed, most=0.3):
    """Events of ``samples`` fed in random chunks (empty ones too), then finish."""
    rng = np.random.default_rng(seed)
    events, i = [], 0
    while i < len(samples):
        n = int(rng.integers(0, int(most * rate)))
        events += stream.accept(samples[i:i + n], rate)
        i += n
    return events + stream.finish()


def _finals(events):
    return [e for e in events if e.kind == "final"]


@pytest.mark.parametrize("rate", [16000, 8000])
@pytest.mark.parametrize("as_int16", [False, True])
def test_stream_fed_whole_equals_offline(rec, rate, as_int16):
    wave, _ = recording(WORDS, rate=rate, seed=rate)
    offline = rec.transcribe(wave, rate)
    x = np.round(wave * 32767).astype(np.int16) if as_int16 else wave
    if as_int16:
        offline = rec.transcribe(x, rate)
    events = _feed(rec.stream(endpoint=False), x, rate, seed=1)
    (final,) = _finals(events)
    assert final.text == offline.text and final.segment == 0 and final.start == 0.0
    assert [w.as_dict() for w in final.words] == [w.as_dict() for w in offline.words]
    # partials grow word by word, with the times the final has
    partials = [e for e in events if e.kind == "partial"]
    assert [p.text for p in partials] == [" ".join(WORDS[:k]) for k in range(1, 6)][:len(
        partials)]
    assert len(partials) >= 4
    for p in partials:
        for w, f in zip(p.words, final.words):
            assert w.word == f.word and w.start == pytest.approx(f.start)
    assert all(a.end <= b.end for a, b in zip(partials, partials[1:]))


@pytest.mark.parametrize("manifest", [
    {"cmvn": "sliding", "cmn_window": 200, "min_cmn_window": 50},
    {"cmvn": "sliding", "cmn_window": 120, "min_cmn_window": 50, "cmn_center": True},
])
def test_sliding_cmvn_streams_exactly(tmp_path, manifest):
    folder = make_tone_folder(str(tmp_path / "t"))
    set_manifest(folder, **manifest)
    rec = Recognizer.from_dir(folder)
    wave, _ = recording(WORDS, seed=3)
    offline = rec.transcribe(wave, 16000)
    (final,) = _finals(_feed(rec.stream(endpoint=False), wave, 16000, seed=4))
    assert [w.as_dict() for w in final.words] == [w.as_dict() for w in offline.words]


def test_endpoints_cut_segments_with_stream_times(rec):
    first, starts1 = recording(["one", "two"], seed=5)
    second, starts2 = recording(["three"], seed=6)
    pause = np.zeros(16000 * 2, np.float32)
    wave = np.concatenate([first, pause, second])
    events = _feed(rec.stream(), wave, 16000, seed=7, most=0.1)
    finals = _finals(events)
    assert [(f.segment, f.text) for f in finals] == [(0, "one two"), (1, "three")]
    offset = (len(first) + len(pause)) / 16000
    for w, s in zip(finals[0].words + finals[1].words, starts1 + [offset + starts2[0]]):
        assert abs(w.start - s) <= 0.03
    assert finals[0].end <= finals[1].start + 1e-9 and finals[1].end <= len(wave) / 16000
    # rule2 fires within a chunk of 0.5 s of silence after the last tone (no LM: cost 0)
    last_tone_end = starts1[-1] + 0.3
    assert last_tone_end + 0.5 <= finals[0].end <= last_tone_end + 0.5 + 0.1 + 0.03
    assert all(e.segment == 1 for e in events[events.index(finals[0]) + 1:])
    # rule 5 (maximum length): a final every 2 s, even in the middle of tones
    events = _feed(rec.stream(endpoint={"rule5": {"min_utterance_length": 2.0}}),
                   recording(WORDS * 2, seed=8)[0], 16000, seed=9, most=0.1)
    finals = _finals(events)
    assert len(finals) >= 3
    for a, b in zip(finals, finals[1:]):
        assert b.start == pytest.approx(a.end) and 2.0 <= a.end - a.start <= 2.0 + 0.1 + 0.03


def test_silence_only_stream_ends_with_one_empty_final(rec):
    events = _feed(rec.stream(), np.zeros(16000 * 7, np.float32), 16000, seed=10)
    assert [(e.kind, e.text, e.segment) for e in events] == [("final", "", 0)]
    assert rec.stream().finish()[0].as_dict() == {"kind": "final", "segment": 0, "start": 0.0,
                                                  "end": 0.0, "text": "", "words": []}


def test_hotwords_make_a_quiet_tone_a_word(folder, tmp_path):
    wave, starts = recording(["one", "two", "three"], seed=11)
    # "two" replaced by a quiet blip (Gaussian envelope, 30 ms): its best frame's logit is
    # -0.4 against the blank's 0, so with the word loop's 1.1 per word it is not recognised;
    # a boost of 2 makes it one word (a second occurrence, frames away, would cost more)
    i0, n = int(starts[1] * 16000), int(0.3 * 16000)
    t = (np.arange(n) - n / 2) / 16000
    wave[i0:i0 + n] = 0.00468 * np.sin(2 * np.pi * 1000 * np.arange(n) / 16000) * np.exp(
        -(t / 0.03) ** 2)
    plain = Recognizer.from_dir(folder)
    assert plain.transcribe(wave, 16000).text == "one three"
    path = tmp_path / "hot.txt"
    path.write_text("two :2\n")
    biased = Recognizer.from_dir(folder, hotwords=str(path))
    assert biased.transcribe(wave, 16000).text == "one two three"
    (final,) = _finals(_feed(plain.stream(hotwords=["two :2"], endpoint=False), wave, 16000,
                             seed=12))
    assert final.text == "one two three"
    (final,) = _finals(_feed(plain.stream(endpoint=False), wave, 16000, seed=12))
    assert final.text == "one three"
    # worker processes get the hotwords too
    assert biased.settings()["hotwords"] == ["two :2.0"]
    with pytest.raises(RecognizerError, match=r"hot.txt:1: 'four' is not a word"):
        path.write_text("four\n")
        Recognizer.from_dir(folder, hotwords=str(path))


def test_stream_options_and_input_are_checked(rec):
    with pytest.raises(RecognizerError, match="beamm: unknown stream option"):
        rec.stream(beamm=3)
    with pytest.raises(RecognizerError, match="partial_interval must be"):
        rec.stream(partial_interval=-1)
    with pytest.raises(RecognizerError, match="endpoint.rule2.x: unknown field"):
        rec.stream(endpoint={"rule2": {"x": 1}})
    s = rec.stream()
    with pytest.raises(RecognizerError, match="positive whole number"):
        s.accept(np.zeros(10, np.float32), 0)
    s.accept(np.zeros(10, np.float32), 8000)
    with pytest.raises(RecognizerError, match="sample_rate changed from 8000 to 16000"):
        s.accept(np.zeros(10, np.float32), 16000)
    with pytest.raises(RecognizerError, match="NaN or infinite"):
        s.accept(np.array([0.0, np.inf], np.float32), 8000)
    with pytest.raises(RecognizerError, match="int16 or float"):
        s.accept(np.zeros(4, np.int64), 8000)
    s.finish()
    with pytest.raises(RecognizerError, match="finish was called"):
        s.accept(np.zeros(4, np.float32), 8000)


# -- the model step --------------------------------------------------------------------------
NETS = [
    {"seed": 1, "stack_frames": 3, "subsample_frames": 3,
     "layers": [{"type": "lstm", "hidden": 16, "num_layers": 2, "proj": 8},
                {"type": "dense", "dim": 12, "activation": "gelu"}]},
    {"seed": 2, "layers": [{"type": "tdnn", "dim": 10, "context": 5, "dilation": 2,
                            "stride": 2, "activation": "relu"},
                           {"type": "lstm", "hidden": 8}, {"type": "tdnn", "dim": 7,
                                                           "context": 3}]},
    {"seed": 3, "stack_frames": 4, "subsample_frames": 2,
     "layers": [{"type": "dense", "dim": 9, "activation": "tanh"},
                {"type": "dropout", "rate": 0.2}, {"type": "lstm", "hidden": 8}]},
]


@pytest.mark.parametrize("net", NETS)
@pytest.mark.parametrize("T", [1, 2, 7, 101])
def test_unidirectional_model_streams_exactly(net, T):
    model = Model(net, 13, ["<b>", "x", "y", "z"])
    x = np.random.default_rng(T).standard_normal((T, 13)).astype(np.float32)
    whole, _ = model(x)
    ms = model_stream(model)
    assert isinstance(ms, CarriedStateStream)
    rng = np.random.default_rng(T + 1)
    parts, i = [], 0
    while i < T:
        n = int(rng.integers(0, 9))
        parts.append(ms.accept(x[i:i + n]))
        # an output frame waits for at most ``delay`` input frames past its own
        done = sum(map(len, parts))
        assert done >= (min(i + n, T) - ms.delay) // ms.subsampling - 1
        i += n
    parts.append(ms.finish())
    got = np.concatenate(parts)
    assert got.shape == whole.shape
    np.testing.assert_allclose(got, whole, rtol=1e-5, atol=1e-5)


def test_blstm_streams_over_windows():
    net = {"seed": 4, "stack_frames": 2, "subsample_frames": 2,
           "layers": [{"type": "blstm", "hidden": 8}]}
    model = Model(net, 13, ["<b>", "x", "y"])
    x = np.random.default_rng(0).standard_normal((300, 13)).astype(np.float32)
    whole, _ = model(x)
    wide = model_stream(model, left=1000, right=1000)
    assert isinstance(wide, WindowedStream)
    got = np.concatenate([wide.accept(c) for c in np.array_split(x, 17)] + [wide.finish()])
    np.testing.assert_allclose(got, whole, rtol=1e-5, atol=1e-5)  # the windows see it all
    narrow = model_stream(model, left=20, right=10)
    got = np.concatenate([narrow.accept(c) for c in np.array_split(x, 17)] + [narrow.finish()])
    assert got.shape == whole.shape and narrow.delay == 20
    # an approximation: close in probability where the contexts are long enough
    assert np.abs(np.exp(got) - np.exp(whole)).mean() < 0.05


# -- the command -----------------------------------------------------------------------------
def _asrkit(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "asrkit", *args], input=stdin,
                          capture_output=True, timeout=300)


def test_transcribe_stream_from_stdin_and_files(folder, rec, tmp_path):
    wave, _ = recording(WORDS, seed=13)
    pcm = np.round(wave * 32767).astype("<i2").tobytes()
    r = _asrkit("transcribe", "--model-dir", folder, "--stream", "--json", "--no-endpoint", "-",
                stdin=pcm)
    assert r.returncode == 0, r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    assert events[-1]["kind"] == "final" and events[-1]["text"] == " ".join(WORDS)
    ref = _finals(_feed(rec.stream(endpoint=False), np.frombuffer(pcm, np.int16), 16000, 0))[0]
    assert events[-1] == {"path": "-", **ref.as_dict()}
    assert all(e["kind"] == "partial" for e in events[:-1]) and len(events) >= 5
    # a file at 8 kHz, fed at real time in 0.5 s chunks; a missing file fails alone
    path = write_wav(tmp_path / "w8k.wav", resample(wave, 16000, 8000), 8000)
    r = _asrkit("transcribe", "--model-dir", folder, "--stream", "--realtime", "--chunk", "0.5",
                path, str(tmp_path / "missing.wav"))
    assert r.returncode == 1
    lines = r.stdout.decode().splitlines()
    assert lines[-1].startswith(f"{path}\tfinal\t0\t0.00-") and lines[-1].endswith(
        " ".join(WORDS))
    assert b"missing.wav: cannot read the audio" in r.stderr
    # bad options: one line, exit 2
    for bad, message in ((["--endpoint", "rule2=1"], b"expected RULE.FIELD=VALUE"),
                         (["--endpoint", "rule2.min_trailing_silence=-1"],
                          b"min_trailing_silence must be"),
                         (["--chunk", "0"], b"--chunk must be")):
        r = _asrkit("transcribe", "--model-dir", folder, "--stream", *bad, path)
        assert r.returncode == 2 and message in r.stderr and b"Traceback" not in r.stderr
    r = _asrkit("transcribe", "--model-dir", folder, "--stream", "-", stdin=b"\x00\x01\x02")
    assert r.returncode == 1 and b"odd number of bytes" in r.stderr
