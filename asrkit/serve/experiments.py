"""The experiments view of the page (``asrkit serve --exp-dir DIR``): runs under DIR with their
training curves (read as ``train_log.jsonl`` grows), WER tables and worst utterances (as
``asrkit report`` shows them), the network picture (``asrkit model plot``), and jobs: a
``train`` run from a config or a stage of the recipe's ``run.sh``, with their logs.

Routes (JSON; ``run`` is a run's folder relative to DIR)::

    GET  /api/runs                          runs: folders with train_log.jsonl, final.mdl or
                                            decode_*/
    GET  /api/runs/log?run=R&offset=N       train_log records after byte N (poll to follow)
    GET  /api/runs/report?run=R&worst=K     WER tables and the K worst utterances per set
    GET  /api/runs/network?run=R            final.mdl's op graph: SVG (graphviz) or dot text
    GET  /api/configs                       train configs (*.toml with [network]) and stages
    POST /api/jobs  {"kind": "train", "config": C, "out": O} | {"kind": "stage", "stage": N}
    GET  /api/jobs                          jobs of this server
    GET  /api/jobs/{id}/log?offset=N        a job's output after byte N, its state
    POST /api/jobs/{id}/stop                end a job (its whole process group)

Only these two commands are ever run, with arguments checked here, from DIR: every path must
resolve inside DIR (symbolic links followed), a stage must be one ``run.sh`` declares
(``run_stage N NAME``), and one job runs at a time (the machine's cores are the model's too).
Job output goes to ``DIR/serve_jobs/ID.log``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import glob
import json
import os
import re
import signal
import sys
import time
import tomllib

from aiohttp import web

from asrkit.serve.app import error

EXP_DIR = web.AppKey("exp_dir", object)
JOBS = web.AppKey("jobs", object)
SKIP_DIRS = {"data", "checkpoints", "serve_jobs", "__pycache__", "node_modules"}
MAX_DEPTH = 4           # how deep runs and configs are looked for under DIR
MAX_LOG_READ = 4 << 20  # bytes of a log sent per poll
STAGE = re.compile(r"^\s*run_stage\s+(\d+)\s+(\w+)", re.MULTILINE)


class Refused(ValueError):
    """A request the experiments view will not carry out (HTTP 400/404)."""


def inside(root: str, name: str, what: str) -> str:
    """``root/name`` when ``name`` is relative and resolves inside ``root``; else Refused."""
    if not isinstance(name, str) or not name or "\0" in name or os.path.isabs(name):
        raise Refused(f"{what}: expected a path inside the experiments folder, got {name!r}")
    real_root = os.path.realpath(root)
    real = os.path.realpath(os.path.join(root, name))
    if os.path.commonpath([real_root, real]) != real_root:
        raise Refused(f"{what}: {name!r} is outside the experiments folder")
    return real


def _walk(root: str):
    """(folder, subfolders, files) under ``root`` to MAX_DEPTH, hidden and data folders
    skipped."""
    base = os.path.realpath(root).count(os.sep)
    for folder, dirs, files in os.walk(os.path.realpath(root)):
        depth = folder.count(os.sep) - base
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS
                         and depth < MAX_DEPTH)
        yield folder, dirs, files


def _is_run(folder: str, dirs, files) -> bool:
    return "train_log.jsonl" in files or "final.mdl" in files or \
        any(d.startswith("decode_") for d in dirs)


def find_runs(root: str) -> list[dict]:
    """Runs under ``root``: name (relative path), what they hold, last change (epoch s)."""
    real_root = os.path.realpath(root)
    runs = []
    for folder, dirs, files in _walk(root):
        if not _is_run(folder, dirs, files):
            continue
        log = os.path.join(folder, "train_log.jsonl")
        paths = [os.path.join(folder, f) for f in ("train_log.jsonl", "final.mdl")
                 if f in files]
        runs.append({"run": os.path.relpath(folder, real_root),
                     "train_log": os.path.exists(log), "model": "final.mdl" in files,
                     "decodes": sorted(d for d in dirs if d.startswith("decode_")),
                     "modified": max([os.path.getmtime(p) for p in paths] or
                                     [os.path.getmtime(folder)])})
    return sorted(runs, key=lambda r: -r["modified"])


def run_dir(root: str, name: str) -> str:
    """The folder of run ``name``; Refused unless it is a run inside ``root``."""
    folder = inside(root, name, "run")
    if not os.path.isdir(folder):
        raise Refused(f"run: {name!r}: no such folder")
    entries = os.listdir(folder)
    dirs = [e for e in entries if os.path.isdir(os.path.join(folder, e))]
    if not _is_run(folder, dirs, entries):
        raise Refused(f"run: {name!r} holds no train_log.jsonl, final.mdl or decode_*")
    return folder


def read_log(path: str, offset: int) -> dict:
    """Records of ``train_log.jsonl`` from byte ``offset`` to its last complete line.

    Returns ``{"records": [...], "offset": next offset, "errors": ["file:line: why"],
    "reset": bool}``; ``reset`` when the file is shorter than ``offset`` (a new run replaced
    it): the records are then those from its start. A record is checked as ``asrkit report``
    checks it (known keys hold numbers); a bad line is an error, never the end of the view.
    """
    from asrkit.cli.report import NUMBER_KEYS

    if not os.path.exists(path):
        return {"records": [], "offset": 0, "errors": [], "reset": offset > 0}
    size = os.path.getsize(path)
    reset = offset > size
    if reset:
        offset = 0
    with open(path, "rb") as f:
        first_line = f.read(offset).count(b"\n") + 1
        data = f.read(min(size - offset, MAX_LOG_READ))
    end = data.rfind(b"\n") + 1  # a torn last line waits for its newline
    records, errors = [], []
    for i, raw in enumerate(data[:end].split(b"\n")[:-1]):
        where = f"{os.path.basename(path)}:{first_line + i}"
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
            errors.append(f"{where}: not a JSON record ({str(e)[:80]})")
            continue
        bad = [k for k in NUMBER_KEYS if k in rec and rec[k] is not None and (
            isinstance(rec[k], bool) or not isinstance(rec[k], (int, float)))] \
            if isinstance(rec, dict) else ["(not an object)"]
        if bad:
            errors.append(f"{where}: '{bad[0]}' must be a number")
            continue
        records.append(rec)
    return {"records": records, "offset": offset + end, "errors": errors, "reset": reset}


def _read_ref(root: str, run: str, decode: str) -> str | None:
    """The reference text file a decode folder names in ``ref_text`` (relative to the
    experiments folder or the run), if it exists inside the experiments folder."""
    ref_file = os.path.join(decode, "ref_text")
    if not os.path.exists(ref_file):
        return None
    with open(ref_file, encoding="utf-8") as f:
        name = f.read().strip()
    for base in (root, run):
        try:
            path = inside(base, name, "ref_text") if not os.path.isabs(name) else \
                inside(root, os.path.relpath(name, root), "ref_text")
        except Refused:
            continue
        if os.path.isfile(path):
            return path
    return None


def scores(root: str, run: str, worst: int) -> dict:
    """Per decode folder: the WER table (``ScoreReport.as_dict`` without the utterances) and
    the ``worst`` worst utterances, scored against the reference when one is found (as
    ``asrkit report`` does), else read from the decode's own score.json and hyp.txt."""
    from asrkit.decoders.scoring import read_text_table, score_texts

    out = {}
    for dec in sorted(glob.glob(os.path.join(run, "decode_*"))):
        name = os.path.basename(dec)
        hyp_path = os.path.join(dec, "hyp.txt")
        try:
            ref_path = _read_ref(root, run, dec)
            if ref_path and os.path.exists(hyp_path):
                rep = score_texts(read_text_table(ref_path), read_text_table(hyp_path))
                table = rep.as_dict()
                worst_text = rep.report(worst=worst)
            elif os.path.exists(os.path.join(dec, "score.json")):
                with open(os.path.join(dec, "score.json"), encoding="utf-8") as f:
                    table = json.load(f)
                hyps = read_text_table(hyp_path) if os.path.exists(hyp_path) else {}
                utts = sorted(table.get("utterances", {}).items(),
                              key=lambda kv: (-kv[1].get("errors", 0), kv[0]))[:worst]
                worst_text = "\n".join(
                    f"id: {u} errors {c.get('errors')} (sub {c.get('sub')}, del "
                    f"{c.get('del')}, ins {c.get('ins')}) of {c.get('num_ref')}\n"
                    f"HYP: {hyps.get(u, '')}\n" for u, c in utts)
            else:
                continue
        except (OSError, ValueError, UnicodeDecodeError) as e:
            out[name] = {"error": str(e)}
            continue
        table = {k: v for k, v in table.items() if k not in ("utterances", "missing_hyps")}
        out[name] = {"table": table, "worst": worst_text}
    return out


