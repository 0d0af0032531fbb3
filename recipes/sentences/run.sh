#!/usr/bin/env bash
# Spoken sentences over a ~500-word vocabulary, end to end: synthetic corpus -> features ->
# CMUdict phone lexicon + 3-gram LM -> Conformer-CTC over phones -> TLG -> decode -> WER.
#
#   recipes/sentences/run.sh [--stage N] [--stop-stage M] [--train-speakers N] [--dev-speakers N]
#                            [--test-speakers N] [--utts-per-speaker N] [--test-utts-per-speaker N]
#                            [--lm-sentences N] [--model conformer_ctc] [--epochs N] [--nj N]
#                            [--mpi N] [--no-prepare] [--models "blstm conformer_transducer"]
#                            [--model-epochs N] [--acoustic-scales "0.5 0.7 1"]
#                            [--wip-range LO:HI:STEP] [--resume]
#
# Stages (each logged to exp/log/stage<N>.log; rerun from any stage with --stage N):
#   0 data      grammar sentences spoken by every installed English voice (eSpeak NG, flite,
#               festival, Piper; drawn evenly), training speakers perturbed, all recorded
#               through simulated channels; the test set by talkers never heard in training,
#               and test_clean, the same without channels; a disjoint LM text
#               (local/make_corpus.py over recipes/utils/synth)
#   1 features  40-dim fbank + per-speaker CMVN stats (asrkit compute-features), validated
#   2 lang      phone tokens + CMUdict lexicon (local/prepare_lang.py), 3-gram LM on the LM text
#               (asrkit lm train), phone-level training transcripts with the pronunciations
#               eSpeak NG spoke (local/phone_transcripts.py)
#   3 train     the --model (default conformer_ctc: Conformer-CTC over phones, 8 epochs; blstm:
#               the BLSTM-CTC) from conf/MODEL.toml into exp/MODEL (asrkit train; on --mpi N
#               ranks under mpiexec; --epochs N for other than the config's own), the Conformer's
#               last 5 checkpoints averaged (asrkit model average; the BLSTM keeps its final.mdl)
#   4 graph     TLG with the 3-gram LM, and with the sentence grammar itself (asrkit graph build)
#   5 decode    Viterbi beam search with both graphs (asrkit decode): the acoustic scale
#               (--acoustic-scales) and word insertion penalty (--tune-wip) tuned on dev,
#               then test and test_clean, scored
#   6 models    with --models: each other conf/NAME.toml (blstm, conformer_ctc: phones;
#               conformer_transducer: characters) trained on the same data as stage 3
#               (--model-epochs N: their epochs), and decoded on the unheard voices (CTC: as
#               stage 5; transducer: its last 5 checkpoints averaged, modified beam search with
#               the 3-gram fused and a dev-tuned word bonus)
#   7 final     exp/final/: the --model with its dev-tuned acoustic scale and penalty, a
#               self-contained model directory for asrkit transcribe; WER tables of every model
#               on the unheard voices, all and per voice (exp/tables/); exp/MODEL/report.html
#
# --nj N: jobs for data, features and decoding; --mpi N: training ranks (recipes/utils/setup.sh)
set -euo pipefail
cd "$(dirname "$0")"

train_speakers=400  # twice the speech of 2026-12-06 for 8 epochs, not 15 (conf/conformer_ctc.toml)
dev_speakers=10
test_speakers=40
utts_per_speaker=15  # 6000 training utterances (4.8 h)
test_utts_per_speaker=10
lm_sentences=50000
model=conformer_ctc  # stages 3, 5, 7: the model trained, decoded and packaged (conf/MODEL.toml,
                     # a CTC one: conformer_ctc, or blstm)
