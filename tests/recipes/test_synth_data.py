"""The recipes' shared synthesis (recipes/utils/synth) and the digits data stage: FSDD download
(resumed, verified, extracted atomically; only four speakers), connected strings from takes,
cached rendering, and the data stage's leave-one-speaker-out data directories."""

import collections
import hashlib
import http.server
import io
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import zipfile

import numpy as np
import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "recipes", "utils"))
from synth import augment, corpus, fsdd  # noqa: E402

SHARED_FSDD = os.path.join(REPO, "..", "shared", "corpora", "fsdd-4spk")
BIN = os.path.dirname(sys.executable)


# ----------------------------------------------------------------------------- download

class RangeHandler(http.server.BaseHTTPRequestHandler):
    """Serves one blob at /archive.zip; honours Range unless told not to; logs requests."""

    blob = b""
    honour_range = True
    seen: list = []

    def do_GET(self):  # noqa: N802 - http.server's name
        rng = self.headers.get("Range")
        type(self).seen.append(rng)
        if self.path != "/archive.zip":
            self.send_error(404)
            return
        body, status = self.blob, 200
        if rng and self.honour_range:
            start = int(rng.split("=")[1].split("-")[0])
            if start >= len(self.blob):
                self.send_error(416)
                return
            body, status = self.blob[start:], 206
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    handler = type("Handler", (RangeHandler,), {"seen": []})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield handler, f"http://127.0.0.1:{httpd.server_address[1]}/archive.zip"
    httpd.shutdown()
    httpd.server_close()