_NETWORK_CACHE: dict[str, tuple[float, dict]] = {}


def network(run: str) -> dict:
    """``{"svg": ...}`` (graphviz installed) or ``{"dot": ...}`` of the run's final.mdl, as
    ``asrkit model plot`` draws it; ``{}`` when the run has no model yet."""
    from asrkit.cli.model import model_graph_dot
    from asrkit.graph.dot import render
    from asrkit.models import load

    path = os.path.join(run, "final.mdl")
    if not os.path.exists(path):
        return {}
    mtime = os.path.getmtime(path)
    cached = _NETWORK_CACHE.get(path)
    if cached and cached[0] == mtime:
        return cached[1]
    model = load(path)
    dot = model_graph_dot(model, title=os.path.basename(run))
    svg = render(dot, "svg")
    out = {"svg": svg.decode("utf-8", "replace")} if svg is not None else {"dot": dot}
    out["parameters"] = int(sum(v.size for v in model.state_dict().values()))
    _NETWORK_CACHE[path] = (mtime, out)
    return out


def train_configs(root: str) -> list[str]:
    """TOML files under ``root`` with a ``[network]`` table (``asrkit train`` configs)."""
    out = []
    for folder, _, files in _walk(root):
        for f in sorted(files):
            if not f.endswith(".toml"):
                continue
            path = os.path.join(folder, f)
            try:
                with open(path, "rb") as fh:
                    if "network" in tomllib.load(fh):
                        out.append(os.path.relpath(path, os.path.realpath(root)))
            except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
                continue
    return out


