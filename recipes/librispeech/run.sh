#!/usr/bin/env bash
# LibriSpeech, end to end: download -> Kaldi data dirs -> 80-dim fbank -> sentencepiece units ->
# 3-gram LM -> BLSTM-CTC (MPI data-parallel) -> TLG -> decode -> 4-gram n-best rescoring -> WER.
#
#   recipes/librispeech/run.sh [--stage N] [--stop-stage M] [--corpus-dir DIR]
#       [--train-set train-clean-100] [--cv-set dev-clean] [--test-sets "test-clean ..."]
#       [--bpe-size 500] [--download-lm true|false] [--rescore-lm ARPA] [--epochs N]
#       [--nj N] [--mpi N] [--train-opts "--set learner.lr=0.0005 ..."]
#
# Stages (each logged to exp/log/stage<N>.log; rerun from any stage with --stage N):
#   0 download  LibriSpeech parts from OpenSLR SLR12 (resumable, MD5-checked) and, with
#               --download-lm true, SLR11's vocabulary and 3-gram/4-gram ARPA LMs
#   1 prep      Kaldi data dirs data/<part> (local/prepare_data.py), validated
#   2 features  80-dim fbank + per-speaker CMVN stats (asrkit compute-features), validated
#   3 bpe       sentencepiece units on the training transcripts, tokens.txt (<blk> 0), lexicon
#               (local/prepare_bpe.py); piece-level transcripts for training (piece_transcripts.py)
#   4 lm        SLR11's pruned 3-gram when downloaded, else a 3-gram on the training
#               transcripts (asrkit lm train); perplexity on the CV set (asrkit lm ppl)
#   5 train     BLSTM-CTC (asrkit train conf/train.toml; on --mpi N ranks under mpiexec)
#   6 graph     TLG with the 3-gram (asrkit graph build)
#   7 decode    the CV set with the word insertion penalty tuned on it (asrkit decode
#               --tune-wip), then the test sets with that penalty, scored
#   8 rescore   n-best rescoring with a bigger LM (SLR11's 4-gram when downloaded, or
#               --rescore-lm): asrkit nnlm rescore on the decoder's n-best lists, whose
#               acoustic and graph costs are kept apart, scored; skipped if none
#   9 final     exp/final/: a self-contained model directory for asrkit transcribe; report.html
#
# --nj N: jobs for features and decoding; --mpi N: training ranks (recipes/utils/setup.sh)
set -euo pipefail
cd "$(dirname "$0")"

corpus_dir=download            # gets LibriSpeech/ (and lm/ with --download-lm true)
train_set=train-clean-100
cv_set=dev-clean
test_sets="test-clean"
bpe_size=500
download_lm=true
epochs=30
nj=4                           # jobs for features and decoding (--mpi N: training ranks)
train_opts=""
rescore_lm=""                  # default: SLR11's 4-gram.arpa.gz under --corpus-dir when present

. ../utils/setup.sh "$@"  # options, $python, run_stages, log, log_mpi, decode_tuned

name() { echo "${1//-/_}"; }  # train-clean-100 -> train_clean_100 (Kaldi data dir names)
train=$(name "$train_set")
cv=$(name "$cv_set")
lang=data/lang_bpe
vocab_file=$corpus_dir/lm/librispeech-vocab.txt
slr11_3gram=$corpus_dir/lm/3-gram.pruned.1e-7.arpa.gz
[ -n "$rescore_lm" ] || rescore_lm=$corpus_dir/lm/4-gram.arpa.gz

all_parts() { echo "$train_set $cv_set $test_sets"; }

stage_download() {
  local lm_opt=()
  [ "$download_lm" = true ] && lm_opt=(--lm)
  # shellcheck disable=SC2046
  log "$python" local/download.py "$corpus_dir" --parts $(all_parts) "${lm_opt[@]}"
}

stage_prep() {
  for part in $(all_parts); do
    log "$python" local/prepare_data.py "$corpus_dir/LibriSpeech" "$part" "data/$(name "$part")"
    log asrkit data validate --no-feats "data/$(name "$part")"
  done
}

stage_features() {
  for part in $(all_parts); do
    local d
    d=$(name "$part")
    log asrkit compute-features "data/$d" --config conf/fbank.toml --out "data/fbank/$d" \
      --jobs "$nj"
    log asrkit data validate "data/fbank/$d"
  done
}

