"""Reading the audio a ``wav.scp`` entry names, as Kaldi's extended filenames (rxfilenames).

An entry's value is one of

- a path: ``/corpus/a.flac`` (relative paths are relative to the current directory, as in Kaldi);
- a pipe: ``sox a.sph -t wav - |`` or ``cat a.wav |``, run through ``sh`` with its stdout read
  as an audio file; it must finish within the pipe timeout (``asrkit.io.pipes``);
- a wav archive offset: ``wav.ark:1234``, a RIFF file stored at that byte offset of a Kaldi
  archive written by ``wav-copy`` (the offset points at ``RIFF``, after the key).
"""

from __future__ import annotations

import os
import re
import struct

import numpy as np

from asrkit.io.audio import STREAMED_SIZES, AudioError, load_audio
from asrkit.io.pipes import PipeError, run_pipe

# data sizes at or above this are placeholders of tools that cannot seek back, not real sizes
_PLACEHOLDER_SIZE = 0x7FFF0000

_OFFSET = re.compile(r"^(.*):(\d+)$")


def is_pipe(rxfilename: str) -> bool:
    """True when the entry is a ``cmd |`` pipe."""
    return rxfilename.rstrip().endswith("|")


def _fix_streamed_wav_sizes(data: bytes) -> bytes:
    """Patch the RIFF and data chunk sizes of a WAV written to a pipe.

    Tools writing WAV to stdout (sox, ffmpeg) cannot seek back, so they leave the sizes 0,
    0xFFFFFFFF or a large placeholder; Kaldi reads such streams by taking the data to the end,
    and so do we. Any other size larger than what came is a truncated stream, left for
    ``load_audio`` to report.
    """
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return data
    pos = 12
    while pos + 8 <= len(data):
        chunk_id = data[pos:pos + 4]
        (size,) = struct.unpack_from("<I", data, pos + 4)
        if chunk_id == b"data":
            real = len(data) - pos - 8
            if size != real and (size in STREAMED_SIZES or size >= _PLACEHOLDER_SIZE):
                out = bytearray(data)
                struct.pack_into("<I", out, pos + 4, real)
                struct.pack_into("<I", out, 4, len(data) - 8)
                return bytes(out)
            return data
        pos += 8 + size + (size & 1)
    return data


def read_pipe(command: str, timeout: float | None = None) -> bytes:
    """Run ``command`` (the part before the final ``|``) through the shell and return its stdout.

    The command must finish within ``timeout`` seconds (default: the pipe timeout,
    ``asrkit.io.pipes.pipe_timeout()``). Raises ``AudioError`` with the exit status and the end
    of stderr when the command fails, or saying it timed out.
    """
    try:
        return run_pipe(command, timeout=timeout)
    except PipeError as e:
        raise AudioError(str(e)) from None
    except OSError as e:
        raise AudioError(f"{command}: {e.strerror or e}") from None


def read_wav_ark_entry(path: str, offset: int) -> bytes:
    """Return the bytes of the RIFF file stored at byte ``offset`` of the archive ``path``."""
    try:
        with open(path, "rb") as f:
            total = os.fstat(f.fileno()).st_size
            f.seek(offset)
            header = f.read(8)
            if len(header) < 8 or header[:4] != b"RIFF":
                raise AudioError(f"{path}:{offset}: no RIFF header at this offset")
            (size,) = struct.unpack("<I", header[4:])
            body = f.read(min(size, max(total - offset - 8, 0)))
    except FileNotFoundError as e:
        raise AudioError(f"{path}: no such file") from e
    except OSError as e:
        raise AudioError(f"{path}: {e.strerror or e}") from e
    if len(body) < size:
        raise AudioError(f"{path}:{offset}: archive ends inside the wav ({len(body)} of "
                         f"{size} bytes)")
    return header + body


def read_rxfilename_bytes(rxfilename: str) -> bytes:
    """Return the raw bytes of the audio file an rxfilename names (path, pipe or ark offset)."""
    rx = rxfilename.strip()
    if is_pipe(rx):
        return _fix_streamed_wav_sizes(read_pipe(rx))
    m = _OFFSET.match(rx)
    if m and not os.path.exists(rx) and os.path.exists(m.group(1)):
        return read_wav_ark_entry(m.group(1), int(m.group(2)))
    try:
        with open(rx, "rb") as f:
            return f.read()
    except FileNotFoundError as e:
        raise AudioError(f"{rx}: no such file") from e
    except OSError as e:
        raise AudioError(f"{rx}: {e.strerror}") from e


def load_rxfilename(rxfilename: str, sample_rate: int | None = None, scale: str = "float",
                    channel: int | None = None) -> tuple[np.ndarray, int]:
    """Load the audio of a wav.scp value: ``(samples float32 [num_samples], sample_rate)``.

    Options as ``asrkit.io.load_audio``. Raises ``AudioError`` naming the entry.
    """
    rx = rxfilename.strip()
    if not is_pipe(rx) and not _OFFSET.match(rx):
        return load_audio(rx, sample_rate=sample_rate, scale=scale, channel=channel)
    data = read_rxfilename_bytes(rx)
    if not data:
        raise AudioError(f"{rx}: empty audio (0 bytes)")
    try:
        return load_audio(data, sample_rate=sample_rate, scale=scale, channel=channel)
    except AudioError as e:
        msg = str(e).split(": ", 1)[-1]
        raise AudioError(f"{rx}: {msg}") from e
