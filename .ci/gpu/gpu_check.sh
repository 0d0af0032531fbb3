#!/usr/bin/env bash
# One prepared GPU check for a machine lent with an NVIDIA GPU (run from anywhere in the repo).
#
#   OUT=/some/dir .ci/gpu/gpu_check.sh            the real check (NUMBA_ENABLE_CUDASIM unset)
#   .ci/gpu/gpu_check.sh --dry-run                print the plan and write the JSON; run nothing
#   .ci/gpu/gpu_check.sh --sim                    rehearsal without a GPU: numba's simulator, tiny
#                                               bench sizes, the existing .venv (no install)
#
# Steps, each under `timeout` and each run even when an earlier one failed:
#   env    nvidia-smi, CPU and OS                                   -> $OUT/env.log
#   setup  a venv: offline first (the image's numpy/numba/numba-cuda/torch/cupy/pytest through
#          --system-site-packages plus a .pth to the image's site-packages, asrkit itself with
#          --no-deps; wheels in .whl/ if carried), else online `pip install -e '.[dev,cuda]'`
#                                                                   -> $OUT/setup.log
#   probe  .ci/gpu/gpu_probe.py: versions, the GPU numba sees, GEMM backend, smoke kernels
#                                                                   -> $OUT/probe.log
#   tests  pytest -m cuda on the files holding CUDA tests, on the real GPU -> $OUT/tests.log
#   bench  .ci/gpu/gpu_bench.py: LSTM, CTC and a BLSTM-CTC graph step, cuda vs cpu vs torch
#                                                -> $OUT/bench.log, $OUT/bench.json
# and $OUT/gpu_check.json summarises them (rc, seconds, pytest counts, the bench results).
# The whole run stays within GPU_CHECK_BUDGET_S seconds (default 470, about 8 minutes): give the
# command a timeout of about 540 s. GPU_CHECK_PYTEST_ARGS adds pytest arguments (e.g. -k ...).
# The lent H200 image is offline and lacks kaldi-io (the training test's reader); carry it:
#   python3 -m pip download --no-deps -d .whl kaldi-io==0.9.8     (.whl/ is git-ignored)
# then run `.ci/gpu/gpu_check.sh` there with `.whl` carried.
set -u
cd "$(dirname "$0")/../.." || exit 2
MODE=real
case "${1:-}" in
    --dry-run) MODE=dry ;;
    --sim) MODE=sim ;;
    "") ;;
    *) echo "usage: .ci/gpu/gpu_check.sh [--dry-run | --sim]" >&2; exit 2 ;;
esac
OUT=${OUT:-$PWD/gpu_check_out}
mkdir -p "$OUT"
BUDGET=${GPU_CHECK_BUDGET_S:-470}
START=$(date +%s)
VENV=${GPU_CHECK_VENV:-/tmp/asrkit-gpu-venv}
STEPS=$(mktemp)  # one line per step: name rc seconds (kept out of $OUT: few files come back)

if [ "$MODE" = sim ]; then
    export NUMBA_ENABLE_CUDASIM=1
    PY=${GPU_CHECK_PYTHON:-$PWD/.venv/bin/python}
    BENCH_ARGS="--sizes tiny --repeat 1"
else
    export NUMBA_ENABLE_CUDASIM=0  # tests/conftest.py would otherwise default to the simulator
    PY=$VENV/bin/python
    BENCH_ARGS="--sizes full --repeat 5"
fi
export PYTHONUNBUFFERED=1 ASRKIT_NO_PROGRESS=1
TEST_FILES=$(grep -rlE "pytest\.mark\.cuda|pytestmark = .*cuda" tests --include='*.py' | sort | tr '\n' ' ')

# name, limit in seconds, function to run; the limit shrinks to what the budget has left
step() {
    local name=$1 limit=$2 cmd=$3 left rc t0
    left=$(( BUDGET - ($(date +%s) - START) - 15 ))  # keep time for the summary
    (( left < limit )) && limit=$left
    if [ "$MODE" = dry ]; then
        printf '== %s (limit %ss):\n' "$name" "$limit"
        declare -f "$cmd" | tail -n +3 | head -n -1
        echo "$name dry 0" >> "$STEPS"
        return
    fi
    if (( limit < 5 )); then
        echo "$name skipped 0" >> "$STEPS"
        echo "== $name: skipped, the time budget is spent" | tee -a "$OUT/$name.log"
        return
    fi
    echo "== $name (limit ${limit}s)"
    t0=$(date +%s)
    timeout -k 10 "$limit" bash -c "$cmd" > "$OUT/$name.log" 2>&1  # cmd: an exported function
    rc=$?
    echo "$name $rc $(( $(date +%s) - t0 ))" >> "$STEPS"
    echo "   rc=$rc ($(( $(date +%s) - t0 ))s); last lines of $OUT/$name.log:"
    tail -n 4 "$OUT/$name.log" | sed 's/^/   | /'
}

