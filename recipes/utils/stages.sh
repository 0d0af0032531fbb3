# Shared by the recipes' run.sh (source it after `cd` into the recipe and setting stage and
# stop_stage): numbered stages that are logged, timed and skipped outside [stage, stop_stage],
# and `log`, which records each command in exp/commands.txt before running it.
mkdir -p exp/log

run_stage() {  # run_stage N NAME CMD...: run CMD if N is in [stage, stop_stage], logged and timed
  local n=$1 name=$2; shift 2
  if [ "$n" -lt "$stage" ] || [ "$n" -gt "$stop_stage" ]; then return 0; fi
  echo "stage $n: $name"
  local t0=$SECONDS rc
  # the stage runs in a subshell with errexit on: its first failing command ends it (inside
  # `if !` or `||`, bash would switch errexit off for the whole stage function)
  set +e
  (set -e; "$@") > "exp/log/stage$n.log" 2>&1
  rc=$?
  set -e
  if [ "$rc" -ne 0 ]; then
    echo "stage $n ($name) failed; the end of exp/log/stage$n.log:" >&2
    tail -n 30 "exp/log/stage$n.log" >&2
    exit 1
  fi
  echo "stage $n: $name done in $((SECONDS - t0)) s"
}

log() { echo "$*" >> exp/commands.txt; "$@"; }
