"""Helpers of the server tests: the words of the tone recordings, an experiments folder with a
run, and running a coroutine (the fixtures are in conftest.py)."""

from __future__ import annotations

import asyncio
import json
import os

from tests.recognizer.tones import RATE

WORDS = ["one", "two", "three"]


def run(coro):
    """Run a coroutine to its end (the tests are plain functions)."""
    return asyncio.run(coro)


def make_experiments(root: str, model_folder: str) -> str:
    """An experiments folder: a run exp/a with a train_log, final.mdl and a scored decode
    folder, a train config, and a run.sh with two stages that only print."""
    run_dir = os.path.join(root, "exp", "a")
    os.makedirs(os.path.join(run_dir, "decode_test"))
    with open(os.path.join(run_dir, "train_log.jsonl"), "w") as f:
        for step in range(1, 4):
            f.write(json.dumps({"step": 10 * step, "kind": "train", "epoch": 1,
                                "loss": 1.0 / step, "lr": 0.001 * step}) + "\n")
        f.write(json.dumps({"step": 30, "kind": "cv", "epoch": 1, "loss": 0.5,
                            "cv_error": 0.25, "lr": 0.003}) + "\n")
    os.symlink(os.path.join(os.path.abspath(model_folder), "model.mdl"),
               os.path.join(run_dir, "final.mdl"))
    os.makedirs(os.path.join(root, "data", "test"))
    with open(os.path.join(root, "data", "test", "text"), "w") as f:
        f.write("u1 one two\nu2 three\nu3 two two\n")
    with open(os.path.join(run_dir, "decode_test", "hyp.txt"), "w") as f:
        f.write("u1 one two\nu2 two\nu3 two\n")
    with open(os.path.join(run_dir, "decode_test", "ref_text"), "w") as f:
        f.write("data/test/text\n")
    os.makedirs(os.path.join(root, "conf"))
    with open(os.path.join(root, "conf", "train.toml"), "w") as f:
        f.write('[network]\nlayers = [{type = "dense", dim = 8}]\n')
    with open(os.path.join(root, "conf", "fbank.toml"), "w") as f:
        f.write('[features]\ntype = "fbank"\n')
    with open(os.path.join(root, "run.sh"), "w") as f:
        f.write('#!/usr/bin/env bash\nstage=0; stop_stage=100\n'
                'while [ $# -gt 0 ]; do case "$1" in --stage) stage=$2; shift 2 ;; '
                '--stop-stage) stop_stage=$2; shift 2 ;; *) exit 2 ;; esac; done\n'
                'run_stage() { [ "$1" -ge "$stage" ] && [ "$1" -le "$stop_stage" ] && '
                'echo "stage $1 $2 ran in $(pwd)"; return 0; }\n'
                'run_stage 0 hello\nrun_stage 1 world\n')
    return root


__all__ = ["RATE", "WORDS", "make_experiments", "run"]
