"""The ``asrkit`` command itself: version, help, errors."""

import subprocess
import sys

import asrkit
from asrkit.cli.main import main


def test_version(capsys):
    try:
        main(["--version"])
    except SystemExit as e:
        assert e.code == 0
    assert asrkit.__version__ in capsys.readouterr().out


def test_help_lists_commands_and_each_has_help():
    out = subprocess.run([sys.executable, "-m", "asrkit", "--help"], capture_output=True,
                         text=True, check=True).stdout
    assert "bench" in out
    from asrkit.cli.main import _command_modules

    for mod in _command_modules():
        r = subprocess.run([sys.executable, "-m", "asrkit", mod.COMMAND, "--help"],
                           capture_output=True, text=True)
        assert r.returncode == 0, (mod.COMMAND, r.stderr)
        assert "usage:" in r.stdout


def test_no_command_is_an_error():
    r = subprocess.run([sys.executable, "-m", "asrkit"], capture_output=True, text=True)
    assert r.returncode == 2
