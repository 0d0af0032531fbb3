"""Numba's compile cache: where it lives, and warming it before a user waits for it.

asrkit's kernels are ``numba.njit(cache=True)`` functions. The first call of each compiles it
for the argument types it meets (a few tenths of a second to ten seconds per kernel; a command
needs tens of them) and writes the machine code to numba's cache, from which every later process
loads it in milliseconds. A fresh install therefore makes its first ``asrkit transcribe`` or
``graph build`` wait 25-30 s on a quiet 2-core machine, and again after every upgrade (the cache
is keyed on the source of each kernel, numba's version and the CPU).

Where the cache lives (numba's own rules, :func:`cache_location`): ``NUMBA_CACHE_DIR`` when set;
else ``__pycache__`` beside the kernels' sources when that is writable (a virtual environment,
an editable install); else a per-user folder (``~/.cache/numba``). Where none of these is
writable (a read-only image whose home is not writable either), numba would refuse to import
the kernels; :func:`ensure_cache_dir`, which ``import asrkit`` runs, then points
``NUMBA_CACHE_DIR`` at a folder in the temporary directory.

Warming (:func:`warm`, ``asrkit warmup``): every command a user starts with runs once on tiny
data made up in a temporary folder (``compute-features`` at two sample rates, ``lm train``,
``graph build`` with an LM and a word loop, one ``train`` step, ``decode``, ``package``,
``transcribe``, ``align``), two chains of commands in parallel, so that every kernel is compiled
for the argument types the real commands pass and lands in the cache. Run it after installing
(``pip install asrkit && asrkit warmup``); the first command that finds the cache cold also starts
it in the background (:func:`start_background_warmup`, at the lowest CPU priority, once per cache
location and asrkit/numba version; ``ASRKIT_WARMUP=0`` turns that off), so that by the next
command everything is compiled.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

WARMUP_ENV = "ASRKIT_WARMUP"  # "0": never start the background warm-up
_PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the installed asrkit/ folder


def _writable(path: Path) -> bool:
    """Whether files can be created in ``path`` (or in its nearest existing parent)."""
    p = path
    while not p.exists():
        if p.parent == p:
            return False
        p = p.parent
    return os.access(p, os.W_OK | os.X_OK)


def _user_cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base)


def cache_location() -> Path | None:
    """The folder under which numba caches asrkit's kernels (numba's order: ``NUMBA_CACHE_DIR``,
    the sources' ``__pycache__``, the per-user cache), or None where none is writable."""
    env = os.environ.get("NUMBA_CACHE_DIR")
    if env:
        return Path(env)
    if _writable(_PACKAGE_DIR / "__pycache__"):
        return _PACKAGE_DIR / "__pycache__"
    user = _user_cache_root() / "numba"
    return user if _writable(user) else None


def ensure_cache_dir() -> str | None:
    """Point ``NUMBA_CACHE_DIR`` at ``$TMPDIR/asrkit-numba-<uid>`` where numba would find no
    writable place for asrkit's cache (then ``@njit(cache=True)`` fails at import). Imports
    nothing heavy; must run before numba is imported. Returns the folder set, or None."""
    if os.environ.get("NUMBA_CACHE_DIR") or cache_location() is not None:
        return None
    import tempfile

    uid = os.getuid() if hasattr(os, "getuid") else 0
    folder = os.path.join(tempfile.gettempdir(), f"asrkit-numba-{uid}")
    os.environ["NUMBA_CACHE_DIR"] = folder
    return folder


def _version_key() -> str:
    import asrkit

    try:
        from importlib.metadata import version

        numba_version = version("numba")
    except Exception:  # noqa: BLE001 - not installed as a distribution: still a key
        numba_version = "unknown"
    return f"asrkit-{asrkit.__version__}-numba-{numba_version}-py{sys.version_info[0]}." \
           f"{sys.version_info[1]}"


def stamp_path() -> Path | None:
    """The file that records a finished (or running) warm-up of this cache location and these
    asrkit/numba/Python versions; None where there is no writable cache."""
    loc = cache_location()
    return None if loc is None else loc / f"warmup-{_version_key()}.json"


# ---------------------------------------------------------------------------- the warm-up data