epochs=              # its epochs (default: its config's own, conformer_ctc 8, blstm 15)
nj=2       # jobs for data, features and decoding (--mpi N: training ranks)
prepare=1  # install the voices first (../utils/prepare_recipe.sh); --no-prepare skips it
models=           # stage 6: other model configs to train and compare (conf/NAME.toml)
model_epochs=     # their epochs (default: each config's own)
acoustic_scales="0.5 0.7 1"  # tried on dev with each graph (stage 5, 6), with the penalties
wip_range=-6:2:1  # word insertion penalties tried on dev (-4 was the edge of -4:0:1)
resume=           # --resume: a training stage continues from its last checkpoint (a finished
flag_options=resume  # one only writes its model again, so --stage 6 --resume redoes decodes)

. ../utils/setup.sh "$@"  # options, $python, run_stages, log, log_mpi, decode_tuned

stage_data() {
  # (run_stage calls this in an `if`, where set -e is off: each step checks its own status)
  if [ -n "$prepare" ]; then log bash ../utils/prepare_recipe.sh || return; fi
  log "$python" local/make_corpus.py data --train-speakers "$train_speakers" \
    --dev-speakers "$dev_speakers" --test-speakers "$test_speakers" \
    --utts-per-speaker "$utts_per_speaker" --test-utts-per-speaker "$test_utts_per_speaker" \
    --lm-sentences "$lm_sentences" --jobs "$nj"
}

stage_features() {
  for part in train dev test test_clean; do
    log asrkit compute-features "data/$part" --config conf/fbank.toml --out "data/fbank/$part" \
      --jobs "$nj"
    log asrkit data validate "data/fbank/$part"
  done
}

stage_lang() {
  log "$python" local/prepare_lang.py data/lang --check data/train/text data/dev/text \
    data/test/text
  log asrkit lm train --order 3 --text data/local/lm_text.txt --vocab data/lang/words.txt \
    --output data/lang/G.arpa
  cut -d' ' -f2- data/test/text > data/local/test_sentences.txt
  log asrkit lm ppl --lm data/lang/G.arpa --text data/local/test_sentences.txt
  for part in train dev test; do
    log "$python" local/phone_transcripts.py data/lang/lexicon.txt "data/fbank/$part" \
      "data/fbank/${part}_phones" --ipa "data/$part/text.ipa"
  done
}

train_model() {  # train_model NAME [EPOCHS]: conf/NAME.toml trained into exp/NAME, then, for a
  # config that keeps one checkpoint per epoch (keep_checkpoints), its last 5 averaged into
  # exp/NAME/avg.mdl (as many as there are when EPOCHS is below 5)
  local m=$1 n=${2:-}
  # a transducer spells words itself (no lexicon, no TLG): characters are its tokens
  if is_transducer "$m"; then
    log asrkit model tokens data/fbank/train data/lang/chars.txt --unit char || return
  fi
  log_mpi asrkit train "conf/$m.toml" --out "exp/$m" ${n:+--set "train.epochs=$n"} \
    ${resume:+--resume} || return
  if averaged "$m"; then
    average_last "exp/$m" "$n"
  fi
}

averaged() { grep -q '^keep_checkpoints' "conf/$1.toml"; }  # averaged NAME: see train_model

model_file() {  # model_file NAME: the CTC model to decode: the average, or the BLSTM's final.mdl
  if averaged "$1"; then echo "exp/$1/avg.mdl"; else echo "exp/$1/final.mdl"; fi
}

stage_train() {
  model_configs "$model" || return
  if is_transducer "$model"; then
    echo "run.sh: --model $model is a transducer; exp/final is a CTC model (blstm, conformer_ctc):" \
      "compare a transducer with --models" >&2
    return 1
  fi
  train_model "$model" "$epochs"
}

stage_graph() {
  log asrkit graph build --tokens data/lang/tokens.txt --lexicon data/lang/lexicon.txt \
    --lm data/lang/G.arpa --out exp/graph_tg
  log asrkit graph build --tokens data/lang/tokens.txt --lexicon data/lang/lexicon.txt \
    --grammar data/lang/grammar.jsgf --out exp/graph_grammar
}

