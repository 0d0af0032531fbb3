"""Audio files through soundfile (libsndfile): wav, flac, ogg/vorbis and the rest it reads.

Samples come back as float32 1-D arrays in one of two scales:

- ``scale="float"``: full scale is [-1, 1) (what soundfile, torchaudio and librosa return);
- ``scale="int16"``: full scale is [-32768, 32768), the values Kaldi's ``WaveData`` holds, so
  features computed on them are identical to ``compute-fbank-feats``. 16-bit PCM files give the
  exact integer sample values.

Multi-channel audio is mixed down to mono by averaging the channels unless ``channel=`` picks
one (Kaldi's ``--channel``).
"""

from __future__ import annotations

import io
import os
import struct
from typing import IO, BinaryIO

import numpy as np

from asrkit.utils import atomic_open

INT16_SCALE = 32768.0  # 2**15: a float sample of 1.0 is int16 value 32768
SCALES = ("float", "int16")


class AudioError(ValueError):
    """Audio that cannot be read: missing, empty, corrupt, or an unsupported layout."""


# RIFF chunk sizes that mean "unknown, read to the end": what tools writing WAV to a pipe leave
STREAMED_SIZES = (0, 0xFFFFFFFF)


def wav_data_sizes(read_at, total: int) -> tuple[int, int] | None:
    """``(declared, available)`` bytes of the data chunk of a RIFF/WAVE file, or None when it
    is not one (or has no data chunk). ``read_at(pos, n)`` returns ``n`` bytes at ``pos``;
    ``total`` is the file's size in bytes."""
    head = read_at(0, 12)
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return None
    pos = 12
    while pos + 8 <= total:
        chunk = read_at(pos, 8)
        if len(chunk) < 8:
            return None
        (size,) = struct.unpack_from("<I", chunk, 4)
        if chunk[:4] == b"data":
            return size, total - pos - 8
        pos += 8 + size + (size & 1)
    return None