do_env() {
    nvidia-smi
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
    nproc; free -g; uname -a; command -v python3; python3 --version
}

# The GPU machine may be offline: the image's python3 (itself possibly a venv) already holds
# numpy, numba, numba-cuda, torch, cupy and pytest, so asrkit goes in with --no-deps on top.
do_setup() {
    set -x
    local pth
    if python3 -m venv --system-site-packages "$VENV"; then
        # a venv made from a venv does not see that venv's packages: list them in a .pth
        pth=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
        python3 -c 'import site; print(*site.getsitepackages(), sep="\n")' > "$pth/_image.pth"
        PY=$VENV/bin/python
    else
        PY=python3  # no venv module: install into the (throw-away) image environment
    fi
    echo "$PY" > "$PYFILE"
    if ls .whl/*.whl >/dev/null 2>&1; then  # carried wheels, e.g. kaldi-io for the reader
        "$PY" -m pip install -q --no-index --no-deps --no-compile .whl/*.whl
    fi
    "$PY" -m pip install -q --no-index --no-deps --no-build-isolation -e . \
        || "$PY" -m pip install -q --timeout 20 --retries 1 -e '.[dev,cuda]' || return 1
    "$PY" -c 'import asrkit, numba.cuda; print("asrkit from", asrkit.__file__)'
}

do_probe() { "$(cat "$PYFILE")" .ci/gpu/gpu_probe.py; }

do_tests() {
    local py
    py=$(cat "$PYFILE")
    eval "set -- $TEST_FILES ${GPU_CHECK_PYTEST_ARGS:-}"  # the extra arguments may hold quotes
    "$py" -m pytest -q -m cuda -p no:cacheprovider --runslow --durations=10 "$@"
}

do_bench() { "$(cat "$PYFILE")" .ci/gpu/gpu_bench.py $BENCH_ARGS --json "$OUT/bench.json"; }

PYFILE=$(mktemp)
echo "$PY" > "$PYFILE"
export OUT VENV PYFILE BENCH_ARGS TEST_FILES
export -f do_env do_setup do_probe do_tests do_bench
step env 30 do_env
[ "$MODE" != sim ] && step setup 200 do_setup
step probe 90 do_probe
step tests 260 do_tests
step bench 150 do_bench

# the summary (plain python3: works whatever happened to the venv)
python3 - "$STEPS" "$OUT" "$MODE" "$START" <<'EOF'
import json, os, re, sys, time
steps_file, out, mode, start = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
res = {"mode": mode, "total_s": round(time.time() - start, 1), "steps": {}}
for line in open(steps_file):
    name, rc, secs = line.split()
    res["steps"][name] = {"rc": rc if not rc.lstrip("-").isdigit() else int(rc),
                          "seconds": int(secs), "log": f"{name}.log"}
def read(name):
    try:
        with open(os.path.join(out, name)) as f:
            return f.read()
    except OSError:
        return ""
tests = read("tests.log")
m = re.findall(r"^=* ?((?:\d+ \w+,? ?)+) in [\d.]+s", tests, re.M)
if m:
    res["tests"] = {k: int(v) for v, k in re.findall(r"(\d+) (\w+)", m[-1])}
    res["tests"]["failures"] = re.findall(r"^(?:FAILED|ERROR) (\S+)", tests, re.M)[:40]
probe = read("probe.log")
try:
    res["probe"] = json.loads(probe[probe.index("{"):])
except ValueError:
    pass
try:
    res["bench"] = json.loads(read("bench.json"))
except ValueError:
    pass
res["ok"] = all(s["rc"] in (0, "dry") for s in res["steps"].values())
with open(os.path.join(out, "gpu_check.json"), "w") as f:
    json.dump(res, f, indent=1)
print(json.dumps({k: res[k] for k in ("mode", "total_s", "ok", "steps")}, indent=1))
print("tests:", res.get("tests"))
EOF
rm -f "$STEPS" "$PYFILE"