_WORDS = ["yes", "no", "go", "stop"]
_TEXTS = ["yes no go", "stop go", "no no yes", "go stop yes no"]
_FBANK = """[features]
type = "fbank"
sample_frequency = 16000.0
num_mel_bins = 23
[cmvn]
mode = "utterance"
[audio]
resample = true
"""
_MFCC_8K = """[features]
type = "mfcc"
sample_frequency = 8000.0
num_mel_bins = 23
num_ceps = 13
[cmvn]
mode = "speaker"
[audio]
resample = true
"""
_TRAIN = """[network]
seed = 0
[[network.layers]]
type = "blstm"
hidden = 8
num_layers = 2
[criterion]
type = "ctc"
[reader]
data_dir = "feats"
cv_data_dir = "feats"
tokens = "lang/tokens.txt"
unit = "word"
cmvn = "utterance"
minibatch_frames = 400
[learner]
type = "adam"
lr = 1e-3
[train]
epochs = 1
max_steps = 1
out_dir = "model"
"""


def write_data(root: Path) -> None:
    """Tiny inputs for the warm-up commands under ``root``: a Kaldi data dir of four noise
    recordings (two at 16 kHz, two at 8 kHz, int16 wav), a word lexicon and tokens, LM text
    and the configs."""
    import numpy as np
    import soundfile

    rng = np.random.default_rng(0)
    data = root / "data"
    (data / "wav").mkdir(parents=True, exist_ok=True)
    lang = root / "lang"
    lang.mkdir(exist_ok=True)
    scp, text, u2s = [], [], []
    for i, words in enumerate(_TEXTS):
        rate = 16000 if i < 2 else 8000
        wav = data / "wav" / f"u{i}.wav"
        samples = (rng.standard_normal(int(0.8 * rate)) * 800).astype(np.int16)
        soundfile.write(wav, samples, rate, subtype="PCM_16")
        utt = f"s{i // 2}-u{i}"  # sorted, as Kaldi wants; one speaker per sample rate
        scp.append(f"{utt} {wav}")
        text.append(f"{utt} {words}")
        u2s.append(f"{utt} s{i // 2}")
    (data / "wav.scp").write_text("\n".join(scp) + "\n")
    (data / "text").write_text("\n".join(text) + "\n")
    (data / "utt2spk").write_text("\n".join(u2s) + "\n")
    spk: dict = {}
    for line in u2s:
        utt, s = line.split()
        spk.setdefault(s, []).append(utt)
    (data / "spk2utt").write_text("".join(f"{s} {' '.join(u)}\n" for s, u in sorted(spk.items())))
    (lang / "tokens.txt").write_text("<blk> 0\n" + "".join(f"{w} {i + 1}\n"
                                                          for i, w in enumerate(_WORDS)))
    (lang / "lexicon.txt").write_text("".join(f"{w} {w}\n" for w in _WORDS))
    (lang / "text.txt").write_text("\n".join(_TEXTS * 3) + "\n")
    (root / "fbank.toml").write_text(_FBANK)
    (root / "mfcc8k.toml").write_text(_MFCC_8K)
    (root / "train.toml").write_text(_TRAIN)


def chains() -> list[list[tuple[str, list[str]]]]:
    """The warm-up commands as chains (run in order within a chain, chains in parallel);
    the last chain needs what the first two made."""
    wavs = ["data/wav/u0.wav", "data/wav/u2.wav"]
    return [
        [("compute-features (fbank at 16 kHz)",
          ["compute-features", "data", "--config", "fbank.toml", "--out", "feats"]),
         ("compute-features (mfcc at 8 kHz)",
          ["compute-features", "data", "--config", "mfcc8k.toml", "--out", "feats8k"]),
         ("train (one step)", ["train", "train.toml"])],
        [("lm train", ["lm", "train", "--order", "3", "--text", "lang/text.txt",
                       "--output", "lang/G.arpa"]),
         ("graph build (word loop)", ["graph", "build", "--tokens", "lang/tokens.txt",
                                      "--lexicon", "lang/lexicon.txt", "--word-loop",
                                      "--out", "graph_loop"]),
         ("graph build (LM)", ["graph", "build", "--tokens", "lang/tokens.txt",
                               "--lexicon", "lang/lexicon.txt", "--lm", "lang/G.arpa",
                               "--out", "graph"])],
        [("decode", ["decode", "--graph", "graph", "--model", "model/final.mdl", "feats",
                     "--out", "decode"]),
         ("package", ["package", "--model", "model/final.mdl", "--features", "fbank.toml",
                      "--graph", "graph", "--out", "final"]),
         ("transcribe", ["transcribe", "--model-dir", "final", *wavs]),
         ("align", ["align", "--model-dir", "final", "--text", "yes no go", wavs[0]])],
    ]


