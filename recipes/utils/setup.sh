# The setup every recipe's run.sh shares. After `cd` into the recipe and setting its option
# defaults (one variable per option), a run.sh sources it with its arguments:
#
#   . ../utils/setup.sh "$@"
#
# Options (Kaldi's parse_options.sh habit): `--foo-bar V` sets the variable foo_bar the run.sh
# defined, `--no-foo` empties foo, a name in $flag_options (e.g. resume) is a flag that sets it to
# 1; -h/--help prints the run.sh's header comment; anything else is an error. Every recipe has
#   --stage N --stop-stage M   the stages to run (default all)
#   --nj N                     parallel jobs for data, features and decoding (default 1)
#   --mpi N                    training ranks, data-parallel under mpiexec (default 1)
#   --wip-range LO:HI:STEP     word insertion penalties tuned on dev (default -4:0:1)
# (`--jobs N`, the old spelling of --nj in every recipe, is still read in this release. In the
# sentences and LibriSpeech recipes --nj used to be the training ranks: that is --mpi now.)
#
# Then it checks that `asrkit` is on PATH, sets $bindir (its folder) and $python (the python
# next to it), appends the command line to exp/commands.txt, and defines run_stage, run_stages,
# log, log_mpi, need_graph, decode_tuned, model_configs, is_transducer, transcribe_data,
# package_tuned_bonus, average_last and utt2voice.

