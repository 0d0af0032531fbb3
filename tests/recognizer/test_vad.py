"""Silero VAD segmentation (asrkit.recognizer.vad) against silero-vad's own torch code, and the
Recognizer's vad="silero" option on a tone model."""

import dataclasses
import importlib.util

import numpy as np
import pytest

from asrkit.recognizer import Recognizer, RecognizerError
from asrkit.recognizer.vad import VadOptions, silero_cuts, speech_segments
from tests.recognizer.tones import RATE, make_tone_folder, recording

needs_silero = pytest.mark.skipif(importlib.util.find_spec("silero_vad") is None,
                                  reason="silero-vad is not installed (pip install silero-vad)")


def _speech(rate: int) -> tuple[np.ndarray, list[float]]:
    """Spoken digits (eSpeak NG) between pauses of 0.8 s at ``rate``, float in [-1, 1], and
    the time each phrase starts."""
    from asrkit.features import resample
    from recipes.utils.synth.espeak import ESpeak

    e = ESpeak()
    parts, starts, t = [], [], 0.0
    for text in ("one two three", "seven eight", "nine oh five four"):
        x = resample(e.synthesize(text).astype(np.float32) / 32768, e.sample_rate, rate)
        parts += [np.zeros(int(0.8 * rate), np.float32), x]
        starts.append(t + 0.8)
        t += 0.8 + len(x) / rate
    parts.append(np.zeros(int(0.5 * rate), np.float32))
    x = np.concatenate(parts)
    x += 1e-3 * np.random.default_rng(0).standard_normal(len(x)).astype(np.float32)
    return x, starts


def _silero_reference(x: np.ndarray, rate: int, **options):
    """(probabilities, segments) from silero-vad's torch code on its ONNX model."""
    torch = pytest.importorskip("torch")
    from silero_vad import get_speech_timestamps, load_silero_vad

    model = load_silero_vad(onnx=True)
    segs = get_speech_timestamps(torch.from_numpy(x), model, sampling_rate=rate, **options)
    model.reset_states()
    win = 512 if rate == 16000 else 256
    probs = []
    for i in range(0, len(x), win):
        chunk = torch.from_numpy(np.pad(x[i: i + win], (0, max(0, i + win - len(x)))))
        probs.append(model(chunk, rate).item())
    return np.array(probs, np.float32), [(s["start"], s["end"]) for s in segs]


@needs_silero
@pytest.mark.parametrize("rate", [16000, 8000])
def test_probabilities_and_segments_equal_silero(rate):
    from asrkit.recognizer.vad import SileroVad

    x, starts = _speech(rate)
    ref_probs, ref_segs = _silero_reference(x, rate)
    probs = SileroVad().probabilities(x, rate)
    np.testing.assert_allclose(probs, ref_probs, atol=1e-6)
    segs = speech_segments(probs, rate, len(x))
    assert segs == ref_segs
    assert len(segs) == 3  # the three phrases, each found where it was spoken
    for (a, _), t in zip(segs, starts):
        assert abs(a / rate - t) < 0.15


@needs_silero
@pytest.mark.parametrize("options", [
    {"max_speech_duration_s": 1.0},
    {"max_speech_duration_s": 1.5, "use_max_poss_sil_at_max_speech": False},
    {"threshold": 0.3, "min_silence_duration_ms": 400, "speech_pad_ms": 100},
    {"min_speech_duration_ms": 2000},
])
def test_segment_options_equal_silero(options):
    from asrkit.recognizer.vad import SileroVad

    x, _ = _speech(16000)
    ref_probs, ref_segs = _silero_reference(x, 16000, **options)
    probs = SileroVad().probabilities(x, 16000)
    assert speech_segments(probs, 16000, len(x), VadOptions(**options)) == ref_segs
    if "max_speech_duration_s" in options:
        assert max(b - a for a, b in ref_segs) <= options["max_speech_duration_s"] * 16000


