"""Test-time VTLN warps (``vtln_warps``): a model folder's log-probabilities averaged over the
features under each warp factor, in ``transcribe``, ``align`` and ``stream`` alike; the option
checked wherever it comes from (``asrkit package``, the manifest, ``asrkit transcribe``)."""

import json
import subprocess
import sys
import types

import numpy as np
import pytest

from asrkit import Recognizer
from asrkit.features import compute
from asrkit.recognizer import RecognizerError, package_model_folder
from asrkit.recognizer.model_folder import ModelFolderError, check_warps, load_model_folder
from asrkit.recognizer.options import vtln_warps_option
from tests.recognizer.tones import make_tone_folder, recording, set_manifest, write_wav

WORDS = ["one", "two", "three", "two", "one"]
WARPS = [0.9, 1.0, 1.12]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_tone_folder(str(tmp_path_factory.mktemp("tones")))


def _by_hand(folder, wave, warps):
    """The frame-by-frame mean of the folder's model over Kaldi fbank features (no dither)
    computed under each warp: what the Recognizer must search."""
    f = load_model_folder(folder)
    logps = []
    for w in warps:
        opts = dict(f.feature_config.options, dither=0.0, vtln_warp=w)
        feats = compute(f.feature_config.kind, wave * 32768.0, **opts)
        logps.append(f.model(feats)[0].astype(np.float64))
    return (sum(logps) / len(logps)).astype(np.float32)


def test_log_probs_are_the_mean_over_the_warps(folder):
    wave, _ = recording(WORDS, seed=5)
    rec = Recognizer.from_dir(folder, vtln_warps=WARPS)
    assert rec.vtln_warps == tuple(WARPS)
    x = rec.load_audio(wave, 16000)
    views = [rec.normalize(rec.features(x, w)) for w in WARPS]
    ours = rec.mean_log_probs(views)
    ref = _by_hand(folder, wave, WARPS)
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)
    # the warps do change the features the model sees (the tones move between mel bins)
    assert not np.allclose(views[0], views[1], atol=1e-2)
    res = rec.transcribe(wave, 16000)
    assert res.text == " ".join(WORDS)
    assert res.text == rec.decode(ref).text


def test_one_unwarped_factor_is_one_pass(folder):
    wave, _ = recording(WORDS, seed=6)
    plain = Recognizer.from_dir(folder)
    one = Recognizer.from_dir(folder, vtln_warps="1")
    assert plain.vtln_warps is None and one.vtln_warps == (1.0,)
    a, b = plain.transcribe(wave, 16000), one.transcribe(wave, 16000)
    assert a.as_dict() == b.as_dict()


def test_package_keeps_the_warps_and_workers_use_them(tmp_path, folder):
    root = tmp_path / "pkg"
    make_tone_folder(str(root))
    out = root / "warped"
    manifest = package_model_folder(str(out), str(root / "final.mdl"), str(root / "fbank.toml"),
                                    str(root / "graph"), vtln_warps="0.9,1,1.12")
    assert manifest["vtln_warps"] == WARPS
    assert json.loads((out / "manifest.json").read_text())["vtln_warps"] == WARPS
    rec = Recognizer.from_dir(out)
    assert rec.vtln_warps == tuple(WARPS) and rec.settings()["vtln_warps"] == WARPS
    waves = [recording(WORDS[:k], seed=k)[0] for k in (2, 3, 4)]
    serial = [r.as_dict() for r in rec.transcribe_many([(w, 16000) for w in waves], nj=1)]
    parallel = [r.as_dict() for r in rec.transcribe_many([(w, 16000) for w in waves], nj=2)]
    assert serial == parallel
    for w, r in zip(waves, serial):
        assert r["text"] == rec.decode(_by_hand(out, w, WARPS)).text
    # the caller's warps replace the folder's; [1.0] turns them off
    assert Recognizer.from_dir(out, vtln_warps=[1.0]).vtln_warps == (1.0,)
    # alignment searches the same averaged log-probabilities
    al = rec.align(waves[1], WORDS[:3], 16000)
    assert [w.word for w in al.words] == WORDS[:3]


