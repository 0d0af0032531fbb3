#!/usr/bin/env bash
# Connected digits, end to end, judged on real speakers it never heard:
# real (FSDD) + synthetic speech -> features -> BLSTM-CTC -> graphs -> decode -> WER per speaker,
# beside pocketsphinx on the same audio.
#
#   recipes/digits/run.sh [--stage N] [--stop-stage M] [--fsdd DIR] [--no-prepare] [--no-loso]
#       [--train-speakers N] [--dev-speakers N] [--test-speakers N] [--utts-per-speaker N]
#       [--fsdd-takes N]  (data options: local/make_corpus.py --help)
#       [--pretrain-epochs N] [--epochs N] [--loso-epochs N] [--jobs N] [--mpi N] [--resume]
#       [--models "conformer_ctc conformer_transducer"] [--model-epochs N]
#
# Stages (each logged to exp/log/stage<N>.log; rerun from any stage with --stage N):
#   0 data      FSDD's four real speakers (download, or --fsdd DIR / the shared corpora copy)
#               and every installed English TTS voice, perturbed and sent through simulated
#               rooms, microphones, phone lines and codecs (local/make_corpus.py); cached
#   1 features  13 MFCCs of 8 kHz audio (16 kHz input is resampled, so one model serves both),
#               per-utterance mean normalisation (as asrkit transcribe does)
#   2 lang      tokens, lexicon, 3-gram LM on the training transcripts (asrkit lm train)
#   3 pretrain  BLSTM-CTC on the synthetic speech alone (exp/synth)
#   4 train     the shipped model: from exp/synth, on synthetic + all four real speakers
#   5 graph     TLG for a digit loop and for the 3-gram LM (asrkit graph build)
#   6 decode    word insertion penalty tuned on dev; synthetic test voices never heard in training
#   7 loso      leave-one-speaker-out: for each real speaker, a model from exp/synth trained
#               without them, tested on all their recordings (isolated digits and strings)
#   8 peer      pocketsphinx 5.1.1 (digit-loop JSGF grammar) on the same test audio
#   9 models    with --models: each conf/NAME.toml (e.g. conformer_ctc, conformer_transducer)
#               trained on the synthetic speech as exp/synth is, its last 5 checkpoints
#               averaged, and compared with exp/synth on the synthetic test voices and all
#               four real speakers (CTC: the 3-gram graph; transducer: modified beam search
#               with the 3-gram fused)
#   10 final    exp/final/ (a model folder for asrkit transcribe), WER tables, report.html
#
# --mpi N trains (stages 3, 4, 7) data-parallel on N ranks under mpiexec; --resume continues an
# interrupted training stage from its last checkpoint (e.g. --stage 4 --resume).
set -euo pipefail
cd "$(dirname "$0")"

stage=0
stop_stage=100
fsdd=             # a local FSDD copy (default: $ASRKIT_CORPORA, ../shared/corpora, or download)
prepare=1         # install the voices, pyroomacoustics and pocketsphinx first
loso=1
train_speakers=120
dev_speakers=10
test_speakers=30
utts_per_speaker=20
fsdd_takes=50     # FSDD takes of each digit to use (fewer for quick runs)
pretrain_epochs=8
epochs=6
loso_epochs=3     # each leave-one-speaker-out model (from exp/synth, as the shipped one)
models=           # stage 9: other model configs to train and compare (conf/NAME.toml)
model_epochs=     # their epochs (default: each config's own)
jobs=2
mpi=1
resume=
speakers=(jackson nicolas yweweler lucas)

while [ $# -gt 0 ]; do
  case "$1" in
    --stage) stage=$2; shift 2 ;;
    --stop-stage) stop_stage=$2; shift 2 ;;
    --fsdd) fsdd=$2; shift 2 ;;
    --no-prepare) prepare=; shift ;;
    --no-loso) loso=; shift ;;
    --train-speakers) train_speakers=$2; shift 2 ;;
    --dev-speakers) dev_speakers=$2; shift 2 ;;
    --test-speakers) test_speakers=$2; shift 2 ;;
    --utts-per-speaker) utts_per_speaker=$2; shift 2 ;;
    --fsdd-takes) fsdd_takes=$2; shift 2 ;;
    --pretrain-epochs) pretrain_epochs=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --loso-epochs) loso_epochs=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --model-epochs) model_epochs=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --mpi) mpi=$2; shift 2 ;;
    --resume) resume=--resume; shift ;;
    -h|--help) sed -n '2,34p' "$(basename "$0")"; exit 0 ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