def fake_archive(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(f"free-spoken-digit-dataset-{fsdd.COMMIT}/README.md", "FSDD")
        for rel, data in files.items():
            z.writestr(f"free-spoken-digit-dataset-{fsdd.COMMIT}/{rel}", data)
    return buf.getvalue()


def test_download_resumes_verifies_and_keeps_four_speakers(tmp_path, server):
    handler, url = server
    ours = {f"recordings/{d}_{s}_0.wav": os.urandom(5000) for d in (1, 2)
            for s in ("jackson", "lucas")}
    handler.blob = fake_archive({**ours, "recordings/1_theo_0.wav": b"theo", "recordings/"
                                 "1_george_0.wav": b"george"})
    manifest = {rel: hashlib.sha256(data).hexdigest() for rel, data in ours.items()}
    target = tmp_path / "corpora" / fsdd.FOLDER
    archive = tmp_path / "corpora" / f"fsdd-{fsdd.COMMIT[:12]}.zip"
    archive.parent.mkdir()
    # an interrupted download left the first bytes: the rest is asked for with Range
    (archive.parent / (archive.name + ".part")).write_bytes(handler.blob[:1000])
    logs = []
    fsdd.fetch(str(target), url=url, manifest=manifest, log=logs.append)
    assert handler.seen == ["bytes=1000-"]
    for rel, data in ours.items():
        assert (target / rel).read_bytes() == data
    assert sorted(os.listdir(target / "recordings")) == sorted(os.path.basename(r) for r in ours)
    assert not archive.exists() and not list(archive.parent.glob(".*"))
    assert fsdd.verify(str(target), manifest) == []
    assert any("verified" in line for line in logs)


def test_server_without_ranges_restarts_and_bad_bytes_are_refused(tmp_path, server):
    handler, url = server
    handler.honour_range = False
    ours = {"recordings/3_nicolas_7.wav": b"x" * 3000}
    handler.blob = fake_archive(ours)
    dest = tmp_path / "a.zip"
    (tmp_path / "a.zip.part").write_bytes(b"garbage that is not the start of the archive")
    fsdd.download_file(url, str(dest), log=lambda m: None)
    assert handler.seen == ["bytes=44-"] and dest.read_bytes() == handler.blob
    # a file whose hash is not the manifest's: nothing is put in place
    target = tmp_path / "fsdd-4spk"
    with pytest.raises(fsdd.FsddError, match="3_nicolas_7.wav: sha256 differs"):
        fsdd.extract(str(dest), str(target), {"recordings/3_nicolas_7.wav": "0" * 64})
    assert not target.exists() and os.listdir(tmp_path) == ["a.zip"]
    with pytest.raises(fsdd.FsddError, match="lacks 1 of the 2 files"):
        fsdd.extract(str(dest), str(target), {"recordings/3_nicolas_7.wav":
                                              hashlib.sha256(b"x" * 3000).hexdigest(),
                                              "recordings/0_lucas_0.wav": "0" * 64})
    with pytest.raises(fsdd.FsddError, match="HTTP 404"):
        fsdd.download_file(url.replace("archive", "missing"), str(tmp_path / "b.zip"))


def test_manifest_and_speakers():
    manifest = fsdd.read_manifest()
    assert len(manifest) == 2000
    speakers = {rel.split("_")[1] for rel in manifest}
    assert speakers == set(fsdd.SPEAKERS) == {"jackson", "nicolas", "yweweler", "lucas"}
    with pytest.raises(fsdd.FsddError, match="theo"):
        fsdd.takes(SHARED_FSDD, ["jackson", "theo"])
    assert len(fsdd.COMMIT) == 40 and fsdd.COMMIT in fsdd.ARCHIVE_URL


@pytest.mark.skipif(not os.path.isdir(SHARED_FSDD), reason="no shared FSDD copy")
def test_locate_prefers_explicit_then_environment(tmp_path, monkeypatch):
    with pytest.raises(fsdd.FsddError, match="not a complete FSDD copy"):
        fsdd.locate(str(tmp_path))
    monkeypatch.setenv("ASRKIT_CORPORA", os.path.dirname(SHARED_FSDD))
    root, where = fsdd.locate(download=False)
    assert os.path.samefile(root, SHARED_FSDD) and where.startswith("$ASRKIT_CORPORA")
    monkeypatch.delenv("ASRKIT_CORPORA")
    root, where = fsdd.locate(download=False)
    assert os.path.samefile(root, SHARED_FSDD) and "shared corpora" in where
    takes = fsdd.takes(root)
    assert len(takes) == 2000 and {t.digit for t in takes} == set(range(10))


# ----------------------------------------------------------------------------- strings

def test_fsdd_string_joins_takes_over_a_noise_floor():
    rng = np.random.default_rng(0)
    sr = corpus.SAMPLE_RATE
    # takes as FSDD cuts them: 30 ms of room noise (RMS 20) either side of the speech
    speech = np.zeros(4000, np.float32)
    speech[480:-480] = 3000 * np.sin(np.arange(3040) * 0.2)
    takes = [speech + rng.normal(0, 20, 4000).astype(np.float32) for _ in range(4)]
    x = corpus.fsdd_string(takes, np.random.default_rng(5))
    np.testing.assert_array_equal(x, corpus.fsdd_string(takes, np.random.default_rng(5)))
    # 0.1-0.6 s before and after, 0-1 s between: between 4 takes + 0.2 s and 4 takes + 4.2 s
    assert 16000 + 0.2 * sr <= len(x) <= 16000 + 4.2 * sr
    frames = np.sqrt(np.mean(x[:len(x) // 160 * 160].reshape(-1, 160).astype(np.float64) ** 2,
                             axis=1))
    loud = frames > 500
    assert np.sum(loud[1:] & ~loud[:-1]) + loud[0] == 4  # four takes, apart
    # the gaps carry noise at about the takes' own floor (their quietest frame, ~20 RMS)
    assert 5 < np.median(frames[~loud]) < 40 and np.percentile(frames[~loud], 90) < 60
    assert corpus.fsdd_string(takes[:1], rng) is takes[0]
    padded = corpus.fsdd_string(takes[:1], rng, pad=True)
    assert 4000 + 0.2 * sr <= len(padded) <= 4000 + 1.2 * sr


def test_trim_to_speech_cuts_where_an_isolated_word_corpus_would_quiet_consonants_included():
    sr = 8000
    noise = np.random.default_rng(0)
    x = noise.normal(0, 1, 12000).astype(np.float32)  # 0.25 s floor, 0.125 s /s/, 0.5 s vowel
    x[2000:3000] += noise.normal(0, 100, 1000).astype(np.float32)  # 26.5 dB under the vowel
    x[3000:7000] += (3000 * np.sin(np.arange(4000) * 0.4)).astype(np.float32)
    kept_s, lengths = 0, set()
    for seed in range(200):
        y = augment.trim_to_speech(x, sr, np.random.default_rng(seed), share=1.0)
        start = int(np.flatnonzero(x == y[0])[0])  # where y was cut from x
        np.testing.assert_array_equal(y, x[start:start + len(y)])
        # the floor always goes (up to 10 ms kept), the vowel always stays; the /s/ goes when
        # the level drawn (15-35 dB under the loudest frame) is above it: about 40% of the time
        assert 2000 - 80 <= start <= 3000 and 7000 <= start + len(y) <= 7040 + 80
        kept_s += start < 2500
        lengths.add(len(y))
    assert 0.3 * 200 < kept_s < 0.55 * 200 and len(lengths) > 20
    # each end is cut with probability share: never at 0, about half the time at 0.5
    assert all(augment.trim_to_speech(x, sr, np.random.default_rng(s), 0.0) is x
               for s in range(20))
    ends = [augment.trim_to_speech(x, sr, np.random.default_rng(s), 0.5) for s in range(400)]
    cut_start = np.mean([len(y) < len(x) and y[0] != x[0] for y in ends])
    cut_end = np.mean([y[-1] != x[-1] for y in ends])
    assert 0.4 < cut_start < 0.6 and 0.4 < cut_end < 0.6


# ----------------------------------------------------------------------------- data stage

def _table(path):
    with open(path, encoding="utf-8") as f:
        return dict((line.rstrip("\n").split(" ", 1) + [""])[:2] for line in f)


@pytest.mark.parametrize("args, message", [
    (["--fsdd-perturbation", "nan"], "--fsdd-perturbation: from 0 to 2 (got nan)"),
    (["--fsdd-perturbation", "-0.5"], "--fsdd-perturbation: from 0 to 2 (got -0.5)"),
    (["--fsdd-copies", "7", "--fsdd-virtual-speakers", "6"],
     "--fsdd-copies: at most --fsdd-virtual-speakers"),
    (["--fsdd-copies", "0"], "--fsdd-copies must be at least 1"),
    (["--fsdd-trim", "nan"], "--fsdd-trim: a share from 0 to 1 (got nan)"),
    (["--fsdd-trim", "1.5"], "--fsdd-trim: a share from 0 to 1 (got 1.5)"),
])
def test_digits_corpus_options_are_checked(tmp_path, args, message):
    script = os.path.join(REPO, "recipes", "digits", "local", "make_corpus.py")
    r = subprocess.run([sys.executable, script, str(tmp_path / "data"), *args],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].endswith(message), r.stderr
    assert not (tmp_path / "data").exists()


@pytest.mark.recipe
@pytest.mark.skipif(not os.path.isdir(SHARED_FSDD), reason="no shared FSDD copy")
def test_digits_data_stage_makes_leave_one_speaker_out_parts(tmp_path):
    pytest.importorskip("espeakng_loader")
    sf = pytest.importorskip("soundfile")
    root = tmp_path / "recipes"
    shutil.copytree(os.path.join(REPO, "recipes", "digits"), root / "digits",
                    ignore=shutil.ignore_patterns("data", "exp"))
    shutil.copytree(os.path.join(REPO, "recipes", "utils"), root / "utils")
    # a full-archive copy: the six speakers, theo and george among them
    full = tmp_path / "fsdd-full"
    (full / "recordings").mkdir(parents=True)
    for name in os.listdir(os.path.join(SHARED_FSDD, "recordings")):
        os.symlink(os.path.join(SHARED_FSDD, "recordings", name), full / "recordings" / name)
    for extra in ("theo", "george"):
        shutil.copyfile(os.path.join(SHARED_FSDD, "recordings", "3_lucas_0.wav"),
                        full / "recordings" / f"3_{extra}_0.wav")
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ["PATH"],
               ASRKIT_CACHE=str(tmp_path / "cache"))
    cmd = ["bash", str(root / "digits" / "run.sh"), "--stop-stage", "0", "--no-prepare",
           "--train-speakers", "4", "--dev-speakers", "1", "--test-speakers", "2",
           "--utts-per-speaker", "3", "--fsdd-takes", "2", "--fsdd", str(full)]
    t0 = time.time()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    first = time.time() - t0
    assert r.returncode == 0, r.stdout + r.stderr
    data = root / "digits" / "data"
    log = (root / "digits" / "exp" / "log" / "stage0.log").read_text()
    assert f"fsdd: reading --fsdd {full}" in log
    from asrkit.io import validate_data_dir

    speakers = ("jackson", "nicolas", "yweweler", "lucas")
    dirs = ["synth/train", "synth/dev", "synth/test", "synth/test_clean"] + \
        [f"fsdd/{s}/{p}" for s in speakers for p in ("train", "dev", "test")]
    for d in dirs:
        assert [p for p in validate_data_dir(str(data / d)) if p.severity == "error"] == [], d
    # per speaker: 2 takes x 10 digits; take 0 is dev, take 1 train, both in test
    for s in speakers:
        test = _table(data / f"fsdd/{s}/test/text")
        assert sum(u.startswith(f"fsdd-{s}-iso-") for u in test) == 20
        assert len(test) == 20 + 6  # + 3 x 2 joined strings
        # take 1 of each digit, rendered twice (--fsdd-copies, the recipe's default) by two
        # different virtual speakers
        train = _table(data / f"fsdd/{s}/train/utt2spk")
        iso = collections.defaultdict(set)
        for u, spk in train.items():
            if "-iso-" in u:
                iso[re.sub(r"-c\d$", "", u.split("-iso-")[1])].add(spk)
        assert len(iso) == 10 and all(len(v) == 2 for v in iso.values()), iso
        assert {u.rsplit("-", 1)[1] for u in _table(data / f"fsdd/{s}/dev/text")
                if "-iso-" in u} == {"00"}
    # no fold is combined here (the recipe's train and loso stages combine the parts they need);
    # every speaker's parts hold that speaker alone; theo and george are nowhere
    assert "test_speaker none" in (data / "fold.txt").read_text()
    assert not (data / "train").exists() and not (data / "test_real").exists()
    for s in speakers:
        for p in ("train", "dev", "test"):
            spk = set(_table(data / f"fsdd/{s}/{p}/utt2spk").values())  # perturbed: -vN
            assert spk and all(k == f"fsdd-{s}" or k.startswith(f"fsdd-{s}-v") for k in spk)
    everything = "".join(p.read_text() for p in data.rglob("wav.scp"))
    assert "theo" not in everything and "george" not in everything
    # FSDD says "zero"; the synthetic voices say "oh" too; transcripts are digit words
    digits = {"zero", "oh", "one", "two", "three", "four", "five", "six", "seven", "eight",
              "nine"}
    fsdd_words = {w for s in speakers for t in _table(data / f"fsdd/{s}/test/text").values()
                  for w in t.split()}
    assert "oh" not in fsdd_words and fsdd_words <= digits
    synth_words = [w for t in _table(data / "synth/train/text").values() for w in t.split()]
    assert set(synth_words) <= digits and 1 <= len(synth_words) / 12 <= 7
    # test voices are unheard: no talker in both
    def talkers(part):
        lines = (data / part / "speakers.txt").read_text().splitlines()
        return {dict(kv.split("=", 1) for kv in line.split()[1:])["talker"] for line in lines}
    assert not talkers("synth/train") & talkers("synth/test")
    # test_clean: the test utterances, as the voices said them (no channel)
    assert _table(data / "synth/test_clean/text") == _table(data / "synth/test/text")
    assert talkers("synth/test_clean") == talkers("synth/test")
    assert all(line.endswith(" channel=clean") for line in
               (data / "synth/test_clean/speakers.txt").read_text().splitlines())
    # 16 kHz 16-bit audio whose durations utt2dur states
    wavs = _table(data / "synth/train/wav.scp")
    durs = _table(data / "synth/train/utt2dur")
    for utt in list(wavs)[:20]:
        info = sf.info(wavs[utt])
        assert info.samplerate == 16000 and info.subtype == "PCM_16"
        assert abs(info.frames / 16000 - float(durs[utt])) < 2e-3
    assert "engine" in (data / "voices.txt").read_text()
    # a second run renders nothing: every part comes from the cache
    t0 = time.time()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    log = (root / "digits" / "exp" / "log" / "stage0.log").read_text()
    assert log.count("from the cache") == 4 + 3 * 4 and "made" not in log.split("voice inv")[0]
    assert time.time() - t0 < first