def _run_chain(chain, root: Path, env: dict, log) -> list[dict]:
    import subprocess

    done = []
    for label, argv in chain:
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "asrkit", *argv], cwd=root, env=env,
                           capture_output=True, text=True)
        rec = {"command": label, "seconds": round(time.perf_counter() - t0, 2),
               "status": r.returncode}
        if r.returncode != 0:
            rec["error"] = (r.stderr.strip().splitlines() or ["?"])[-1][:300]
        done.append(rec)
        log(rec)
        if r.returncode != 0:
            break  # the rest of the chain needs what this one makes
    return done


def warm(jobs: int | None = None, log=None) -> dict:
    """Compile every kernel the usual commands run, into numba's cache (see the module
    docstring). ``jobs``: chains at once (None: 2 where there are 2+ cores). ``log(record)`` is
    called after each command with ``{"command", "seconds", "status"[, "error"]}``. Returns
    ``{"seconds", "cache", "commands", "ok"}`` and writes the stamp (:func:`stamp_path`)."""
    import tempfile
    import threading

    log = log or (lambda rec: None)
    jobs = max(1, min(2, jobs or os.cpu_count() or 1))
    env = {**os.environ, WARMUP_ENV: "0", "ASRKIT_NO_PROGRESS": "1"}
    t0 = time.perf_counter()
    results: list = []
    with tempfile.TemporaryDirectory(prefix="asrkit-warmup-") as tmp:
        root = Path(tmp)
        write_data(root)
        first, second, last = chains()
        if jobs > 1:
            out: dict = {}
            th = threading.Thread(target=lambda: out.setdefault(
                "r", _run_chain(second, root, env, log)))
            th.start()
            results += _run_chain(first, root, env, log)
            th.join()
            results += out.get("r", [])
        else:
            results += _run_chain(first, root, env, log) + _run_chain(second, root, env, log)
        results += _run_chain(last, root, env, log)
    ok = all(r["status"] == 0 for r in results) and len(results) == sum(map(len, chains()))
    summary = {"seconds": round(time.perf_counter() - t0, 1), "cache": str(cache_location()),
               "commands": results, "ok": ok, "finished": time.time()}
    stamp = stamp_path()
    if stamp is not None:
        try:
            stamp.parent.mkdir(parents=True, exist_ok=True)
            stamp.write_text(json.dumps(summary, indent=1))
        except OSError:
            pass
    return summary


def _abandoned(stamp: Path) -> bool:
    """Whether ``stamp`` records a background warm-up whose process is gone without finishing
    (killed, machine rebooted), so that another may start."""
    try:
        rec = json.loads(stamp.read_text())
    except (OSError, ValueError):
        return time.time() - stamp.stat().st_mtime > 60 if stamp.exists() else False
    if not rec.get("running"):
        return False
    pid = rec.get("pid")
    if pid is None:
        return time.time() - float(rec.get("started", 0)) > 60
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except (OSError, ValueError):
        return False
    return False


def start_background_warmup() -> bool:
    """Start ``asrkit warmup --background`` as a detached process at the lowest CPU priority,
    once per cache location and asrkit/numba version: only where no warm-up has finished or is
    running there (the stamp file is claimed atomically) and ``ASRKIT_WARMUP`` is not "0".
    Its log goes to ``<stamp>.log``. Returns whether one was started."""
    import subprocess

    if os.environ.get(WARMUP_ENV, "1").strip() in ("0", "no", "false", "off"):
        return False
    stamp = stamp_path()
    if stamp is None or (stamp.exists() and not _abandoned(stamp)):
        return False
    try:
        stamp.unlink(missing_ok=True)
        stamp.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(stamp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError:
        return False  # another process claimed it, or the folder is not writable
    with os.fdopen(fd, "w") as f:
        json.dump({"running": True, "pid": None, "started": time.time()}, f)
    try:
        with open(str(stamp) + ".log", "w") as logf:
            p = subprocess.Popen([sys.executable, "-m", "asrkit", "warmup", "--background"],
                                 stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                 start_new_session=True, env={**os.environ, WARMUP_ENV: "0"})
    except OSError:
        stamp.unlink(missing_ok=True)
        return False
    stamp.write_text(json.dumps({"running": True, "pid": p.pid, "started": time.time()}))
    return True
