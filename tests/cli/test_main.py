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


def _raise(exc):
    def run(args):
        raise exc
    return run


def test_an_unexpected_error_is_one_line_with_status_2(monkeypatch, capsys):
    import asrkit.cli.model as model_cmd

    monkeypatch.setattr(model_cmd, "run", _raise(RuntimeError("boom\nsecond line")))
    assert main(["model", "info", "x.mdl"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "asrkit model: error: RuntimeError: boom second line (asrkit --debug shows the "
        "traceback)"]
    assert main(["--debug", "model", "info", "x.mdl"]) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "RuntimeError: boom" in err


def test_memory_errors_interrupts_and_os_errors(monkeypatch, capsys):
    import asrkit.cli.model as model_cmd

    monkeypatch.setattr(model_cmd, "run", _raise(MemoryError("Unable to allocate 238. GiB")))
    assert main(["model", "info", "x.mdl"]) == 2
    assert capsys.readouterr().err == ("asrkit model: error: out of memory: Unable to allocate "
                                       "238. GiB\n")
    monkeypatch.setattr(model_cmd, "run", _raise(KeyboardInterrupt()))
    assert main(["model", "info", "x.mdl"]) == 130
    assert capsys.readouterr().err == "asrkit model: interrupted\n"
    monkeypatch.setattr(model_cmd, "run", _raise(IsADirectoryError(21, "Is a directory", "out")))
    assert main(["model", "info", "x.mdl"]) == 2
    assert capsys.readouterr().err.startswith("asrkit model: error: out: Is a directory")


def test_a_closed_stdout_pipe_ends_quietly():
    """``asrkit ... | head``: the reader went away; no traceback, SIGPIPE's status."""
    p = subprocess.Popen([sys.executable, "-m", "asrkit", "bench", "--help"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()
    err = p.stderr.read().decode()
    p.stderr.close()
    assert p.wait() in (0, 141) and "Traceback" not in err and "Error" not in err
    code = ("import sys; from asrkit.cli import main as m, model as c\n"
            "c.run = lambda a: print('x\\n' * 100000)\n"
            "sys.exit(m.main(['model', 'info', 'x']))")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    p.stdout.close()
    err = p.stderr.read().decode()
    p.stderr.close()
    assert p.wait() == 141 and err == "", err
