"""Reading a user's text file whole, with errors that name the file and line.

``read_text`` returns the file decoded as UTF-8; bytes that are not UTF-8 raise
``TextFileError`` (a ValueError) naming ``path:line``, where the line counts ``\\n`` as most
tools do. I/O problems (missing file, a folder, no permission) stay ``OSError``;
``os_error_message`` words one for a user.
"""

from __future__ import annotations

import os


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


def os_error_message(path: str | os.PathLike, e: OSError) -> str:
    """``PATH: reason`` for an OSError met while reading or writing ``path``."""
    if isinstance(e, IsADirectoryError):
        return f"{e.filename or os.fspath(path)}: is a directory, expected a file"
    if isinstance(e, NotADirectoryError):
        return f"{e.filename or os.fspath(path)}: a part of the path is a file, not a directory"
    return f"{e.filename or os.fspath(path)}: {e.strerror or e}"