def _check_complete_wav(source, name: str) -> None:
    """Raise AudioError when a WAV header promises more audio data than the file holds (Kaldi
    warns and decodes the first part; a truncated file is an error here)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = memoryview(source)
        sizes = wav_data_sizes(lambda pos, n: bytes(data[pos:pos + n]), len(data))
    elif isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            total = os.fstat(f.fileno()).st_size

            def read_at(pos, n):
                f.seek(pos)
                return f.read(n)

            sizes = wav_data_sizes(read_at, total)
    else:
        return
    if sizes is not None:
        declared, available = sizes
        if declared not in STREAMED_SIZES and declared > available:
            raise AudioError(f"{name}: truncated wav: its header says {declared} bytes of audio "
                             f"data, the file holds {available}")


def _source_name(source) -> str:
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    return getattr(source, "name", None) or "<file object>"


def load_audio(source: str | os.PathLike | BinaryIO | bytes, sample_rate: int | None = None,
               scale: str = "float", channel: int | None = None,
               dtype: str | np.dtype = "float32") -> tuple[np.ndarray, int]:
    """Read an audio file and return ``(samples, sample_rate)``.

    Takes a path, a binary file object or the file's bytes. ``sample_rate`` resamples to that
    rate when the file's differs (``asrkit.features.resample``); None keeps the file's rate.
    ``scale`` is "float" ([-1, 1)) or "int16" ([-32768, 32768), Kaldi's scale). ``channel``
    picks one channel of a multi-channel file (0-based); None averages all channels.
    Returns samples of shape ``[num_samples]`` with ``dtype`` (float32 by default) and the
    sample rate in Hz (int). Raises ``AudioError`` naming the file when it cannot be read or
    holds no samples.
    """
    import soundfile as sf

    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    name = _source_name(source)
    if isinstance(source, (str, os.PathLike)):
        if not os.path.exists(source):
            raise AudioError(f"{name}: no such file")
        if os.path.isdir(source):
            raise AudioError(f"{name}: is a directory, not an audio file")
        if os.path.isfile(source) and os.path.getsize(source) == 0:
            raise AudioError(f"{name}: empty file (0 bytes)")
    try:
        _check_complete_wav(source, name)
    except OSError as e:
        raise AudioError(f"{name}: {e.strerror or e}") from e
    if isinstance(source, (bytes, bytearray, memoryview)):
        source = io.BytesIO(source)
    try:
        data, rate = sf.read(source, dtype="float32", always_2d=True)
    except FileNotFoundError as e:
        raise AudioError(f"{name}: no such file") from e
    except (sf.LibsndfileError, RuntimeError, TypeError, EOFError, ValueError) as e:
        reason = getattr(e, "error_string", None) or str(e)
        raise AudioError(f"{name}: cannot read audio: {reason}") from e
    except MemoryError:
        raise AudioError(f"{name}: cannot read audio: its header declares more samples than "
                         "fit in memory") from None
    except OSError as e:
        raise AudioError(f"{name}: {e.strerror or e}") from e
    if data.shape[0] == 0:
        raise AudioError(f"{name}: empty audio (0 samples)")
    num_channels = data.shape[1]
    if channel is None:
        samples = data[:, 0] if num_channels == 1 else data.mean(axis=1, dtype=np.float64)
    else:
        if not 0 <= channel < num_channels:
            raise AudioError(f"{name}: channel {channel} requested but the file has "
                             f"{num_channels} channel(s)")
        samples = data[:, channel]
    samples = np.ascontiguousarray(samples, dtype=np.float32)
    if sample_rate is not None and int(sample_rate) != rate:
        from asrkit.features import resample

        samples = np.asarray(resample(samples, rate, int(sample_rate)), dtype=np.float32)
        rate = int(sample_rate)
    if scale == "int16":
        samples *= np.float32(INT16_SCALE)  # a power of two: exact in float32
    return samples.astype(dtype, copy=False), int(rate)


def audio_info(source: str | os.PathLike | BinaryIO) -> tuple[int, int, int]:
    """Return ``(num_frames, sample_rate, channels)`` of an audio file without reading samples."""
    import soundfile as sf

    try:
        info = sf.info(source)
    except (sf.LibsndfileError, RuntimeError) as e:
        raise AudioError(f"{_source_name(source)}: cannot read audio: {e}") from e
    return int(info.frames), int(info.samplerate), int(info.channels)


def save_audio(target: str | os.PathLike | IO[bytes], samples: np.ndarray, sample_rate: int,
               scale: str = "float", format: str | None = None,
               subtype: str | None = None) -> None:
    """Write ``samples`` (``[num_samples]`` or ``[num_samples, channels]``) as an audio file.

    ``scale`` says how to read the values: "float" ([-1, 1)) or "int16" ([-32768, 32768)).
    ``format`` ("WAV", "FLAC", "OGG", ...) defaults to the file extension, ``subtype`` to
    soundfile's default for the format (PCM_16 for WAV and FLAC, VORBIS for OGG). A path is
    written atomically; a file object is written in place (``format`` is then required unless
    it has a ``name`` with an extension).
    """
    import soundfile as sf

    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    data = np.asarray(samples)
    if data.ndim not in (1, 2):
        raise ValueError(f"samples must be 1-D or 2-D [num_samples, channels], got {data.shape}")
    if scale == "int16":
        data = data.astype(np.float64) / INT16_SCALE
    if format is None:
        name = os.fspath(target) if isinstance(target, (str, os.PathLike)) else getattr(
            target, "name", "")
        ext = os.path.splitext(str(name))[1].lstrip(".").upper()
        format = {"OGA": "OGG", "OPUS": "OGG"}.get(ext, ext)
        if not format:
            raise ValueError("save_audio: cannot tell the format; pass format='WAV' or similar")
    if isinstance(target, (str, os.PathLike)):
        with atomic_open(target, "wb") as f:
            sf.write(f, data, int(sample_rate), format=format, subtype=subtype)
    else:
        sf.write(target, data, int(sample_rate), format=format, subtype=subtype)
