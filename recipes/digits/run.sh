#!/usr/bin/env bash
# Connected digits, end to end: synthetic corpus -> features -> BLSTM-CTC -> graphs -> decode -> WER.
#
#   recipes/digits/run.sh [--stage N] [--stop-stage M] [--train-speakers N] [--dev-speakers N]
#     [--test-speakers N] [--utts-per-speaker N] [--fsdd DIR] [--test-speaker S|none] [--no-prepare]
#     [--fsdd-takes N] [--epochs N] [--jobs N] [--mpi N] [--resume]  (data: local/make_corpus.py)
#
# Stages (each logged to exp/log/stage<N>.log; rerun from any stage with --stage N):
#   0 data      FSDD (4 real speakers) + TTS voices, perturbed, through simulated channels
#   1 features  40-dim fbank + per-speaker CMVN stats (asrkit compute-features)
#   2 lang      tokens, lexicon, 3-gram LM on the training transcripts (asrkit lm train)
#   3 train     BLSTM-CTC acoustic model (asrkit train conf/train.toml)
#   4 graph     TLG for a digit loop and for the 3-gram LM (asrkit graph build)
#   5 decode    Viterbi beam search over both graphs (asrkit decode), scored (asrkit score)
#   6 final     exp/final/: a self-contained model directory for asrkit transcribe; report.html
#
# --mpi N trains (stage 3) data-parallel on N ranks: mpiexec -n N asrkit train ... (one thread
# per rank unless OMP/OPENBLAS/NUMBA_NUM_THREADS are set); --resume continues stage 3 from the
# last checkpoint in exp/blstm after an interrupted run (e.g. --stage 3 --resume).
set -euo pipefail
cd "$(dirname "$0")"

stage=0
stop_stage=100
train_speakers=120
dev_speakers=10
test_speakers=30
utts_per_speaker=20
fsdd=            # a local FSDD copy (default: $ASRKIT_CORPORA, ../shared/corpora, or download)
test_speaker=lucas  # FSDD speaker held out of the default fold (data/test_real); none: all
fsdd_takes=50    # FSDD takes of each digit to use (fewer for quick runs)
prepare=1        # install the voices first (../utils/prepare_recipe.sh)
epochs=15
jobs=2
mpi=1
resume=

while [ $# -gt 0 ]; do
  case "$1" in
    --stage) stage=$2; shift 2 ;;
    --stop-stage) stop_stage=$2; shift 2 ;;
    --train-speakers) train_speakers=$2; shift 2 ;;
    --dev-speakers) dev_speakers=$2; shift 2 ;;
    --test-speakers) test_speakers=$2; shift 2 ;;
    --utts-per-speaker) utts_per_speaker=$2; shift 2 ;;
    --fsdd) fsdd=$2; shift 2 ;;
    --test-speaker) test_speaker=$2; shift 2 ;;
    --fsdd-takes) fsdd_takes=$2; shift 2 ;;
    --no-prepare) prepare=; shift ;;
    --epochs) epochs=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --mpi) mpi=$2; shift 2 ;;
    --resume) resume=--resume; shift ;;
    -h|--help) sed -n '2,19p' "$(basename "$0")"; exit 0 ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

command -v asrkit >/dev/null || { echo "run.sh: 'asrkit' is not on PATH (activate the venv)" >&2; exit 1; }
python=$(dirname "$(command -v asrkit)")/python
[ -x "$python" ] || python=python3
mkdir -p exp/log
echo "# $(date -u +%FT%TZ) $0 $*" >> exp/commands.txt

source ../utils/stages.sh  # run_stage, log

stage_data() {
  # (run_stage calls this in an `if`, where set -e is off: each step checks its own status)
  if [ -n "$prepare" ]; then log bash ../utils/prepare_recipe.sh || return; fi
  log "$python" local/make_corpus.py data --train-speakers "$train_speakers" \
    --dev-speakers "$dev_speakers" --test-speakers "$test_speakers" \
    --utts-per-speaker "$utts_per_speaker" --test-speaker "$test_speaker" --jobs "$jobs" \
    --fsdd-takes "$fsdd_takes" ${fsdd:+--fsdd "$fsdd"} || return
  # the default fold: synthetic + three FSDD speakers to train on, the fourth to test on
  local train=(data/synth/train) dev=(data/synth/dev) spk part
  for spk in jackson nicolas yweweler lucas; do
    [ "$spk" = "$test_speaker" ] && continue
    train+=("data/fsdd/$spk/train"); dev+=("data/fsdd/$spk/dev")
  done
  rm -rf data/train data/dev data/test data/test_real
  log asrkit data combine data/train "${train[@]}" || return
  log asrkit data combine data/dev "${dev[@]}" || return
  log asrkit data combine data/test data/synth/test || return
  if [ "$test_speaker" != none ]; then
    log asrkit data combine data/test_real "data/fsdd/$test_speaker/test" || return
  fi
  for part in train dev test test_real; do
    if [ -d "data/$part" ]; then log asrkit data validate "data/$part" || return; fi
  done
}

