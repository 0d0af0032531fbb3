#!/usr/bin/env bash
# Connected digits, end to end, judged on real speakers it never heard:
# real (FSDD) + synthetic speech -> features -> BLSTM-CTC -> graphs -> decode -> WER per speaker,
# beside pocketsphinx on the same audio.
#
#   recipes/digits/run.sh [--stage N] [--stop-stage M] [--fsdd DIR] [--no-prepare] [--no-loso]
#       [--train-speakers N] [--finetune-speakers N] [--loso-speakers N] [--dev-speakers N]
#       [--test-speakers N] [--utts-per-speaker N] [--fsdd-takes N] [--fsdd-virtual-speakers N]
#       [--fsdd-copies N] [--fsdd-perturbation X] [--fsdd-trim P] (data options:
#       local/make_corpus.py --help)
#       [--pretrain-epochs N] [--epochs N] [--loso-epochs N] [--nj N] [--mpi N] [--resume]
#       [--models "conformer_ctc conformer_transducer"] [--model-epochs N] [--vtln-warps W,W,..]
#
# Stages (each logged to exp/log/stage<N>.log; rerun from any stage with --stage N):
#   0 data      FSDD's four real speakers (download, or --fsdd DIR / the shared corpora copy)
#               and every installed English TTS voice, perturbed and sent through simulated
#               rooms, microphones, phone lines and codecs (local/make_corpus.py); cached
#   1 features  13 MFCCs of 8 kHz audio (16 kHz input is resampled, so one model serves both),
#               one global mean and variance (the training set's, kept in the model)
#   2 lang      tokens, lexicon, 3-gram LM on the training transcripts (asrkit lm train)
#   3 pretrain  BLSTM-CTC on the synthetic speech alone (exp/synth; all --train-speakers)
#   4 train     the shipped model: from exp/synth, on the first --finetune-speakers synthetic
#               speakers + all four real speakers
#   5 graph     TLG for a digit loop and for the 3-gram LM (asrkit graph build)
#   6 decode    word insertion penalty tuned on dev; exp/final/ (a model folder for asrkit
#               transcribe, averaging the log-probabilities of --vtln-warps); synthetic test
#               voices never heard in training, through channels (synth_test) and as they spoke
#               (synth_test_clean), through exp/final and in one unwarped pass
#   7 loso      leave-one-speaker-out: for each real speaker, a model trained as the shipped
#               one but without them (and on the first --loso-speakers synthetic speakers), tested
#               on all their recordings (isolated digits and strings) as exp/final is, and in
#               one pass
#   8 peer      pocketsphinx 5.1.1 (digit-loop JSGF grammar) on the same test audio; cached
#   9 models    with --models: each conf/NAME.toml (e.g. conformer_ctc, conformer_transducer)
#               trained on the synthetic speech as exp/synth is, its last 5 checkpoints
#               averaged, and compared with exp/synth on the synthetic test voices and all
#               four real speakers (CTC: the 3-gram graph; transducer: modified beam search
#               with the 3-gram fused and a dev-tuned word bonus)
#   10 final    WER tables, report.html
#
# --nj N runs N jobs for data, features and decoding; --mpi N (default 2) trains (stages 3, 4,
# 7) data-parallel on N ranks under mpiexec (--mpi 1: one process); --resume continues an
# interrupted training stage from its last checkpoint (e.g. --stage 4 --resume). Options shared
# by the recipes: recipes/utils/setup.sh.
set -euo pipefail
cd "$(dirname "$0")"

fsdd=             # a local FSDD copy (default: $ASRKIT_CORPORA, ../shared/corpora, or download)
prepare=1         # install the voices, pyroomacoustics and pocketsphinx first
loso=1
train_speakers=360    # synthetic training speakers (20 utterances each): all pre-train exp/synth
finetune_speakers=360 # the first N of them go on into training with the real speech (fewer:
                      # quicker; 120 cost 3.5 points on the synthetic test voices)
