"""The experiments view's API: runs, a growing train_log read from an offset, WER tables
against jiwer, the network picture, and jobs confined to the experiments folder."""

import json
import os
import time

import pytest

from tests.serve.fixtures import run

aiohttp = pytest.importorskip("aiohttp")

from asrkit.serve.experiments import Jobs, Refused, read_log  # noqa: E402


async def _call(method, url, **kw):
    async with aiohttp.ClientSession() as s, s.request(method, url, **kw) as r:
        return r.status, await r.json()


def get(server, path):
    return run(_call("GET", server.url + path))


def post(server, path, body):
    return run(_call("POST", server.url + path, json=body))


def test_runs_and_a_growing_log(server):
    status, body = get(server, "/api/runs")
    assert status == 200 and [r["run"] for r in body["runs"]] == ["exp/a"]
    assert body["runs"][0]["train_log"] and body["runs"][0]["decodes"] == ["decode_test"]
    status, log = get(server, "/api/runs/log?run=exp/a&offset=0")
    assert status == 200 and len(log["records"]) == 4 and not log["errors"]
    assert [r["step"] for r in log["records"]] == [10, 20, 30, 30]
    path = os.path.join(server.exp_dir, "exp", "a", "train_log.jsonl")
    assert log["offset"] == os.path.getsize(path)
    with open(path, "a") as f:  # a new record, a bad one, and a torn last line
        f.write(json.dumps({"step": 40, "kind": "train", "loss": 0.2, "lr": 0.004}) + "\n")
        f.write('{"step": "forty"}\n{"step": 50, "kind": "tr')
    status, more = get(server, f"/api/runs/log?run=exp/a&offset={log['offset']}")
    assert [r["step"] for r in more["records"]] == [40]
    assert more["errors"] == ["train_log.jsonl:6: 'step' must be a number"]
    with open(path, "a") as f:
        f.write('ain", "loss": 0.1}\n')
    status, last = get(server, f"/api/runs/log?run=exp/a&offset={more['offset']}")
    assert [r["step"] for r in last["records"]] == [50] and not last["reset"]
    assert last["offset"] == os.path.getsize(path)
    status, again = get(server, f"/api/runs/log?run=exp/a&offset={last['offset'] + 999}")
    assert again["reset"] and len(again["records"]) == 6  # a shorter file: from its start


def test_read_log_of_a_missing_file(tmp_path):
    assert read_log(str(tmp_path / "none.jsonl"), 0) == {"records": [], "offset": 0,
                                                          "errors": [], "reset": False}


def test_wer_tables_match_jiwer(server):
    jiwer = pytest.importorskip("jiwer")
    status, scores = get(server, "/api/runs/report?run=exp/a&worst=2")
    assert status == 200 and list(scores) == ["decode_test"]
    table = scores["decode_test"]["table"]
    ref = ["one two", "three", "two two"]
    hyp = ["one two", "two", "two"]
    out = jiwer.process_words(ref, hyp)
    assert table["error_rate"] == pytest.approx(100 * out.wer)
    assert (table["substitutions"], table["deletions"], table["insertions"]) == (
        out.substitutions, out.deletions, out.insertions)
    worst = scores["decode_test"]["worst"]
    assert worst.index("id: u2") < worst.index("id: u3") and "id: u1" not in worst


def test_network_picture(server):
    status, net = get(server, "/api/runs/network?run=exp/a")
    assert status == 200
    assert net["parameters"] == 40 * 40 + 40 + 40 * 4 + 4
    picture = net.get("svg") or net["dot"]
    assert "output" in picture or "Dense" in picture or "dense" in picture


@pytest.mark.parametrize("path,status,message", [
    ("/api/runs/log?run=../..", 400, "outside the experiments folder"),
    ("/api/runs/log?run=/etc", 400, "expected a path inside"),
    ("/api/runs/log?run=conf", 400, "holds no train_log.jsonl"),
    ("/api/runs/log?run=exp/zz", 404, "no such folder"),
    ("/api/runs/log?run=exp/a&offset=-3", 400, "offset: expected a byte offset"),
    ("/api/runs/report?run=exp/a&worst=many", 400, "worst: expected 0 to 1000"),
    ("/api/jobs/99/log", 404, "no such job"),
])
def test_bad_requests_name_the_problem(server, path, status, message):
    got, body = get(server, path)
    assert got == status and message in body["error"]


def test_configs_stages_and_a_stage_job(server):
    status, c = get(server, "/api/configs")
    assert c == {"configs": ["conf/train.toml"],
                 "stages": [{"stage": 0, "name": "hello"}, {"stage": 1, "name": "world"}]}
    for body, message in (({"kind": "rm", "args": ["-rf", "/"]}, "kind: expected 'train' or"),
                          ({"kind": "stage", "stage": 7}, "stage: expected one of [0, 1]"),
                          ({"kind": "stage", "stage": "1; rm -rf /"}, "stage: expected one"),
                          ({"kind": "train", "config": "../x.toml"}, "outside"),
                          ({"kind": "train", "config": "conf/train.toml", "out": "/tmp/x"},
                           "expected a path inside"),
                          ({"kind": "train", "config": "run.sh"}, "is not a .toml file")):
        status, err = post(server, "/api/jobs", body)
        assert status == 400 and message in err["error"], (body, err)
    status, job = post(server, "/api/jobs", {"kind": "stage", "stage": 1})
    assert status == 200 and job["running"] and job["command"].endswith(
        "--stage 1 --stop-stage 1")
    deadline = time.monotonic() + 60
    text, offset = "", 0
    while True:
        status, state = get(server, f"/api/jobs/{job['id']}/log?offset={offset}")
        text += state["text"]
        offset = state["offset"]
        if not state["running"] or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert state["returncode"] == 0
    assert f"stage 1 world ran in {os.path.realpath(server.exp_dir)}" in text
    assert "stage 0" not in text
    status, jobs = get(server, "/api/jobs")
    assert [j["id"] for j in jobs] == [job["id"]]


def test_train_jobs_run_asrkit_train_inside_the_folder(tmp_path):
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "t.toml").write_text("[network]\n")
    jobs = Jobs(str(tmp_path))
    kind, argv = jobs.command({"kind": "train", "config": "conf/t.toml", "out": "exp/new"})
    assert kind == "train" and argv[1:4] == ["-m", "asrkit", "train"]
    assert argv[4:] == [str(tmp_path / "conf" / "t.toml"), "--out", str(tmp_path / "exp/new")]
    os.symlink("/etc", tmp_path / "link")
    with pytest.raises(Refused, match="outside"):
        jobs.command({"kind": "train", "config": "link/x.toml"})
    with pytest.raises(Refused, match="no run.sh"):
        jobs.command({"kind": "stage", "stage": 0})


def test_the_view_is_off_without_an_experiments_folder(tone_folder):
    from asrkit.recognizer import Recognizer
    from asrkit.serve import BackgroundServer, ServeOptions, make_app

    app = make_app(Recognizer.from_dir(tone_folder), ServeOptions(workers=1), warm_up=False)
    with BackgroundServer(app) as s:
        status, body = run(_call("GET", s.url + "/api/runs"))
        assert status == 404 and "--exp-dir" in body["error"]
        status, body = run(_call("POST", s.url + "/api/jobs", json={"kind": "stage"}))
        assert status == 404
