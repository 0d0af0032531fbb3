"""asrkit.io.audio: loading and saving audio, checked against the stdlib wave module."""

import io
import os
import wave

import numpy as np
import pytest
import soundfile as sf

from asrkit.io import AudioError, audio_info, load_audio, save_audio
from tests.io.synth import tone


def _stdlib_wav(path):
    with wave.open(path, "rb") as w:
        raw = w.readframes(w.getnframes())
        return np.frombuffer(raw, dtype="<i2").reshape(-1, w.getnchannels()), w.getframerate()


def test_int16_wav_matches_stdlib_wave_exactly(tmp_path, rng):
    path = str(tmp_path / "a.wav")
    sf.write(path, tone(1234, rng), 16000, subtype="PCM_16")
    ref, ref_rate = _stdlib_wav(path)
    x, rate = load_audio(path, scale="int16")
    assert rate == ref_rate == 16000
    assert x.dtype == np.float32 and x.shape == (1234,)
    np.testing.assert_array_equal(x, ref[:, 0].astype(np.float32))
    y, _ = load_audio(path)  # float scale
    np.testing.assert_array_equal(y, ref[:, 0] / np.float32(32768))


@pytest.mark.parametrize("fmt,subtype,exact", [("flac", "PCM_16", True), ("wav", "FLOAT", True),
                                              ("ogg", "VORBIS", False)])
def test_formats(tmp_path, rng, fmt, subtype, exact):
    x = tone(8000, rng)
    path = str(tmp_path / f"a.{fmt}")
    sf.write(path, x / 32768.0, 16000, subtype=subtype, format=fmt.upper())
    y, rate = load_audio(path, scale="int16")
    assert rate == 16000 and y.shape[0] == 8000
    if exact:
        np.testing.assert_array_equal(y, x.astype(np.float32))
    else:  # lossy: the waveform is still clearly the same signal
        assert np.corrcoef(y, x)[0, 1] > 0.95


def test_any_sample_rate_and_resampling(tmp_path, rng):
    from asrkit.features import resample

    path = str(tmp_path / "a.wav")
    x = tone(22050, rng, rate=22050)
    sf.write(path, x, 22050, subtype="PCM_16")
    y, rate = load_audio(path, scale="int16")
    assert rate == 22050 and y.shape == (22050,)
    z, rate = load_audio(path, sample_rate=16000)
    assert rate == 16000
    np.testing.assert_allclose(z, resample(x / np.float32(32768), 22050, 16000), atol=1e-6)
    assert abs(z.shape[0] - 16000) <= 1


def test_multichannel_mix_and_pick(tmp_path, rng):
    path = str(tmp_path / "st.wav")
    st = np.stack([tone(1000, rng), tone(1000, rng, freq=900)], axis=1)
    sf.write(path, st, 8000, subtype="PCM_16")
    ref, _ = _stdlib_wav(path)
    left, _ = load_audio(path, scale="int16", channel=0)
    right, _ = load_audio(path, scale="int16", channel=1)
    mixed, _ = load_audio(path, scale="int16")
    np.testing.assert_array_equal(left, ref[:, 0])
    np.testing.assert_array_equal(right, ref[:, 1])
    np.testing.assert_allclose(mixed, ref.mean(axis=1), atol=1e-3)
    with pytest.raises(AudioError, match="channel 2 requested but the file has 2"):
        load_audio(path, channel=2)
    assert audio_info(path) == (1000, 8000, 2)


def test_file_objects_and_bytes(tmp_path, rng):
    x = tone(500, rng)
    buf = io.BytesIO()
    sf.write(buf, x, 16000, format="WAV", subtype="PCM_16")
    data = buf.getvalue()
    a, _ = load_audio(io.BytesIO(data), scale="int16")
    b, _ = load_audio(data, scale="int16")
    np.testing.assert_array_equal(a, x)
    np.testing.assert_array_equal(b, x)


def test_bad_audio_names_the_file(tmp_path):
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    with pytest.raises(AudioError, match=r"empty\.wav: empty file"):
        load_audio(str(empty))
    corrupt = tmp_path / "corrupt.wav"
    corrupt.write_bytes(b"RIFF\x10\x00\x00\x00WAVEnot really audio")
    with pytest.raises(AudioError, match=r"corrupt\.wav: cannot read audio"):
        load_audio(str(corrupt))
    with pytest.raises(AudioError, match=r"missing\.wav: no such file"):
        load_audio(str(tmp_path / "missing.wav"))
    header_only = tmp_path / "header.wav"
    sf.write(str(header_only), np.zeros(0, np.int16), 16000)
    with pytest.raises(AudioError, match="0 samples"):
        load_audio(str(header_only))
    with pytest.raises(ValueError, match="scale"):
        load_audio(str(header_only), scale="int32")


def test_save_audio_round_trip_and_atomic(tmp_path, rng):
    x = tone(3000, rng)
    for name in ("out.wav", "out.flac"):
        path = str(tmp_path / name)
        save_audio(path, x.astype(np.float32), 16000, scale="int16")
        y, rate = load_audio(path, scale="int16")
        assert rate == 16000
        np.testing.assert_array_equal(y, x)
    assert sf.info(str(tmp_path / "out.flac")).format == "FLAC"
    # a failing write leaves the old file and no temporary behind
    before = (tmp_path / "out.wav").read_bytes()
    with pytest.raises(ValueError, match="1-D or 2-D"):
        save_audio(str(tmp_path / "out.wav"), np.zeros((2, 2, 2)), 16000)
    with pytest.raises((ValueError, TypeError, RuntimeError)):  # fails inside the open file
        save_audio(str(tmp_path / "out.wav"), x, 16000, scale="int16", subtype="VORBIS")
    assert (tmp_path / "out.wav").read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["out.flac", "out.wav"]
    buf = io.BytesIO()
    save_audio(buf, x / 32768.0, 16000, format="WAV")
    np.testing.assert_array_equal(load_audio(buf.getvalue(), scale="int16")[0], x)


def test_truncated_wav_is_an_error_not_its_first_part(tmp_path, rng):
    """libsndfile decodes a wav cut short from what is there; Kaldi warns. Here the header's
    data size is checked against the file: a shortfall names the file and both sizes."""
    import struct

    from asrkit.io import load_rxfilename

    x = tone(4000, rng)
    full = tmp_path / "full.wav"
    sf.write(str(full), x, 16000, subtype="PCM_16")
    data = full.read_bytes()
    cut = tmp_path / "cut.wav"
    cut.write_bytes(data[:-2000])
    message = (r"cut\.wav: truncated wav: its header says 8000 bytes of audio data, the file "
               "holds 6000")
    with pytest.raises(AudioError, match=message):
        load_audio(str(cut))
    with pytest.raises(AudioError, match="truncated wav"):
        load_audio(data[:-2000])
    with pytest.raises(AudioError, match="truncated wav"):  # through a pipe too
        load_rxfilename(f"cat {cut} |")
    # sizes left unset by a writer that could not seek back mean "to the end", as in Kaldi
    streamed = bytearray(data)
    struct.pack_into("<I", streamed, streamed.index(b"data") + 4, 0xFFFFFFFF)
    (tmp_path / "s.wav").write_bytes(bytes(streamed[:-2000]))
    y, _ = load_rxfilename(f"cat {tmp_path / 's.wav'} |", scale="int16")
    np.testing.assert_array_equal(y, x[:3000])