decode_graphs() {  # decode_graphs MODEL OUT: with each graph, the acoustic scale (the LM weight's
  # inverse) and the word insertion penalty tuned on dev, as Kaldi's scoring tunes both; then
  # the tests with them
  local graph ac errors best fewest
  for graph in tg grammar; do
    best=; fewest=
    for ac in $acoustic_scales; do
      decode_tuned "exp/graph_$graph" "$1" data/fbank/dev "$2/tune_dev_$graph/ac$ac" \
        -- --acoustic-scale "$ac" || return
      errors=$(awk '/^%WER/ { print $4; exit }' "$2/tune_dev_$graph/ac$ac/wer.txt")
      if [ -z "$fewest" ] || [ "$errors" -lt "$fewest" ]; then fewest=$errors; best=$ac; fi
    done
    decode_tuned "exp/graph_$graph" "$1" data/fbank/dev "$2/decode_dev_$graph" \
      data/fbank/test "$2/decode_test_$graph" \
      data/fbank/test_clean "$2/decode_test_clean_$graph" -- --acoustic-scale "$best" || return
    echo "$best" > "$2/decode_dev_$graph/best_acoustic_scale"
  done
}

stage_decode() {
  decode_graphs "$(model_file "$model")" "exp/$model"
}

stage_models() {
  [ -n "$models" ] || { echo "no --models: only the --model ($model) is trained"; return 0; }
  local m part
  model_configs $models || return
  for m in $models; do
    # the --model is stage 3's and 5's
    [ "$m" != "$model" ] || { echo "--models $m: trained by stage 3"; continue; }
    train_model "$m" "$model_epochs" || return
    if is_transducer "$m"; then
      package_tuned_bonus "exp/$m/avg.mdl" conf/fbank.toml "exp/$m/final" data/dev \
        "exp/$m/decode_dev_tg" --lm data/lang/G.arpa || return
      for part in test test_clean; do
        transcribe_data "exp/$m/final" "data/$part" "exp/$m/decode_${part}_tg" \
          --lm data/lang/G.arpa || return
      done
    else
      decode_graphs "$(model_file "$m")" "exp/$m" || return
    fi
  done
}

stage_final() {
  log asrkit package --model "$(model_file "$model")" --graph exp/graph_tg \
    --features conf/fbank.toml \
    --word-insertion-penalty="$(cat "exp/$model/decode_dev_tg/best_wip")" \
    --acoustic-scale "$(cat "exp/$model/decode_dev_tg/best_acoustic_scale")" --out exp/final
  # WER on the unheard voices: all of them, and one row per voice (eSpeak NG's variants as one)
  local m g seen= systems=()
  for m in $model $models; do
    [[ " $seen " != *" $m "* ]] || continue  # --models may name the --model again
    seen+=" $m"
    for g in tg grammar; do
      [ -d "exp/$m/decode_test_$g" ] || continue
      systems+=(--system "$m ${g/tg/3-gram}=exp/$m/decode_{set}_$g")
    done
  done
  mkdir -p exp/tables
  utt2voice data/test > exp/tables/test.utt2voice  # test_clean has the same utterances
  log "$python" ../digits/local/wer_table.py exp/tables/test.tsv --set test=data/test \
    --set test_clean=data/test_clean "${systems[@]}" --top-errors "$model 3-gram" || return
  log "$python" ../digits/local/wer_table.py exp/tables/test_voices.tsv --set test=data/test \
    --set test_clean=data/test_clean "${systems[@]}" --group-file exp/tables/test.utt2voice \
    || return
  log asrkit report "exp/$model" --title "sentences: $model over phones (exp/final)" \
    --table "Voices never heard in training=exp/tables/test.tsv" \
    --table "Per voice=exp/tables/test_voices.tsv" --commands exp/commands.txt \
    --config "conf/$model.toml" --config conf/fbank.toml --out "exp/$model/report.html"
}

run_stages data features lang train graph decode models final

for t in exp/tables/test.tsv exp/tables/test_voices.tsv; do
  [ -f "$t" ] && { echo "== $t"; column -t -s $'\t' "$t"; }
done
exit 0