command -v asrkit >/dev/null || { echo "run.sh: 'asrkit' is not on PATH (activate the venv)" >&2; exit 1; }
python=$(dirname "$(command -v asrkit)")/python
[ -x "$python" ] || python=python3
mkdir -p exp/log
echo "# $(date -u +%FT%TZ) $0 $*" >> exp/commands.txt

source ../utils/stages.sh  # run_stage, log

# (run_stage calls the stage functions in an `if`, where set -e is off: each step checks itself)

stage_data() {
  if [ -n "$prepare" ]; then log bash ../utils/prepare_recipe.sh || return; fi
  log "$python" local/make_corpus.py data --train-speakers "$train_speakers" \
    --dev-speakers "$dev_speakers" --test-speakers "$test_speakers" \
    --utts-per-speaker "$utts_per_speaker" --test-speaker none --jobs "$jobs" \
    --fsdd-takes "$fsdd_takes" ${fsdd:+--fsdd "$fsdd"} || return
}

feature_parts() {  # the data dirs stage 0 made, as NAME=DIR (NAME names its features)
  local p s
  for p in train dev test; do echo "synth_$p=data/synth/$p"; done
  for s in "${speakers[@]}"; do
    for p in train dev test; do echo "fsdd_${s}_$p=data/fsdd/$s/$p"; done
  done
}

stage_features() {
  local entry
  for entry in $(feature_parts); do
    log asrkit compute-features "${entry#*=}" --config conf/mfcc.toml \
      --out "data/mfcc/${entry%%=*}" --jobs "$jobs" || return
  done
}