stage_bpe() {
  local extra=()
  [ -f "$vocab_file" ] && extra=(--extra-words "$vocab_file")
  log "$python" local/prepare_bpe.py "data/$train/text" "$lang" --vocab-size "$bpe_size" \
    "${extra[@]}"
  for d in "$train" "$cv"; do
    log "$python" local/piece_transcripts.py "$lang/bpe.model" "data/fbank/$d" \
      "data/fbank/${d}_bpe"
  done
}

lm_3gram() {  # the 3-gram the graph uses: SLR11's when downloaded, else ours
  if [ -f "$lang/G_3gram.arpa.gz" ]; then
    echo "$lang/G_3gram.arpa.gz"
  else
    echo "$lang/G_3gram.arpa"
  fi
}

stage_lm() {
  mkdir -p data/local
  cut -d' ' -f2- "data/$cv/text" > "data/local/${cv}_sentences.txt"
  if [ -f "$slr11_3gram" ]; then
    log ln -sfn "$(cd "$(dirname "$slr11_3gram")" && pwd)/$(basename "$slr11_3gram")" \
      "$lang/G_3gram.arpa.gz"
  else
    rm -f "$lang/G_3gram.arpa.gz"
    cut -d' ' -f2- "data/$train/text" > data/local/lm_text.txt
    log asrkit lm train --order 3 --text data/local/lm_text.txt --output "$lang/G_3gram.arpa"
  fi
  log asrkit lm ppl --lm "$(lm_3gram)" --text "data/local/${cv}_sentences.txt"
}

stage_train() {
  # shellcheck disable=SC2086
  log_mpi asrkit train conf/train.toml --data "data/fbank/${train}_bpe" \
    --cv-data "data/fbank/${cv}_bpe" --tokens "$lang/tokens.txt" --out exp/blstm_bpe \
    --set "train.epochs=$epochs" $train_opts
}

stage_graph() {
  log asrkit graph build --tokens "$lang/tokens.txt" --lexicon "$lang/lexicon.txt" \
    --lm "$(lm_3gram)" --no-text --out exp/graph_bpe_tg
}

stage_decode() {
  local part d sets=()
  for part in $test_sets; do
    d=$(name "$part")
    sets+=("data/fbank/$d" "exp/blstm_bpe/decode_${d}_tg")
  done
  decode_tuned exp/graph_bpe_tg exp/blstm_bpe/final.mdl "data/fbank/$cv" \
    "exp/blstm_bpe/decode_${cv}_tg" "${sets[@]}"
}

stage_rescore() {
  if [ ! -f "$rescore_lm" ]; then
    echo "no rescoring LM ($rescore_lm); nothing to do"
    return 0
  fi
  for part in $cv_set $test_sets; do
    local d dec out
    d=$(name "$part")
    dec=exp/blstm_bpe/decode_${d}_tg
    out=exp/blstm_bpe/decode_${d}_fg
    mkdir -p "$out"
    # nbest.txt lines are 'utt-N ac_cost graph_cost words': the 4-gram replaces the graph cost
    log asrkit nnlm rescore --nbest "$dec/nbest.txt" --lm "$rescore_lm" --nn-weight 1 \
      --output "$out/nbest.txt" --best-text "$out/hyp.txt"
    log asrkit score --report "$out/wer_details.txt" "data/$d/text" "$out/hyp.txt"
  done
}

stage_final() {
  log asrkit package --model exp/blstm_bpe/final.mdl --graph exp/graph_bpe_tg \
    --features conf/fbank.toml --out exp/final \
    --word-insertion-penalty="$(cat "exp/blstm_bpe/decode_${cv}_tg/best_wip")"
  log asrkit report exp/blstm_bpe --title "LibriSpeech $train_set: BLSTM-CTC, $bpe_size pieces" \
    --out exp/blstm_bpe/report.html
}

run_stages download prep features bpe lm train graph decode rescore final

for part in $cv_set $test_sets; do
  d=$(name "$part")
  for lm in tg/wer.txt fg/wer_details.txt; do  # asrkit decode's report, stage 8's
    f=exp/blstm_bpe/decode_${d}_$lm
    [ -f "$f" ] && echo "$part (${lm%/*}): $(grep '^%WER' "$f")"
  done
done
exit 0