def test_stream_averages_as_the_whole_recording(folder):
    rec = Recognizer.from_dir(folder, vtln_warps=WARPS)
    wave, _ = recording(WORDS, seed=7)
    offline = rec.transcribe(wave, 16000)
    stream = rec.stream(endpoint=False)
    assert len(stream.chains) == len(WARPS)
    rng = np.random.default_rng(0)
    events, i = [], 0
    while i < len(wave):
        n = int(rng.integers(0, 4000))
        events += stream.accept(wave[i:i + n], 16000)
        i += n
    events += stream.finish()
    (final,) = [e for e in events if e.kind == "final"]
    assert final.text == offline.text
    assert [w.as_dict() for w in final.words] == [w.as_dict() for w in offline.words]


@pytest.mark.parametrize("value,match", [
    ([], "1 to 16 warp factors"),
    ([1.0] * 17, "1 to 16 warp factors"),
    ([float("nan")], "number in"),
    ([0.0], "number in"),
    ([-1.0], "number in"),
    ([3.0], "number in"),
    ([True], "number in"),
    ("0.9,abc", "expected numbers"),
    ([0.9, 0.9], "repeats"),
    ({"a": 1}, "1 to 16 warp factors"),
])
def test_bad_warps_are_refused(folder, value, match):
    with pytest.raises(RecognizerError, match=f"vtln_warps: .*{match}"):
        vtln_warps_option(value)
    with pytest.raises(RecognizerError, match="vtln_warps"):
        Recognizer.from_dir(folder, vtln_warps=value)


def test_bad_manifest_warps_name_the_file(tmp_path):
    out = make_tone_folder(str(tmp_path / "t"))
    set_manifest(out, vtln_warps=[0.9, "x"])
    with pytest.raises(ModelFolderError, match=r"manifest\.json: vtln_warps: each warp"):
        Recognizer.from_dir(out)


def test_warps_need_mel_banks_and_a_ctc_model():
    model = types.SimpleNamespace()
    with pytest.raises(ModelFolderError, match="spectrogram features have no mel banks"):
        check_warps((0.9, 1.0), model, types.SimpleNamespace(kind="spectrogram"), "")
    with pytest.raises(ModelFolderError, match="transducer model"):
        check_warps((0.9, 1.0), types.SimpleNamespace(transducer=1),
                    types.SimpleNamespace(kind="fbank"), "")
    check_warps((1.0,), types.SimpleNamespace(transducer=1),
                types.SimpleNamespace(kind="spectrogram"), "")  # one unwarped pass: anything


def test_cli_package_and_transcribe(tmp_path):
    root = tmp_path / "cli"
    make_tone_folder(str(root))
    wav = write_wav(tmp_path / "a.wav", recording(WORDS, seed=8)[0])
    out = root / "warped"
    base = [sys.executable, "-m", "asrkit"]
    r = subprocess.run(base + ["package", "--model", str(root / "final.mdl"), "--features",
                               str(root / "fbank.toml"), "--graph", str(root / "graph"),
                               "--vtln-warps", "0.9,1,1.12", "--out", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "manifest.json").read_text())["vtln_warps"] == WARPS
    r = subprocess.run(base + ["transcribe", "--model-dir", str(out), wav], capture_output=True,
                       text=True)
    assert r.returncode == 0 and r.stdout == f"{wav}\t{' '.join(WORDS)}\n", r.stderr
    for bad in ("nan", "0.9,0.9", "1,x"):
        r = subprocess.run(base + ["transcribe", "--model-dir", str(out), "--vtln-warps", bad,
                                   wav], capture_output=True, text=True)
        assert r.returncode == 2 and "vtln_warps" in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
        r = subprocess.run(base + ["package", "--model", str(root / "final.mdl"), "--features",
                                   str(root / "fbank.toml"), "--vtln-warps", bad, "--out",
                                   str(tmp_path / "bad")], capture_output=True, text=True)
        assert r.returncode == 2 and "vtln_warps" in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