loso_speakers=120     # ... into each leave-one-speaker-out model (four of them: time)
dev_speakers=10
test_speakers=30
utts_per_speaker=20
fsdd_takes=50     # FSDD takes of each digit to use (fewer for quick runs)
fsdd_virtual_speakers=12  # perturbed voices (and channels) each real speaker's training takes
fsdd_copies=2     # are spread over; each take and string is rendered by this many of them
fsdd_perturbation=0.5     # how far their voices are changed (0: not at all, 1: as synthetic ones)
fsdd_trim=0.5     # share of their takes' ends cut at the speech, quiet /s/ and all, as FSDD cut some
pretrain_epochs=12
epochs=6
loso_epochs=6     # each leave-one-speaker-out model (from exp/synth, as the shipped one)
vtln_warps=0.84,0.92,1,1.08,1.16  # test time: the model run on the features under each VTLN
                  # warp factor, log-probabilities averaged (exp/final keeps them; 1: one pass)
models=           # stage 9: other model configs to train and compare (conf/NAME.toml)
model_epochs=     # their epochs (default: each config's own)
nj=2
mpi=2             # training ranks: this small BLSTM trains twice as fast on 2 one-thread
                  # ranks (data-parallel under mpiexec, the same updates) as in one process
resume=
flag_options=resume
speakers=(jackson nicolas yweweler lucas)

. ../utils/setup.sh "$@"  # options, $python, run_stages, log, log_mpi, decode_tuned
for opt in finetune_speakers loso_speakers; do
  case ${!opt} in
    '' | *[!0-9]* | 0*)
      echo "run.sh: --${opt//_/-}: a whole number of speakers, at least 1 (got '${!opt}')" >&2
      exit 2 ;;
  esac
done

stage_data() {
  if [ -n "$prepare" ]; then log bash ../utils/prepare_recipe.sh || return; fi
  log "$python" local/make_corpus.py data --train-speakers "$train_speakers" \
    --dev-speakers "$dev_speakers" --test-speakers "$test_speakers" \
    --utts-per-speaker "$utts_per_speaker" --test-speaker none --jobs "$nj" \
    --fsdd-takes "$fsdd_takes" --fsdd-virtual-speakers "$fsdd_virtual_speakers" \
    --fsdd-copies "$fsdd_copies" --fsdd-perturbation "$fsdd_perturbation" \
    --fsdd-trim "$fsdd_trim" \
    ${fsdd:+--fsdd "$fsdd"} || return
}

feature_parts() {  # the data dirs stage 0 made, as NAME=DIR (NAME names its features)
  local p s
  for p in train dev test test_clean; do echo "synth_$p=data/synth/$p"; done
  for s in "${speakers[@]}"; do
    for p in train dev test; do echo "fsdd_${s}_$p=data/fsdd/$s/$p"; done
  done
}

stage_features() {
  local entry
  for entry in $(feature_parts); do
    log asrkit compute-features "${entry#*=}" --config conf/mfcc.toml \
      --out "data/mfcc/${entry%%=*}" --jobs "$nj" || return
  done
  # the synthetic part of the training with real speech: the first N speakers (voices are
  # dealt to speakers in turn, so any first N are balanced)
  synth_speakers ft "$finetune_speakers" && synth_speakers loso "$loso_speakers"
}

synth_speakers() {  # synth_speakers NAME N: data/mfcc/synth_train_NAME, the first N speakers
  rm -rf "data/mfcc/synth_train_$1"
  head -n "$2" data/mfcc/synth_train/spk2utt | cut -d' ' -f1 > "data/mfcc/synth_train.$1_speakers"
  log asrkit data subset data/mfcc/synth_train --spk-list "data/mfcc/synth_train.$1_speakers" \
    "data/mfcc/synth_train_$1"
}

