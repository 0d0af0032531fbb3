"""numba's compile cache: where it lives, the background warm-up's claim, and a warm-up after
which the usual commands compile nothing."""

import json
import os
import subprocess
import sys

import pytest

from asrkit.utils import jit


def test_cache_location_follows_numba_rules(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "c"))
    assert jit.cache_location() == tmp_path / "c"
    monkeypatch.delenv("NUMBA_CACHE_DIR")
    assert jit.cache_location() == jit._PACKAGE_DIR / "__pycache__"  # writable here
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home-cache"))
    monkeypatch.setattr(jit, "_writable", lambda p: "home-cache" in str(p))
    assert jit.cache_location() == tmp_path / "home-cache" / "numba"


def test_nowhere_writable_points_numba_at_a_temporary_folder(monkeypatch):
    """A read-only install whose home is read-only too: NUMBA_CACHE_DIR goes to $TMPDIR
    (numba itself would refuse to import the kernels)."""
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setattr(jit, "_writable", lambda p: False)
    folder = jit.ensure_cache_dir()
    assert folder is not None and os.path.basename(folder).startswith("asrkit-numba-")
    assert os.environ["NUMBA_CACHE_DIR"] == folder
    assert jit.ensure_cache_dir() is None  # set now: nothing more to do


def test_writable_cache_is_left_alone(tmp_path, monkeypatch):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    assert jit.ensure_cache_dir() is None and "NUMBA_CACHE_DIR" not in os.environ


class _FakePopen:
    started: list = []

    def __init__(self, argv, **kw):
        self.pid = os.getpid()  # alive
        _FakePopen.started.append((argv, kw))


def test_background_warmup_starts_once_per_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(subprocess, "Popen", _FakePopen)
    _FakePopen.started.clear()
    monkeypatch.setenv("ASRKIT_WARMUP", "0")
    assert not jit.start_background_warmup()
    monkeypatch.delenv("ASRKIT_WARMUP")
    assert jit.start_background_warmup()
    argv, kw = _FakePopen.started[0]
    assert argv[-2:] == ["warmup", "--background"] and kw["start_new_session"]
    assert kw["env"]["ASRKIT_WARMUP"] == "0"  # its own commands start no further warm-ups
    assert json.loads(jit.stamp_path().read_text())["running"]
    assert not jit.start_background_warmup()  # claimed (and its process is alive)
    assert len(_FakePopen.started) == 1


def test_abandoned_background_warmup_is_restarted(tmp_path, monkeypatch):
    """A warm-up killed before it finished leaves a claim naming a dead process: the next
    command starts another."""
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("ASRKIT_WARMUP", raising=False)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    monkeypatch.setattr(subprocess, "Popen", _FakePopen)
    stamp = jit.stamp_path()
    stamp.write_text(json.dumps({"running": True, "pid": int(dead), "started": 0}))
    _FakePopen.started.clear()
    assert jit.start_background_warmup() and len(_FakePopen.started) == 1
    stamp.write_text(json.dumps({"ok": True, "finished": 1.0}))  # a finished one stays
    assert not jit.start_background_warmup()


@pytest.mark.slow
def test_after_warmup_the_commands_compile_nothing(tmp_path):
    """``asrkit warmup`` into an empty cache, then every warm-up command again in a process
    that counts numba compilations: none (each kernel loads from the cache)."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"), "ASRKIT_WARMUP": "0"}
    r = subprocess.run([sys.executable, "-m", "asrkit", "warmup", "--json"], env=env,
                       capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads(r.stdout)
    assert summary["ok"] and len(summary["commands"]) == 10
    assert summary["cache"] == str(tmp_path / "cache")
    stamps = list((tmp_path / "cache").glob("warmup-asrkit-*.json"))
    assert len(stamps) == 1 and json.loads(stamps[0].read_text())["ok"]
    code = """
import json, sys, tempfile, contextlib, io
from pathlib import Path
from numba.core import event
from asrkit.utils import jit
from asrkit.cli.main import main
compiled = []
class L(event.Listener):
    def on_start(self, ev):
        compiled.append(ev.data["dispatcher"].py_func.__qualname__)
    def on_end(self, ev):
        pass
event.register("numba:compile", L())
root = Path(tempfile.mkdtemp())
jit.write_data(root)
import os
os.chdir(root)
for chain in jit.chains():
    for label, argv in chain:
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(argv) == 0, label
print(json.dumps(compiled))
"""
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=3600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == []
