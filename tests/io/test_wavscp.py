"""wav.scp entries: paths, ``cmd |`` pipes and wav archive offsets."""

import io
import struct
import sys

import numpy as np
import pytest
import soundfile as sf

from asrkit.io import AudioError, load_rxfilename
from asrkit.io.wavscp import _fix_streamed_wav_sizes, read_wav_ark_entry
from tests.io.synth import tone


def _wav_bytes(x, rate=16000):
    buf = io.BytesIO()
    sf.write(buf, x, rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def test_path_and_pipe_give_the_same_samples(tmp_path, rng):
    x = tone(2000, rng)
    path = tmp_path / "a.wav"
    path.write_bytes(_wav_bytes(x))
    a, rate = load_rxfilename(str(path), scale="int16")
    b, rate_b = load_rxfilename(f"cat {path} |", scale="int16")
    c, _ = load_rxfilename(f"  cat {path}   |  ", scale="int16")
    np.testing.assert_array_equal(a, x)
    np.testing.assert_array_equal(b, x)
    np.testing.assert_array_equal(c, x)
    assert rate == rate_b == 16000


def test_pipe_with_streaming_wav_header(tmp_path, rng):
    """sox/ffmpeg writing to a pipe leave the RIFF sizes unset; Kaldi reads to the end."""
    x = tone(1500, rng)
    data = bytearray(_wav_bytes(x))
    pos = data.index(b"data")
    struct.pack_into("<I", data, pos + 4, 0xFFFFFFFF)
    struct.pack_into("<I", data, 4, 0xFFFFFFFF)
    path = tmp_path / "stream.wav"
    path.write_bytes(bytes(data))
    assert _fix_streamed_wav_sizes(bytes(data)) != bytes(data)
    y, _ = load_rxfilename(f"cat {path} |", scale="int16")
    np.testing.assert_array_equal(y, x)


def test_failing_pipe_reports_command_and_status(tmp_path):
    with pytest.raises(AudioError, match=r"exited with status 3"):
        load_rxfilename(f"{sys.executable} -c 'import sys; sys.exit(3)' |")
    with pytest.raises(AudioError, match=r"empty audio \(0 bytes\)"):
        load_rxfilename("true |")


def test_wav_ark_offsets(tmp_path, rng):
    """An archive as Kaldi's wav-copy writes it: 'key ' then the RIFF file, back to back."""
    xs = {"u1": tone(700, rng), "u2": tone(900, rng, freq=1000)}
    ark = tmp_path / "wav.ark"
    offsets = {}
    with open(ark, "wb") as f:
        for key, x in xs.items():
            f.write(key.encode() + b" ")
            offsets[key] = f.tell()
            f.write(_wav_bytes(x))
    for key, x in xs.items():
        y, rate = load_rxfilename(f"{ark}:{offsets[key]}", scale="int16")
        np.testing.assert_array_equal(y, x)
        assert rate == 16000
    with pytest.raises(AudioError, match="no RIFF header"):
        read_wav_ark_entry(str(ark), 1)


def test_missing_path_is_named(tmp_path):
    with pytest.raises(AudioError, match=r"nope\.wav: no such file"):
        load_rxfilename(str(tmp_path / "nope.wav"))