stage_lang() {
  cat data/synth/train/text data/fsdd/*/train/text | sort -u > data/lm_train_text
  log "$python" local/prepare_lang.py data/lm_train_text data/lang || return
  log asrkit lm train --order 3 --text data/lang/lm_text.txt --output data/lang/G.arpa
}

train_model() {  # train_model OUT TRAIN_DIR DEV_DIR EPOCHS [INIT]: on --mpi N ranks
  # Training on from INIT (stages 4 and 7), the rate falls by 0.6 each epoch instead of by
  # newbob's CV-driven halving: every such model ends annealed, whatever its CV noise did
  # (newbob could end a short run at the full rate); and without SpecAugment's time masks,
  # which the pre-training keeps: two of up to 0.2 s can hide most of a short real take (one
  # speaker left out: 294 and 309 errors with the frequency masks alone, 352 and 369 with both,
  # 389 with the time masks alone; the frequency masks keep the unheard synthetic voices at
  # 13.5-13.8% through channels, 15.7% without any)
  log_mpi asrkit train conf/train.toml --out "$1" --set "reader.data_dir=$2" \
    --set "reader.cv_data_dir=$3" --set "train.epochs=$4" \
    ${5:+--set "train.init=$5" --set learner.newbob=false --set learner.decay=0.6} \
    ${5:+--set reader.spec_augment.num_time_masks=0} \
    ${resume:+--resume}
}

combine_features() {  # combine_features OUT DIR...: one features dir from several
  rm -rf "$1"
  log asrkit data combine "$@"
}

stage_pretrain() {
  train_model exp/synth data/mfcc/synth_train data/mfcc/synth_dev "$pretrain_epochs"
}

stage_train() {
  local s train=(data/mfcc/synth_train_ft) dev=(data/mfcc/synth_dev)
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
  # the word insertion penalty is tuned on dev (as Kaldi's scoring picks its penalty; one
  # unwarped pass), then the synthetic test set (voices never heard in training) is decoded
  # once with the best value: in one pass (exp/blstm/decode_*) and through the shipped folder
  # exp/final with its VTLN warps (exp/blstm/decode_*_warps)
  local graph s
  for graph in loop tg; do
    decode_tuned "exp/graph_$graph" exp/blstm/final.mdl data/mfcc/dev \
      "exp/blstm/decode_dev_$graph" data/mfcc/synth_test "exp/blstm/decode_synth_test_$graph" \
      data/mfcc/synth_test_clean "exp/blstm/decode_synth_test_clean_$graph" || return
  done
  package_final exp/blstm/final.mdl exp/final || return
  for s in test test_clean; do
    transcribe_data exp/final "data/synth/$s" "exp/blstm/decode_synth_${s}_warps" || return
  done
}

package_final() {  # package_final MODEL OUT: a model folder with the trigram graph, the dev-tuned
  # insertion penalty and --vtln-warps
  log asrkit package --model "$1" --graph exp/graph_tg --features conf/mfcc.toml \
    --word-insertion-penalty="$(cat exp/blstm/decode_dev_tg/best_wip)" \
    --vtln-warps "$vtln_warps" --out "$2"
}

stage_loso() {
  [ -n "$loso" ] || { echo "leave-one-speaker-out skipped (--no-loso)"; return 0; }
  local held s train dev wip
  wip=$(cat exp/blstm/decode_dev_tg/best_wip)
  for held in "${speakers[@]}"; do
    train=(data/mfcc/synth_train_loso); dev=(data/mfcc/synth_dev)
    for s in "${speakers[@]}"; do
      [ "$s" = "$held" ] && continue
      train+=("data/mfcc/fsdd_${s}_train"); dev+=("data/mfcc/fsdd_${s}_dev")
    done
    combine_features "data/mfcc/train_no_$held" "${train[@]}" || return
    combine_features "data/mfcc/dev_no_$held" "${dev[@]}" || return
    train_model "exp/loso/$held" "data/mfcc/train_no_$held" "data/mfcc/dev_no_$held" \
      "$loso_epochs" exp/synth/final.mdl || return
    need_graph exp/graph_tg || return
    log asrkit decode --graph exp/graph_tg --model "exp/loso/$held/final.mdl" \
      "data/mfcc/fsdd_${held}_test" --out "exp/loso/decode_one_pass/$held" \
      --word-insertion-penalty="$wip" --nbest 1 --nj "$nj" || return
    package_final "exp/loso/$held/final.mdl" "exp/loso/$held/folder" || return
    transcribe_data "exp/loso/$held/folder" "data/fsdd/$held/test" "exp/loso/decode/$held" \
      || return
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
      --jobs "$nj" || return
  done
  for s in test test_clean; do
    log "$python" local/pocketsphinx_decode.py "data/synth/$s" "exp/pocketsphinx/synth_$s" \
      --jobs "$nj" || return
  done
}

model_test_sets() {  # NAME=FEATURES_DIR=DATA_DIR of the sets the models are compared on
  local s
  echo "synth_test=data/mfcc/synth_test=data/synth/test"
  for s in "${speakers[@]}"; do echo "$s=data/mfcc/fsdd_${s}_test=data/fsdd/$s/test"; done
}

decode_model() {  # decode_model NAME MODEL: dev-tuned penalty, then every comparison set
  local name=$1 model=$2 entry set feats sets=()
  if [ "$name" != synth ] && is_transducer "$name"; then
    # a transducer deletes more than it inserts: its word bonus (nats per word) is tuned on
    # dev as the CTC models' insertion penalty is, and packaged
    package_tuned_bonus "$model" conf/mfcc.toml "exp/$name/final" data/synth/dev \
      "exp/$name/decode_synth_dev" --lm data/lang/G.arpa || return
    for entry in $(model_test_sets); do
      set=${entry%%=*}
      transcribe_data "exp/$name/final" "${entry##*=}" "exp/$name/decode_$set" \
        --lm data/lang/G.arpa || return
    done
    return 0
  fi
  for entry in $(model_test_sets); do
    set=${entry%%=*}; feats=${entry#*=}
    sets+=("${feats%%=*}" "exp/$name/decode_$set")
  done
  decode_tuned exp/graph_tg "$model" data/mfcc/synth_dev "exp/$name/decode_synth_dev" \
    "${sets[@]}" -- --nbest 1
}

stage_models() {
  # every model here trains on the synthetic speech alone, as exp/synth (the BLSTM's
  # pre-training) does, so all four real speakers and the test voices are unheard by all
  [ -n "$models" ] || { echo "no --models: only the BLSTM is trained"; return 0; }
  local m
  # shellcheck disable=SC2086  # one word per model name
  model_configs $models || return
  decode_model synth exp/synth/final.mdl || return
  for m in $models; do
    log asrkit train "conf/$m.toml" --out "exp/$m" --set reader.data_dir=data/mfcc/synth_train \
      --set reader.cv_data_dir=data/mfcc/synth_dev \
      ${model_epochs:+--set "train.epochs=$model_epochs"} ${resume:+--resume} || return
    average_last "exp/$m" "$model_epochs" || return
    decode_model "$m" "exp/$m/avg.mdl" || return
  done
}

stage_final() {
  local s sets=()
  for s in "${speakers[@]}"; do sets+=(--set "$s=data/fsdd/$s/test"); done
  mkdir -p exp/tables
  # "asrkit" is the shipped way (exp/final: --vtln-warps averaged), "one pass" the same model
  # without the warps
  if [ -n "$loso" ]; then
    log "$python" local/wer_table.py exp/tables/real_speakers.tsv "${sets[@]}" \
      --system asrkit=exp/loso/decode --system "one pass=exp/loso/decode_one_pass" \
      --system pocketsphinx=exp/pocketsphinx \
      --group=-iso-=isolated --group=-str-=strings --top-errors asrkit || return
  fi
  utt2voice data/synth/test > exp/tables/synth_test.utt2voice  # one row per voice of the test set
  # (test_clean: the same utterances and ids, without channels)
  log "$python" local/wer_table.py exp/tables/synth_voices.tsv --set synth_test=data/synth/test \
    --set synth_test_clean=data/synth/test_clean --system "asrkit=exp/blstm/decode_{set}_warps" \
    --system "one pass=exp/blstm/decode_{set}_tg" --system pocketsphinx=exp/pocketsphinx \
    --group-file exp/tables/synth_test.utt2voice --top-errors asrkit || return
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

run_stages data features lang pretrain train graph decode loso peer models final

for t in exp/tables/real_speakers.tsv exp/tables/synth_voices.tsv exp/tables/models.tsv; do
  [ -f "$t" ] && { echo "== $t"; column -t -s $'\t' "$t"; }
done
exit 0
