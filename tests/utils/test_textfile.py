"""``asrkit.utils.textfile``: UTF-8 text whole or line by line, errors naming file and line."""

import io

import pytest

from asrkit.utils.textfile import TextFileError, decode_lines, read_lines, read_text


def test_lines_equal_python_text_mode_and_errors_name_the_line(tmp_path):
    path = tmp_path / "t.txt"
    data = "ünï\r\ncode\n\nlast without newline".encode()
    path.write_bytes(data)
    with open(path, encoding="utf-8", newline="") as f:
        assert list(read_lines(path)) == f.readlines()
    assert read_text(path) == data.decode("utf-8")
    path.write_bytes(b"fine\nfine\nbad \xc3\n")
    with pytest.raises(TextFileError, match=f"^{path}:3: not UTF-8 text "):
        read_text(path)
    lines = read_lines(path)
    assert [next(lines), next(lines)] == ["fine\n", "fine\n"]  # good lines come before the error
    with pytest.raises(TextFileError, match=f"^{path}:3: not UTF-8 text .*at byte 4 of the line"):
        next(lines)
    with pytest.raises(TextFileError, match="^<stdin>:1: "):
        list(decode_lines(io.BytesIO(b"\xff\n"), "<stdin>"))
    with pytest.raises(IsADirectoryError):
        list(read_lines(tmp_path))