def test_segments_of_made_up_probabilities_equal_silero():
    """The segment logic alone (no network): random on/off runs of probabilities."""
    pytest.importorskip("torch")
    if importlib.util.find_spec("silero_vad") is None:
        pytest.skip("silero-vad is not installed")
    from silero_vad.utils_vad import get_speech_timestamps_from_probs

    rng = np.random.default_rng(1)
    for trial in range(30):
        runs = rng.integers(1, 40, size=30)
        levels = rng.uniform(0, 1, size=30)
        probs = np.repeat(levels, runs).astype(np.float32).tolist()
        opts = VadOptions(max_speech_duration_s=float(rng.choice([np.inf, 0.8, 2.0])),
                          use_max_poss_sil_at_max_speech=bool(trial % 2))
        ref = get_speech_timestamps_from_probs(probs, sampling_rate=16000,
                                               **dataclasses.asdict(opts))
        assert speech_segments(probs, 16000, None, opts) == \
            [(s["start"], s["end"]) for s in ref], trial


@needs_silero
def test_recognizer_decodes_only_the_speech_regions(tmp_path):
    """A tone under speech is decoded with vad="silero"; a tone alone in a long pause is
    decoded only with the energy cut (the VAD calls a pure tone no speech)."""
    from asrkit.features import resample
    from recipes.utils.synth.espeak import ESpeak

    folder = make_tone_folder(str(tmp_path))
    x, starts = recording(["two", "three"], gap_s=2.0, lead_s=2.0)
    e = ESpeak()
    speech = resample(e.synthesize("seven eight nine").astype(np.float32) / 32768,
                      e.sample_rate, RATE)
    a = int((starts[0] - 0.3) * RATE)
    x[a: a + len(speech)] += 0.5 * speech
    segs = silero_cuts(x * 32768, RATE, 30.0)
    assert len(segs) == 1 and segs[0][0] / RATE < starts[0] < segs[0][1] / RATE < starts[1]
    energy = Recognizer.from_dir(folder).transcribe(x, RATE)
    silero = Recognizer.from_dir(folder, vad="silero").transcribe(x, RATE)
    near = lambda res, word, t: any(w.word == word and abs(w.start - t) < 0.1
                                    for w in res.words)
    assert near(energy, "two", starts[0]) and near(silero, "two", starts[0])
    assert near(energy, "three", starts[1]) and not near(silero, "three", starts[1])
    lo, hi = segs[0][0] / RATE, segs[0][1] / RATE
    assert all(lo - 0.05 <= w.start and w.start + w.duration <= hi + 0.05 for w in silero.words)


@needs_silero
def test_vad_at_other_rates_and_in_workers(tmp_path):
    """44.1 kHz input is resampled for the VAD; bounds come back in the caller's samples;
    transcribe_many's worker processes keep the vad setting."""
    folder = make_tone_folder(str(tmp_path))
    x, _ = _speech(16000)
    segs16 = silero_cuts(x * 32768, 16000, 30.0)
    from asrkit.features import resample

    x44 = resample(x, 16000, 44100)
    segs44 = silero_cuts(x44 * 32768, 44100, 30.0)
    assert len(segs44) == len(segs16)
    for (a, b), (c, d) in zip(segs16, segs44):
        assert abs(a / 16000 - c / 44100) < 0.07 and abs(b / 16000 - d / 44100) < 0.07
    rec = Recognizer.from_dir(folder, vad="silero")
    assert rec.settings()["vad"] == "silero"
    tones, _ = recording(["one", "two"])
    one = rec.transcribe(tones, RATE)
    many = rec.transcribe_many([(tones, RATE), (tones, RATE)], nj=2)
    assert [r.as_dict() for r in many] == [one.as_dict()] * 2


def test_bad_vad_names_are_refused(tmp_path, monkeypatch):
    folder = make_tone_folder(str(tmp_path))
    with pytest.raises(RecognizerError, match="vad: expected one of energy, silero, got 'webrtc'"):
        Recognizer.from_dir(folder, vad="webrtc")
    import asrkit.recognizer.vad as vad

    monkeypatch.setattr(vad.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(RecognizerError, match=r"needs the silero-vad package: pip install"):
        vad.silero_model_path()


def test_transcribe_cli_vad(tmp_path):
    import subprocess
    import sys

    from tests.recognizer.tones import write_wav

    folder = make_tone_folder(str(tmp_path))
    x, _ = recording(["one", "three"])
    wav = write_wav(tmp_path / "a.wav", x)
    cmd = [sys.executable, "-m", "asrkit", "transcribe", "--model-dir", folder, wav, "--vad"]
    bad = subprocess.run(cmd + ["nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid choice: 'nope'" in bad.stderr
    ok = subprocess.run(cmd + ["energy"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout == f"{wav}\tone three\n"