stage_lang() {
  cat data/synth/train/text data/fsdd/*/train/text | sort -u > data/lm_train_text
  log "$python" local/prepare_lang.py data/lm_train_text data/lang || return
  log asrkit lm train --order 3 --text data/lang/lm_text.txt --output data/lang/G.arpa
}

train_model() {  # train_model OUT TRAIN_DIR DEV_DIR EPOCHS [INIT]
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
  log "${launch[@]}" asrkit train conf/train.toml --out "$1" --set "reader.data_dir=$2" \
    --set "reader.cv_data_dir=$3" --set "train.epochs=$4" ${5:+--set "train.init=$5"} $resume
}

combine_features() {  # combine_features OUT DIR...: one features dir from several
  rm -rf "$1"
  log asrkit data combine "$@"
}

stage_pretrain() {
  train_model exp/synth data/mfcc/synth_train data/mfcc/synth_dev "$pretrain_epochs"
}

stage_train() {
  local s train=(data/mfcc/synth_train) dev=(data/mfcc/synth_dev)
  for s in "${speakers[@]}"; do train+=("data/mfcc/fsdd_${s}_train"); dev+=("data/mfcc/fsdd_${s}_dev"); done
  combine_features data/mfcc/train "${train[@]}" || return
  combine_features data/mfcc/dev "${dev[@]}" || return
  train_model exp/blstm data/mfcc/train data/mfcc/dev "$epochs" exp/synth/final.mdl
}

stage_graph() {
  log asrkit graph build --tokens data/lang/tokens.txt --lexicon data/lang/lexicon.txt \
    --word-loop --out exp/graph_loop || return
  log asrkit graph build --tokens data/lang/tokens.txt --lexicon data/lang/lexicon.txt \
    --lm data/lang/G.arpa --out exp/graph_tg
}

stage_decode() {
  # the word insertion penalty is tuned on dev (as Kaldi's scoring picks its penalty), then the
  # synthetic test set (voices never heard in training) is decoded once with the best value
  local graph
  for graph in loop tg; do
    log asrkit decode --graph "exp/graph_$graph" --model exp/blstm/final.mdl data/mfcc/dev \
      --out "exp/blstm/decode_dev_$graph" --tune-wip=-4:0:1 --nbest 1 || return
    log asrkit decode --graph "exp/graph_$graph" --model exp/blstm/final.mdl \
      data/mfcc/synth_test --out "exp/blstm/decode_synth_test_$graph" \
      --word-insertion-penalty="$(cat "exp/blstm/decode_dev_$graph/best_wip")" || return
  done
}

stage_loso() {
  [ -n "$loso" ] || { echo "leave-one-speaker-out skipped (--no-loso)"; return 0; }
  local held s train dev wip
  wip=$(cat exp/blstm/decode_dev_tg/best_wip)
  for held in "${speakers[@]}"; do
    train=(data/mfcc/synth_train); dev=(data/mfcc/synth_dev)
    for s in "${speakers[@]}"; do
      [ "$s" = "$held" ] && continue
      train+=("data/mfcc/fsdd_${s}_train"); dev+=("data/mfcc/fsdd_${s}_dev")
    done
    combine_features "data/mfcc/train_no_$held" "${train[@]}" || return
    combine_features "data/mfcc/dev_no_$held" "${dev[@]}" || return
    train_model "exp/loso/$held" "data/mfcc/train_no_$held" "data/mfcc/dev_no_$held" \
      "$loso_epochs" exp/synth/final.mdl || return
    log asrkit decode --graph exp/graph_tg --model "exp/loso/$held/final.mdl" \
      "data/mfcc/fsdd_${held}_test" --out "exp/loso/decode/$held" \
      --word-insertion-penalty="$wip" --nbest 1 || return
  done
}

stage_peer() {
  if ! "$python" -c "import pocketsphinx" 2>/dev/null; then
    echo "pocketsphinx is not installed (recipes/utils/prepare_recipe.sh): no peer figures"
    return 0
  fi
  local s
  for s in "${speakers[@]}"; do
    log "$python" local/pocketsphinx_decode.py "data/fsdd/$s/test" "exp/pocketsphinx/$s" \
      --jobs "$jobs" || return
  done
  log "$python" local/pocketsphinx_decode.py data/synth/test exp/pocketsphinx/synth_test \
    --jobs "$jobs"
}

is_transducer() { grep -q '^type = "transducer"' "conf/$1.toml"; }

decode_audio() {  # decode_audio MODEL_DIR DATA_DIR OUT: transcribe DATA_DIR's audio into OUT/hyp.txt
  mkdir -p "$3"
  cut -d' ' -f2- "$2/wav.scp" > "$3/audio.list"
  log asrkit transcribe --model-dir "$1" --lm data/lang/G.arpa --nj "$jobs" \
    $(cat "$3/audio.list") > "$3/transcripts.tsv" || return
  # path<TAB>text back to utterance ids (the paths are unique: one file per utterance)
  awk -F'\t' 'NR == FNR { split($0, f, " "); utt[substr($0, length(f[1]) + 2)] = f[1]; next }
       { print utt[$1], $2 }' "$2/wav.scp" "$3/transcripts.tsv" > "$3/hyp.txt"
  log asrkit score "$2/text" "$3/hyp.txt" > "$3/wer.txt"
}

model_test_sets() {  # NAME=FEATURES_DIR=DATA_DIR of the sets the models are compared on
  local s
  echo "synth_test=data/mfcc/synth_test=data/synth/test"
  for s in "${speakers[@]}"; do echo "$s=data/mfcc/fsdd_${s}_test=data/fsdd/$s/test"; done
}

decode_model() {  # decode_model NAME MODEL: dev-tuned penalty, then every comparison set
  local name=$1 model=$2 entry set feats audio wip
  if [ "$name" != synth ] && is_transducer "$name"; then
    log asrkit package --model "$model" --features conf/mfcc.toml --out "exp/$name/final" || return
    for entry in $(model_test_sets); do
      set=${entry%%=*}; audio=${entry##*=}
      decode_audio "exp/$name/final" "$audio" "exp/$name/decode_$set" || return
    done
    return 0
  fi
  [ -f "exp/$name/decode_synth_dev/best_wip" ] ||
    log asrkit decode --graph exp/graph_tg --model "$model" data/mfcc/synth_dev \
      --out "exp/$name/decode_synth_dev" --tune-wip=-4:0:1 --nbest 1 || return
  wip=$(cat "exp/$name/decode_synth_dev/best_wip")
  for entry in $(model_test_sets); do
    set=${entry%%=*}; feats=${entry#*=}; feats=${feats%%=*}
    log asrkit decode --graph exp/graph_tg --model "$model" "$feats" \
      --out "exp/$name/decode_$set" --word-insertion-penalty="$wip" --nbest 1 || return
  done
}

stage_models() {
  # every model here trains on the synthetic speech alone, as exp/synth (the BLSTM's
  # pre-training) does, so all four real speakers and the test voices are unheard by all
  [ -n "$models" ] || { echo "no --models: only the BLSTM is trained"; return 0; }
  local m
  for m in $models; do
    [ -f "conf/$m.toml" ] || { echo "run.sh: --models $m: there is no conf/$m.toml" >&2; return 1; }
  done
  decode_model synth exp/synth/final.mdl || return
  for m in $models; do
    log asrkit train "conf/$m.toml" --out "exp/$m" --set reader.data_dir=data/mfcc/synth_train \
      --set reader.cv_data_dir=data/mfcc/synth_dev \
      ${model_epochs:+--set "train.epochs=$model_epochs"} $resume || return
    log asrkit model average "exp/$m" "exp/$m/avg.mdl" --avg 5 || return
    decode_model "$m" "exp/$m/avg.mdl" || return
  done
}

stage_final() {
  local s sets=()
  log asrkit package --model exp/blstm/final.mdl --graph exp/graph_tg \
    --features conf/mfcc.toml --word-insertion-penalty="$(cat exp/blstm/decode_dev_tg/best_wip)" \
    --out exp/final || return
  for s in "${speakers[@]}"; do sets+=(--set "$s=data/fsdd/$s/test"); done
  mkdir -p exp/tables
  if [ -n "$loso" ]; then
    log "$python" local/wer_table.py exp/tables/real_speakers.tsv "${sets[@]}" \
      --system asrkit=exp/loso/decode --system pocketsphinx=exp/pocketsphinx \
      --group=-iso-=isolated --group=-str-=strings || return
  fi
  # one row per voice of the test set: utt -> "engine voice" from the corpus's speakers.txt
  awk 'NR == FNR { for (i = 2; i <= NF; i++) { split($i, kv, "="); a[$1, kv[1]] = kv[2] }; next }
       { print $1, a[$2, "engine"] "-" a[$2, "voice"] }' data/synth/test/speakers.txt \
    data/synth/test/utt2spk | sed 's/espeak-[^ ]*$/espeak-variants/' > exp/tables/synth_test.utt2voice
  log "$python" local/wer_table.py exp/tables/synth_voices.tsv --set synth_test=data/synth/test \
    --system "asrkit=exp/blstm/decode_{set}_tg" --system pocketsphinx=exp/pocketsphinx \
    --group-file exp/tables/synth_test.utt2voice || return
  local tables=(--table "Synthetic voices never heard in training=exp/tables/synth_voices.tsv")
  if [ -n "$models" ]; then
    local m entry systems=(--system "blstm=exp/synth/decode_{set}") model_sets=()
    for m in $models; do systems+=(--system "$m=exp/$m/decode_{set}"); done
    for entry in $(model_test_sets); do model_sets+=(--set "${entry%%=*}=${entry##*=}"); done
    log "$python" local/wer_table.py exp/tables/models.tsv "${model_sets[@]}" "${systems[@]}" \
      --group=-iso-=isolated --group=-str-=strings || return
    tables+=(--table "Models trained on synthetic speech only, on unheard voices and speakers=exp/tables/models.tsv")
  fi
  [ -n "$loso" ] && tables=(--table "Real speakers never heard in training (leave one speaker out)=exp/tables/real_speakers.tsv" "${tables[@]}")
  log asrkit report exp/blstm --title "digits: BLSTM-CTC on real and synthetic speech" \
    "${tables[@]}" --commands exp/commands.txt \
    --config conf/train.toml --config conf/mfcc.toml
}

run_stage 0 data stage_data
run_stage 1 features stage_features
run_stage 2 lang stage_lang
run_stage 3 pretrain stage_pretrain
run_stage 4 train stage_train
run_stage 5 graph stage_graph
run_stage 6 decode stage_decode
run_stage 7 loso stage_loso
run_stage 8 peer stage_peer
run_stage 9 models stage_models
run_stage 10 final stage_final

for t in exp/tables/real_speakers.tsv exp/tables/synth_voices.tsv exp/tables/models.tsv; do
  [ -f "$t" ] && { echo "== $t"; column -t -s $'\t' "$t"; }
done
exit 0
