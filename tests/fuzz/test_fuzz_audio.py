"""Audio on bad input, through ``asrkit compute-features`` in a child process.

Every utterance of a data dir is a case: seeded mutations of a WAV file (header bytes, any
bytes, truncation) and hand-made damage (a wav whose header promises more samples than the file
holds, a pipe that never ends, a failing pipe, a directory, a bad wav.ark offset). The run must
end cleanly, each damaged utterance reported by name and counted, and a wav whose header
promises more than the file holds never decoded from its first part.
"""

from __future__ import annotations

import io
import json
import struct

import numpy as np
import pytest
import soundfile as sf

from tests.fuzz.harness import assert_clean_outcome, flip_bytes, run_cli, truncate
from tests.io.synth import tone, write_kaldi_files

CONFIG = '[features]\ntype = "fbank"\nnum_mel_bins = 23\ndither = 0.0\n'
PIPE_ENV = {"ASRKIT_PIPE_TIMEOUT": "2"}
# generous: feature kernels recompile after a change, slowly on a loaded machine; a pipe that
# never ends is cut by the 2 s pipe timeout long before this
TIMEOUT_S = 180


def _wav_bytes(num_samples: int = 4000) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, tone(num_samples, np.random.default_rng(0)), 16000, format="WAV",
             subtype="PCM_16")
    return buf.getvalue()


def _wav_mutants(seed: int, count: int) -> list[bytes]:
    """Header flips (the first 44 bytes), flips anywhere, and truncations."""
    rng = np.random.default_rng(seed)
    wav = _wav_bytes()
    out = []
    for _ in range(count):
        r = rng.random()
        if r < 0.5:
            out.append(flip_bytes(wav[:44], rng, n=int(rng.integers(1, 3))) + wav[44:])
        elif r < 0.75:
            out.append(flip_bytes(wav, rng, n=int(rng.integers(1, 4))))
        else:
            out.append(truncate(wav, rng))
    return out


def promises_more_than_it_holds(data: bytes) -> bool:
    """True for a RIFF/WAVE file whose data chunk declares more bytes than follow it (sizes 0 and
    0xFFFFFFFF mean 'streamed, read to the end', as Kaldi reads them)."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return False
    pos = 12
    while pos + 8 <= len(data):
        chunk, size = data[pos:pos + 4], struct.unpack_from("<I", data, pos + 4)[0]
        if chunk == b"data":
            return size not in (0, 0xFFFFFFFF) and size > len(data) - pos - 8
        pos += 8 + size + (size & 1)
    return False


def _run(tmp_path, wav_scp: dict[str, str], env=None, timeout=TIMEOUT_S):
    data = tmp_path / "data"
    write_kaldi_files(str(data), {"wav.scp": wav_scp, "utt2spk": {u: "s" for u in wav_scp}})
    conf = tmp_path / "fbank.toml"
    conf.write_text(CONFIG)
    res = run_cli(["compute-features", str(data), "--config", str(conf), "--out",
                   str(tmp_path / "out"), "--max-fail-fraction", "1", "--json"],
                  env=env, timeout=timeout)
    return res


def _check_mutants(tmp_path, mutants: list[bytes]):
    wav_scp = {"good": str(tmp_path / "good.wav")}
    (tmp_path / "good.wav").write_bytes(_wav_bytes())
    for i, m in enumerate(mutants):
        path = tmp_path / f"m{i:03d}.wav"
        path.write_bytes(m)
        wav_scp[f"m{i:03d}"] = str(path)
    res = _run(tmp_path, wav_scp)
    assert_clean_outcome(res)
    assert res.returncode == 0, res.describe()
    s = json.loads(res.stdout)
    failed = {f["utt"] for f in s["failures"]}
    done = set((tmp_path / "out" / "utt2num_frames").read_text().split()[::2])
    assert failed | done == set(wav_scp) and not failed & done, res.describe()
    for utt in failed:
        assert utt in res.stderr or any(f["utt"] == utt for f in s["failures"])
    for i, m in enumerate(mutants):
        if promises_more_than_it_holds(m):
            assert f"m{i:03d}" in failed, f"m{i:03d}: truncated wav decoded\n{res.describe()}"


def test_mutated_wavs(tmp_path):
    _check_mutants(tmp_path, _wav_mutants(0, 16))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1, 6))
def test_mutated_wavs_long(tmp_path, seed):
    _check_mutants(tmp_path, _wav_mutants(seed, 40))


def test_each_kind_of_damage_is_a_named_failure(tmp_path):
    wav = _wav_bytes()
    (tmp_path / "good.wav").write_bytes(wav)
    pos = wav.index(b"data") + 8
    (tmp_path / "short.wav").write_bytes(wav[:pos + 1000])      # header: 8000 bytes of data
    (tmp_path / "header_only.wav").write_bytes(wav[:pos])
    (tmp_path / "a_dir.wav").mkdir()
    ark = tmp_path / "wav.ark"
    ark.write_bytes(b"k1 " + wav)
    cases = {
        "good": str(tmp_path / "good.wav"),
        "short": str(tmp_path / "short.wav"),
        "header-only": str(tmp_path / "header_only.wav"),
        "dir": str(tmp_path / "a_dir.wav"),
        "sleeping-pipe": "sleep 30 |",
        "dripping-pipe": "while true; do echo x; sleep 0.2; done |",
        "failing-pipe": "echo oops >&2; exit 3 |",
        "bad-offset": f"{ark}:7",
        "offset-past-end": f"{ark}:99999",
        "missing": str(tmp_path / "nope.wav"),
    }
    res = _run(tmp_path, cases, env=PIPE_ENV)
    assert_clean_outcome(res)
    assert res.returncode == 0, res.describe()
    s = json.loads(res.stdout)
    errors = {f["utt"]: f["error"] for f in s["failures"]}
    assert set(errors) == set(cases) - {"good"}, res.describe()
    assert "short.wav" in errors["short"] and "8000" in errors["short"], errors["short"]
    assert "timed out" in errors["sleeping-pipe"] and "timed out" in errors["dripping-pipe"]
    assert "status 3" in errors["failing-pipe"] and "oops" in errors["failing-pipe"]
    assert "a_dir.wav" in errors["dir"] and "nope.wav" in errors["missing"]
