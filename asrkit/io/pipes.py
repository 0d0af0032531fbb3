"""Shell pipes (``cmd |``) of wav.scp, feats.scp and table specifiers, run with a time limit.

Kaldi runs a ``cmd |`` rxfilename through the shell and reads its stdout. A command that never
ends would hang the whole job, so every pipe here has a deadline:

- a pipe that yields one object (a ``wav.scp`` entry, a ``feats.scp`` value) must finish within
  the timeout, counted from its start;
- a pipe that streams a whole table (``ark:gunzip -c x.ark.gz |``) may run as long as it keeps
  producing: it fails when it goes the timeout without output, or does not exit within the
  timeout once its output is read.

The timeout is ``DEFAULT_TIMEOUT_S`` seconds unless ``$ASRKIT_PIPE_TIMEOUT`` or
``set_pipe_timeout`` (the ``--pipe-timeout`` option of the commands) says otherwise. A command
that times out is killed with everything it started (it runs in its own process group). Errors
are ``PipeError`` with the command, its exit status and the end of its stderr.
"""

from __future__ import annotations

import math
import os
import select
import signal
import subprocess
import tempfile
import time

DEFAULT_TIMEOUT_S = 300.0
ENV_TIMEOUT = "ASRKIT_PIPE_TIMEOUT"
_CHUNK = 1 << 16

_timeout_override: float | None = None


class PipeError(OSError):
    """A pipe that failed: non-zero exit status, a timeout, or too much output."""


