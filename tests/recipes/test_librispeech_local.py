"""LibriSpeech recipe's download (resume, checksum) and data preparation on a synthesised corpus."""

import hashlib
import http.server
import importlib.util
import io
import os
import tarfile
import threading

import numpy as np
import pytest
import soundfile as sf

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "recipes", "librispeech", "local")


def _load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def make_librispeech(root, subset="dev-clean", speakers=(("84", "121123"), ("174", "50561")),
                     utts=3):
    """A tiny corpus in the LibriSpeech layout, with SPEAKERS.TXT."""
    rng = np.random.default_rng(0)
    texts = {}
    for spk, chapter in speakers:
        folder = os.path.join(root, subset, spk, chapter)
        os.makedirs(folder)
        lines = []
        for i in range(utts):
            utt = f"{spk}-{chapter}-{i:04d}"
            sf.write(os.path.join(folder, f"{utt}.flac"),
                     (rng.normal(size=8000 + 800 * i) * 3000).astype(np.int16), 16000)
            texts[utt] = f"WORD{i} HELLO WORLD"
            lines.append(f"{utt} {texts[utt]}\n")
        with open(os.path.join(folder, f"{spk}-{chapter}.trans.txt"), "w") as f:
            f.writelines(lines)
    with open(os.path.join(root, "SPEAKERS.TXT"), "w") as f:
        f.write(";ID  |SEX| SUBSET   |MINUTES| NAME\n84   | F | dev-clean | 8.02 | Christie\n"
                "174  | M | dev-clean | 8.04 | Peter\n")
    return texts


def test_prepare_data_writes_a_valid_kaldi_data_dir(tmp_path):
    texts = make_librispeech(str(tmp_path / "LibriSpeech"))
    # a transcript line whose audio is missing is reported and left out
    trans = tmp_path / "LibriSpeech/dev-clean/84/121123/84-121123.trans.txt"
    trans.write_text(trans.read_text() + "84-121123-0099 LOST LINE\n")
    prep = _load("prepare_data")
    n, problems = prep.prepare(str(tmp_path / "LibriSpeech"), "dev-clean", str(tmp_path / "data"))
    assert (n, problems) == (6, 1)
    data = tmp_path / "data"
    text = dict(line.split(" ", 1) for line in data.joinpath("text").read_text().splitlines())
    assert text == texts
    assert data.joinpath("spk2gender").read_text() == "174-50561 m\n84-121123 f\n"
    spk2utt = data.joinpath("spk2utt").read_text().splitlines()
    assert spk2utt[0].split()[0] == "174-50561" and len(spk2utt[0].split()) == 4
    for line in data.joinpath("wav.scp").read_text().splitlines():
        utt, path = line.split(" ", 1)
        assert sf.info(path).samplerate == 16000
    durs = dict(line.split() for line in data.joinpath("utt2dur").read_text().splitlines())
    assert float(durs["84-121123-0001"]) == pytest.approx(0.55)


class _RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Serves files with HTTP Range support; drops the first full request midway."""

    dropped = set()

    def log_message(self, *args):
        pass

    def do_GET(self):
        path = self.translate_path(self.path)
        if not os.path.exists(path):
            self.send_error(404)
            return
        data = open(path, "rb").read()
        rng = self.headers.get("Range")
        start = int(rng.split("=")[1].split("-")[0]) if rng else 0
        self.send_response(206 if rng else 200)
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        if not rng and path not in self.dropped:
            self.dropped.add(path)
            self.wfile.write(data[: len(data) // 2])  # the connection dies half-way
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(data[start:])


def test_download_resumes_verifies_and_unpacks(tmp_path, monkeypatch):
    served = tmp_path / "served" / "12"
    served.mkdir(parents=True)
    make_librispeech(str(tmp_path / "src" / "LibriSpeech"))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(tmp_path / "src" / "LibriSpeech", arcname="LibriSpeech")
    (served / "dev-clean.tar.gz").write_bytes(buf.getvalue())
    handler = lambda *a, **k: _RangeHandler(*a, directory=str(tmp_path / "served"), **k)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        dl = _load("download")
        monkeypatch.setattr(dl, "MIRRORS", [f"http://127.0.0.1:{server.server_port}"])
        monkeypatch.setattr(dl, "MD5", {"dev-clean": hashlib.md5(buf.getvalue()).hexdigest()})
        monkeypatch.setattr(dl.time, "sleep", lambda s: None)
        dest = tmp_path / "download"
        assert dl.main([str(dest), "--parts", "dev-clean"]) == 0
        assert (dest / "LibriSpeech/dev-clean/84/121123/84-121123-0000.flac").exists()
        assert not (dest / "dev-clean.tar.gz.part").exists()
        # a wrong checksum is caught and the archive removed
        monkeypatch.setattr(dl, "MD5", {"dev-clean": "0" * 32})
        with pytest.raises(RuntimeError, match="does not match"):
            dl.download_archive(str(tmp_path / "again"), 12, "dev-clean.tar.gz", "0" * 32)
        assert not (tmp_path / "again" / "dev-clean.tar.gz").exists()
    finally:
        server.shutdown()