def recipe_stages(root: str) -> list[dict]:
    """Stages ``run.sh`` in ``root`` declares (``run_stage N NAME``)."""
    path = os.path.join(root, "run.sh")
    if not os.path.isfile(path):
        return []
    with open(path, encoding="utf-8", errors="replace") as f:
        return [{"stage": int(n), "name": name} for n, name in STAGE.findall(f.read())]


@dataclasses.dataclass
class Job:
    """A command started from the page."""

    id: int
    kind: str
    argv: list[str]
    log: str
    started: float
    process: object = None
    returncode: int | None = None
    waiter: object = None  # the task that records the return code

    def as_dict(self) -> dict:
        """JSON-ready state."""
        return {"id": self.id, "kind": self.kind, "command": " ".join(self.argv),
                "started": self.started, "running": self.returncode is None,
                "returncode": self.returncode}


class Jobs:
    """The jobs of one server; one runs at a time."""

    def __init__(self, root: str):
        self.root = os.path.realpath(root)
        self.jobs: dict[int, Job] = {}

    def running(self) -> Job | None:
        """The job that is still running, if any."""
        return next((j for j in self.jobs.values() if j.returncode is None), None)

    def command(self, request: dict) -> tuple[str, list[str]]:
        """(kind, argv) for a job request; Refused naming what is wrong."""
        if not isinstance(request, dict):
            raise Refused("expected a JSON object")
        kind = request.get("kind")
        if kind == "train":
            config = inside(self.root, request.get("config"), "config")
            if not config.endswith(".toml") or not os.path.isfile(config):
                raise Refused(f"config: {request.get('config')!r} is not a .toml file")
            out_name = request.get("out") or os.path.join(
                "exp", f"{os.path.splitext(os.path.basename(config))[0]}-"
                       f"{time.strftime('%Y%m%d-%H%M%S')}")
            out = inside(self.root, out_name, "out")
            if os.path.exists(out) and not os.path.isdir(out):
                raise Refused(f"out: {out_name!r} exists and is not a folder")
            return kind, [sys.executable, "-m", "asrkit", "train", config, "--out", out]
        if kind == "stage":
            stage = request.get("stage")
            known = {s["stage"] for s in recipe_stages(self.root)}
            if not known:
                raise Refused("the experiments folder has no run.sh with stages")
            if isinstance(stage, bool) or not isinstance(stage, int) or stage not in known:
                raise Refused(f"stage: expected one of {sorted(known)}, got {stage!r}")
            return kind, ["bash", os.path.join(self.root, "run.sh"), "--stage", str(stage),
                          "--stop-stage", str(stage)]
        raise Refused(f"kind: expected 'train' or 'stage', got {kind!r}")

    async def start(self, request: dict) -> Job:
        """Start the job a request asks for (Refused when one is running or it is bad)."""
        kind, argv = self.command(request)
        if self.running() is not None:
            raise Refused(f"job {self.running().id} is still running: one job at a time")
        job_id = max(self.jobs, default=0) + 1
        folder = os.path.join(self.root, "serve_jobs")
        os.makedirs(folder, exist_ok=True)
        log_path = os.path.join(folder, f"{job_id}.log")
        env = dict(os.environ)
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        env["PYTHONUNBUFFERED"] = "1"
        with open(log_path, "wb") as out:
            out.write(f"$ {' '.join(argv)}\n".encode())
            out.flush()
            process = await asyncio.create_subprocess_exec(
                *argv, cwd=self.root, stdin=asyncio.subprocess.DEVNULL, stdout=out,
                stderr=asyncio.subprocess.STDOUT, env=env, start_new_session=True)
        job = Job(job_id, kind, argv, log_path, time.time(), process)
        self.jobs[job_id] = job

        async def wait():
            job.returncode = await process.wait()

        job.waiter = asyncio.create_task(wait())
        return job

    def stop(self, job: Job) -> None:
        """End a running job and everything it started (its process group)."""
        if job.returncode is None and job.process is not None:
            try:
                os.killpg(job.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def stop_all(self) -> None:
        """End every running job (the server is stopping)."""
        for job in self.jobs.values():
            self.stop(job)


def _read_from(path: str, offset: int) -> tuple[str, int]:
    size = os.path.getsize(path)
    offset = 0 if offset > size else offset
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(min(size - offset, MAX_LOG_READ))
    return data.decode("utf-8", "replace"), offset + len(data)


def _offset(request: web.Request) -> int:
    raw = request.query.get("offset", "0")
    if not raw.isdigit():
        raise Refused(f"offset: expected a byte offset, got {raw!r}")
    return int(raw)


def add_routes(app: web.Application, exp_dir: str | None) -> None:
    """Add the /api routes; without ``exp_dir`` each answers 404 with the reason."""
    if exp_dir is None:
        async def off(request):
            return error(404, "the experiments view is off: start asrkit serve with --exp-dir")

        app.router.add_route("*", "/api/{tail:.*}", off)
        return
    root = os.path.realpath(exp_dir)
    app[EXP_DIR] = root
    jobs = app[JOBS] = Jobs(root)

    def handler(fn):
        async def wrapped(request):
            try:
                return await fn(request)
            except Refused as e:
                return error(404 if "no such" in str(e) else 400, str(e))
            except (OSError, ValueError) as e:
                return error(500, str(e))
        return wrapped

    async def runs(request):
        return web.json_response({"root": root, "runs": await asyncio.to_thread(
            find_runs, root)})

    async def log(request):
        folder = run_dir(root, request.query.get("run", ""))
        return web.json_response(read_log(os.path.join(folder, "train_log.jsonl"),
                                          _offset(request)))

    async def report(request):
        folder = run_dir(root, request.query.get("run", ""))
        raw = request.query.get("worst", "10")
        if not raw.isdigit() or int(raw) > 1000:
            raise Refused(f"worst: expected 0 to 1000, got {raw!r}")
        return web.json_response(await asyncio.to_thread(scores, root, folder, int(raw)))

    async def net(request):
        folder = run_dir(root, request.query.get("run", ""))
        return web.json_response(await asyncio.to_thread(network, folder))

    async def configs(request):
        return web.json_response({"configs": await asyncio.to_thread(train_configs, root),
                                  "stages": recipe_stages(root)})

    async def start(request):
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise Refused("the body must be a JSON object") from None
        job = await jobs.start(body)
        return web.json_response(job.as_dict())

    async def job_list(request):
        return web.json_response([j.as_dict() for j in jobs.jobs.values()])

    def job_of(request) -> Job:
        raw = request.match_info["id"]
        job = jobs.jobs.get(int(raw)) if raw.isdigit() else None
        if job is None:
            raise Refused(f"job {raw!r}: no such job")
        return job

    async def job_log(request):
        job = job_of(request)
        text, offset = _read_from(job.log, _offset(request))
        return web.json_response({**job.as_dict(), "text": text, "offset": offset})

    async def job_stop(request):
        job = job_of(request)
        jobs.stop(job)
        return web.json_response(job.as_dict())

    async def cleanup(app):
        jobs.stop_all()

    app.on_cleanup.append(cleanup)
    for method, path, fn in (("GET", "/api/runs", runs), ("GET", "/api/runs/log", log),
                             ("GET", "/api/runs/report", report),
                             ("GET", "/api/runs/network", net),
                             ("GET", "/api/configs", configs), ("POST", "/api/jobs", start),
                             ("GET", "/api/jobs", job_list),
                             ("GET", "/api/jobs/{id}/log", job_log),
                             ("POST", "/api/jobs/{id}/stop", job_stop)):
        app.router.add_route(method, path, handler(fn))