stage_features() {
  for part in train dev test; do
    log asrkit compute-features "data/$part" --config conf/fbank.toml --out "data/fbank/$part" \
      --jobs "$jobs"
  done
}

stage_lang() {
  log "$python" local/prepare_lang.py data/train/text data/lang
  log asrkit lm train --order 3 --text data/lang/lm_text.txt --output data/lang/G.arpa
}

stage_train() {
  local launch=()
  if [ "$mpi" -gt 1 ]; then
    # the mpich wheel installs mpiexec next to asrkit; else the system's (or Slurm's srun)
    local mpiexec
    mpiexec=$(dirname "$(command -v asrkit)")/mpiexec
    [ -x "$mpiexec" ] || mpiexec=$(command -v mpiexec) \
      || { echo "run.sh: --mpi $mpi needs mpiexec (pip install mpich)" >&2; return 1; }
    launch=(env OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
            OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"
            NUMBA_NUM_THREADS="${NUMBA_NUM_THREADS:-1}" "$mpiexec" -n "$mpi")
  fi
  log "${launch[@]}" asrkit train conf/train.toml --out exp/blstm --set "train.epochs=$epochs" \
    $resume
}

stage_graph() {
  log asrkit graph build --tokens data/lang/tokens.txt --lexicon data/lang/lexicon.txt \
    --word-loop --out exp/graph_loop
  log asrkit graph build --tokens data/lang/tokens.txt --lexicon data/lang/lexicon.txt \
    --lm data/lang/G.arpa --out exp/graph_tg
}

stage_decode() {
  # the word insertion penalty is tuned on dev (as Kaldi's scoring picks its penalty), then
  # the test set is decoded once with the best value
  for graph in loop tg; do
    best_wip=0; best_wer=1000
    for wip in 0 -1 -2 -3; do
      log asrkit decode --graph "exp/graph_$graph" --model exp/blstm/final.mdl data/fbank/dev \
        --out "exp/blstm/decode_dev_${graph}_wip$wip" --word-insertion-penalty=$wip --nbest 1
      wer=$("$python" -c "import json,sys; print(json.load(open(sys.argv[1]))['error_rate'])" \
        "exp/blstm/decode_dev_${graph}_wip$wip/score.json")
      if "$python" -c "import sys; sys.exit(not float(sys.argv[1]) < float(sys.argv[2]))" \
          "$wer" "$best_wer"; then best_wer=$wer; best_wip=$wip; fi
    done
    echo "graph $graph: word insertion penalty $best_wip (dev WER $best_wer)"
    echo "$best_wip" > "exp/blstm/wip_$graph"
    log asrkit decode --graph "exp/graph_$graph" --model exp/blstm/final.mdl data/fbank/test \
      --out "exp/blstm/decode_test_$graph" --word-insertion-penalty="$best_wip"
    log asrkit score --report "exp/blstm/decode_test_$graph/wer_details.txt" \
      data/test/text "exp/blstm/decode_test_$graph/hyp.txt"
    rm -rf exp/blstm/decode_dev_"${graph}"_wip*
  done
}

stage_final() {
  log asrkit package --model exp/blstm/final.mdl --graph exp/graph_tg \
    --features conf/fbank.toml --word-insertion-penalty="$(cat exp/blstm/wip_tg)" --out exp/final
  log asrkit report exp/blstm --title "digits: BLSTM-CTC (test: unheard voices)" \
    --ref data/test/text \
    --commands exp/commands.txt --config conf/train.toml --config conf/fbank.toml
}

run_stage 0 data stage_data
run_stage 1 features stage_features
run_stage 2 lang stage_lang
run_stage 3 train stage_train
run_stage 4 graph stage_graph
run_stage 5 decode stage_decode
run_stage 6 final stage_final

for graph in loop tg; do
  f=exp/blstm/decode_test_$graph/hyp.txt
  [ -f "$f" ] && echo "test ($graph): $(asrkit score --summary-only data/test/text "$f")"
done
exit 0