def check_timeout(value, what: str = "pipe timeout") -> float:
    """Return ``value`` as seconds (a finite number > 0), or raise ValueError naming ``what``."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number of seconds, got {value!r}") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{what} must be a finite number of seconds > 0, got {value!r}")
    return seconds


def set_pipe_timeout(seconds: float | None) -> None:
    """Set the pipe timeout of this process (None: back to ``$ASRKIT_PIPE_TIMEOUT`` or the
    default). Also exported to the environment so worker processes inherit it."""
    global _timeout_override
    if seconds is None:
        _timeout_override = None
        return
    _timeout_override = check_timeout(seconds)
    os.environ[ENV_TIMEOUT] = repr(_timeout_override)


def pipe_timeout() -> float:
    """The pipe timeout in seconds now in force."""
    if _timeout_override is not None:
        return _timeout_override
    value = os.environ.get(ENV_TIMEOUT)
    if value is None:
        return DEFAULT_TIMEOUT_S
    return check_timeout(value, f"${ENV_TIMEOUT}")


def command_of(rxfilename: str) -> str:
    """The command of a ``cmd |`` rxfilename (the text before the final ``|``)."""
    cmd = rxfilename.strip()
    return cmd[:-1].rstrip() if cmd.endswith("|") else cmd


class PipeReader:
    """The stdout of a shell command, read with a deadline (a binary file-like object).

    ``streaming=False``: the whole command must end within ``timeout`` seconds of its start.
    ``streaming=True``: each read may wait ``timeout`` seconds for output. Use as a context
    manager: leaving it checks the exit status (``close(check=True)``) and kills the command
    when it has not finished in time; ``close(check=False)`` just kills and reaps it.
    """

    mode = "rb"

    def __init__(self, command: str, timeout: float | None = None, streaming: bool = False):
        self.command = command_of(command)
        self.timeout = pipe_timeout() if timeout is None else check_timeout(timeout)
        self.streaming = streaming
        self._stderr = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(self.command, shell=True, stdout=subprocess.PIPE,
                                      stderr=self._stderr, stdin=subprocess.DEVNULL,
                                      start_new_session=True)
        self._fd = self._proc.stdout.fileno()
        self._start = time.monotonic()
        self._buf = bytearray()
        self._pos = 0
        self._eof = False
        self._closed = False
        self.name = f"{self.command} |"

    # -------------------------------------------------------------- reading

    def _deadline(self) -> float:
        if self.streaming:
            return time.monotonic() + self.timeout
        return self._start + self.timeout

    def _fill(self) -> bool:
        """Read one more chunk into the buffer; False at end of output."""
        if self._eof:
            return False
        remaining = self._deadline() - time.monotonic()
        if remaining <= 0 or not select.select([self._fd], [], [], remaining)[0]:
            self._kill()
            raise PipeError(f"command '{self.command} |' timed out after {self.timeout:g} s"
                            + ("" if not self.streaming else " without output")
                            + f" (set --pipe-timeout or ${ENV_TIMEOUT})")
        chunk = os.read(self._fd, _CHUNK)
        if not chunk:
            self._eof = True
            return False
        if self._pos > _CHUNK and self._pos > len(self._buf) // 2:
            del self._buf[:self._pos]
            self._pos = 0
        self._buf += chunk
        return True

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (all the rest when ``n`` < 0); fewer only at the end of output."""
        if n is None or n < 0:
            while self._fill():
                pass
            n = len(self._buf) - self._pos
        while len(self._buf) - self._pos < n and self._fill():
            pass
        out = bytes(self._buf[self._pos:self._pos + n])
        self._pos += len(out)
        return out

    def readline(self) -> bytes:
        """The next line, with its newline (none at the end of output)."""
        while True:
            i = self._buf.find(b"\n", self._pos)
            if i >= 0:
                return self.read(i + 1 - self._pos)
            if not self._fill():
                return self.read()

    def __iter__(self):
        while True:
            line = self.readline()
            if not line:
                return
            yield line

    # -------------------------------------------------------------- ending

    def _kill(self) -> None:
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def _stderr_tail(self) -> str:
        self._stderr.seek(0)
        tail = self._stderr.read()[-2000:].decode(errors="replace").strip().splitlines()[-3:]
        return f": {' / '.join(tail)}" if tail else ""

    def close(self, check: bool = True) -> None:
        """Reap the command. With ``check``, raise PipeError when it exited non-zero or did not
        exit in time (it is then killed); without, kill it if it still runs."""
        if self._closed:
            return
        self._closed = True
        try:
            self._proc.stdout.close()
            if not check:
                self._kill()
                self._proc.wait()
                return
            try:
                self._proc.wait(timeout=max(self._deadline() - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                self._kill()
                self._proc.wait()
                raise PipeError(f"command '{self.command} |' did not exit within "
                                f"{self.timeout:g} s (set --pipe-timeout or ${ENV_TIMEOUT})"
                                ) from None
            rc = self._proc.returncode
            if rc != 0:
                status = f"signal {-rc}" if rc < 0 else f"status {rc}"
                raise PipeError(f"command '{self.command} |' exited with {status}"
                                + self._stderr_tail())
        finally:
            self._stderr.close()

    def __enter__(self) -> PipeReader:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close(check=True)
            return
        # the read failed: a command that already failed explains it better than the parse error
        if not isinstance(exc, PipeError) and self._eof:
            try:  # at the end of its output the command is exiting: give it a moment
                self._proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                pass
        if not isinstance(exc, PipeError) and self._proc.poll() not in (None, 0):
            try:
                self.close(check=True)
            except PipeError as e:
                raise e from exc
        self.close(check=False)


def run_pipe(command: str, timeout: float | None = None, max_bytes: int = 1 << 32) -> bytes:
    """Run ``command`` (``cmd`` or ``cmd |``) and return its whole stdout.

    The command must end within ``timeout`` seconds (default: ``pipe_timeout()``) and write at
    most ``max_bytes``; otherwise it is killed and PipeError says why.
    """
    with PipeReader(command, timeout=timeout) as p:
        out = bytearray()
        while True:
            chunk = p.read(_CHUNK)
            if not chunk:
                break
            out += chunk
            if len(out) > max_bytes:
                p.close(check=False)
                raise PipeError(f"command '{p.command} |' wrote more than {max_bytes} bytes")
        return bytes(out)