: "${stage:=0}" "${stop_stage:=100}" "${nj:=1}" "${mpi:=1}" "${wip_range:=-4:0:1}"
_cmdline="# $(date -u +%FT%TZ) $0 $*"
while [ $# -gt 0 ]; do
  _opt=${1#--}
  _var=${_opt//-/_}
  case "$1" in
    -h|--help) awk 'NR > 1 { if (!/^#/) exit; print }' "$(basename "$0")"; exit 0 ;;
    --jobs) _var=nj; echo "run.sh: --jobs is spelt --nj now (--jobs goes in the next release)" >&2 ;;
  esac
  if [[ $1 == --* && $_var =~ ^[a-z][a-z0-9_]*$ ]] && declare -p "$_var" >/dev/null 2>&1; then
    if [[ " ${flag_options:-} " == *" $_var "* ]]; then
      printf -v "$_var" 1; shift
    elif [ $# -ge 2 ]; then
      printf -v "$_var" %s "$2"; shift 2
    else
      echo "run.sh: $1 needs a value" >&2; exit 2
    fi
  elif [[ $1 == --no-* ]] && declare -p "${_var#no_}" >/dev/null 2>&1; then
    printf -v "${_var#no_}" ''; shift
  else
    echo "run.sh: unknown option $1 (run.sh --help lists them)" >&2; exit 2
  fi
done
unset _opt _var

command -v asrkit >/dev/null || { echo "run.sh: 'asrkit' is not on PATH (activate the venv)" >&2; exit 1; }
bindir=$(dirname "$(command -v asrkit)")
python=$bindir/python
[ -x "$python" ] || python=python3
mkdir -p exp/log
echo "$_cmdline" >> exp/commands.txt
unset _cmdline

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

_stage_names=()
run_stages() {  # run_stages NAME...: stage N is the Nth NAME (from 0), its function stage_NAME
  local n=0 name
  _stage_names=("$@")
  for name in "$@"; do run_stage "$n" "$name" "stage_$name"; n=$((n + 1)); done
}

log() { echo "$*" >> exp/commands.txt; "$@"; }  # log CMD...: record CMD in exp/commands.txt, run it

log_mpi() {  # log_mpi CMD...: as log, on $mpi ranks under mpiexec when --mpi N > 1
  [ "$mpi" -gt 1 ] || { log "$@"; return; }
  # the mpich wheel installs mpiexec next to asrkit; else the system's
  local mpiexec=$bindir/mpiexec
  [ -x "$mpiexec" ] || mpiexec=$(command -v mpiexec) \
    || { echo "run.sh: --mpi $mpi needs mpiexec (pip install mpich)" >&2; return 1; }
  # one thread per rank: the ranks share the cores
  log env OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}" \
    NUMBA_NUM_THREADS="${NUMBA_NUM_THREADS:-1}" "$mpiexec" -n "$mpi" "$@"
}

need_graph() {  # need_graph GRAPH: a run started past the recipe's graph stage (stage_graph)
  # builds its graphs when GRAPH is missing, instead of failing at the first decode
  [ ! -f "$1/graph.json" ] || return 0
  local n
  for n in "${!_stage_names[@]}"; do [ "${_stage_names[n]}" != graph ] || break; done
  echo "the decoding graphs are missing ($1): building them first (stage $n)"
  stage_graph
}

decode_tuned() {  # decode_tuned GRAPH MODEL DEV DEV_OUT [DATA OUT]... [-- DECODE_OPTS...]
  # DEV decoded with the word insertion penalty tuned on it (asrkit decode --tune-wip: one
  # search, its n-best lists rescored; DEV_OUT/best_wip), then each DATA with that penalty.
  # Each decode scores itself where its data dir has a text (OUT/wer.txt, OUT/score.json).
  local graph=$1 model=$2 sets=() opts=() i
  shift 2
  while [ $# -gt 0 ] && [ "$1" != -- ]; do sets+=("$1"); shift; done
  [ $# -gt 0 ] && { shift; opts=("$@"); }
  need_graph "$graph" || return
  log asrkit decode --graph "$graph" --model "$model" "${sets[0]}" --out "${sets[1]}" \
    --tune-wip="$wip_range" --nj "$nj" "${opts[@]}" || return
  for ((i = 2; i < ${#sets[@]}; i += 2)); do
    log asrkit decode --graph "$graph" --model "$model" "${sets[i]}" --out "${sets[i + 1]}" \
      --word-insertion-penalty="$(cat "${sets[1]}/best_wip")" --nj "$nj" "${opts[@]}" || return
  done
}

model_configs() {  # model_configs NAME...: each has its conf/NAME.toml (else an error naming it)
  local m
  for m in "$@"; do
    [ -f "conf/$m.toml" ] || { echo "run.sh: --models $m: there is no conf/$m.toml" >&2; return 1; }
  done
}

is_transducer() { grep -q '^type = "transducer"' "conf/$1.toml"; }  # is_transducer NAME

transcribe_data() {  # transcribe_data MODEL_DIR DATA_DIR OUT [TRANSCRIBE_OPTS...]
  # DATA_DIR's audio through asrkit transcribe with the model folder MODEL_DIR (a transducer's
  # needs no graph) -> OUT/hyp.txt under the utterance ids, scored into OUT/wer.txt
  mkdir -p "$3"
  cut -d' ' -f2- "$2/wav.scp" > "$3/audio.list"
  log asrkit transcribe --model-dir "$1" --nj "$nj" "${@:4}" $(cat "$3/audio.list") \
    > "$3/transcripts.tsv" || return
  # path<TAB>text back to utterance ids (the paths are unique: one file per utterance)
  awk -F'\t' 'NR == FNR { split($0, f, " "); utt[substr($0, length(f[1]) + 2)] = f[1]; next }
       { print utt[$1], $2 }' "$2/wav.scp" "$3/transcripts.tsv" > "$3/hyp.txt"
  log asrkit score "$2/text" "$3/hyp.txt" > "$3/wer.txt"
}

package_tuned_bonus() {  # package_tuned_bonus MODEL FEATURES OUT DEV DEV_OUT [TRANSCRIBE_OPTS...]
  # a transducer's model folder OUT (asrkit package, no graph) whose word bonus (nats per word:
  # a transducer deletes more than it inserts) is the one of 0..3 with the fewest errors on the
  # data dir DEV (DEV_OUT/bonusN, DEV_OUT/best_word_bonus), as decode_tuned tunes a CTC model's
  # insertion penalty on dev
  local model=$1 features=$2 out=$3 dev=$4 dev_out=$5 bonus errors best=0 fewest=
  shift 5
  log asrkit package --model "$model" --features "$features" --out "$out" || return
  for bonus in 0 1 2 3; do
    transcribe_data "$out" "$dev" "$dev_out/bonus$bonus" --word-bonus "$bonus" "$@" || return
    errors=$(awk '/^%WER/ { print $4; exit }' "$dev_out/bonus$bonus/wer.txt")
    if [ -z "$fewest" ] || [ "$errors" -lt "$fewest" ]; then fewest=$errors; best=$bonus; fi
  done
  echo "$best" > "$dev_out/best_word_bonus"
  log asrkit package --model "$model" --features "$features" --word-bonus "$best" --out "$out"
}

average_last() {  # average_last EXP [EPOCHS]: EXP/avg.mdl, the average of EXP's last 5 epoch
  # checkpoints (a config with keep_checkpoints = 5), as many as there are when EPOCHS is below 5
  local n=${2:-5}
  log asrkit model average "$1" "$1/avg.mdl" --avg "$((n < 5 ? n : 5))"
}

utt2voice() {  # utt2voice DATA_DIR: "utt engine-voice" lines from the corpus's speakers.txt
  # (eSpeak NG's many variants as one row, espeak-variants), for a WER table per voice
  awk 'NR == FNR { for (i = 2; i <= NF; i++) { split($i, kv, "="); a[$1, kv[1]] = kv[2] }; next }
       { print $1, a[$2, "engine"] "-" a[$2, "voice"] }' "$1/speakers.txt" "$1/utt2spk" \
    | sed 's/espeak-[^ ]*$/espeak-variants/'
}
