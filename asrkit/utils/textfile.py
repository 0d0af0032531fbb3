"""Reading a user's text files, whole or line by line, with errors that name the file and line.

``read_text`` returns the file decoded as UTF-8; bytes that are not UTF-8 raise
``TextFileError`` (a ValueError) naming ``path:line``, where the line counts ``\\n`` as most
tools do. ``read_lines`` (a path) and ``decode_lines`` (any source of byte lines, such as
``sys.stdin.buffer``) give the same lines one at a time, for files too big to hold, with the
same errors. I/O problems (missing file, a folder, no permission) stay ``OSError``;
``os_error_message`` words one for a user.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator


class TextFileError(ValueError):
    """A text file that cannot be decoded; the message starts with ``path:line:``."""


def read_text(path: str | os.PathLike) -> str:
    """The whole of ``path`` as UTF-8 text (a leading byte-order mark is an error too)."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise TextFileError(f"{os.fspath(path)}:{line}: not UTF-8 text ({e.reason} at byte "
                            f"{e.start})") from None


def decode_lines(raw: Iterable[bytes], name: str, first_line: int = 1) -> Iterator[str]:
    """The lines of ``raw`` (byte strings, each ending in ``\\n`` but perhaps the last)
    decoded as UTF-8, newline kept; a line that is not UTF-8 raises ``TextFileError`` naming
    ``name:line`` when it is reached (``first_line``: the number of the first, for a chunk
    from the middle of a file)."""
    for lineno, line in enumerate(raw, start=first_line):
        try:
            yield line.decode("utf-8")
        except UnicodeDecodeError as e:
            raise TextFileError(f"{name}:{lineno}: not UTF-8 text ({e.reason} at byte "
                                f"{e.start} of the line)") from None


def read_lines(path: str | os.PathLike) -> Iterator[str]:
    """The lines of ``path`` as UTF-8 text, one at a time (``decode_lines``); the file is
    opened on the first ``next`` and closed when the lines end or the iterator is dropped."""
    with open(path, "rb") as f:
        yield from decode_lines(f, os.fspath(path))


def os_error_message(path: str | os.PathLike, e: OSError) -> str:
    """``PATH: reason`` for an OSError met while reading or writing ``path``."""
    if isinstance(e, IsADirectoryError):
        return f"{e.filename or os.fspath(path)}: is a directory, expected a file"
    if isinstance(e, NotADirectoryError):
        return f"{e.filename or os.fspath(path)}: a part of the path is a file, not a directory"
    return f"{e.filename or os.fspath(path)}: {e.strerror or e}"
