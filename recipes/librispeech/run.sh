#!/usr/bin/env bash
# LibriSpeech, end to end: download -> Kaldi data dirs -> 80-dim fbank -> sentencepiece units ->
# 3-gram LM -> BLSTM-CTC (MPI data-parallel) -> TLG -> decode -> 4-gram n-best rescoring -> WER.
#
#   recipes/librispeech/run.sh [--stage N] [--stop-stage M] [--corpus-dir DIR]
#       [--train-set train-clean-100] [--cv-set dev-clean] [--test-sets "test-clean ..."]
#       [--bpe-size 500] [--download-lm true|false] [--rescore-lm ARPA] [--epochs N]
#       [--jobs N] [--nj N] [--train-opts "--set learner.lr=0.0005 ..."]
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
#   5 train     BLSTM-CTC (asrkit train conf/train.toml; mpiexec -n NJ when NJ > 1)
#   6 graph     TLG with the 3-gram (asrkit graph build)
#   7 decode    CV and test sets (asrkit decode), scored (asrkit score)
#   8 rescore   n-best rescoring with a bigger LM (SLR11's 4-gram when downloaded, or
#               --rescore-lm): asrkit nnlm rescore on the decoder's n-best lists, whose
#               acoustic and graph costs are kept apart, scored; skipped if none
#   9 final     exp/final/: a self-contained model directory for asrkit transcribe; report.html
set -euo pipefail
cd "$(dirname "$0")"

stage=0
stop_stage=100
corpus_dir=download            # gets LibriSpeech/ (and lm/ with --download-lm true)
train_set=train-clean-100
cv_set=dev-clean
test_sets="test-clean"
bpe_size=500
download_lm=true
epochs=30
jobs=4                         # feature extraction processes
nj=1                           # training ranks (MPI data parallelism)
train_opts=""
rescore_lm=""                  # default: SLR11's 4-gram.arpa.gz under --corpus-dir when present

while [ $# -gt 0 ]; do
  case "$1" in
    --stage) stage=$2; shift 2 ;;
    --stop-stage) stop_stage=$2; shift 2 ;;
    --corpus-dir) corpus_dir=$2; shift 2 ;;
    --train-set) train_set=$2; shift 2 ;;
    --cv-set) cv_set=$2; shift 2 ;;
    --test-sets) test_sets=$2; shift 2 ;;
    --bpe-size) bpe_size=$2; shift 2 ;;
    --download-lm) download_lm=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --nj) nj=$2; shift 2 ;;
    --train-opts) train_opts=$2; shift 2 ;;
    --rescore-lm) rescore_lm=$2; shift 2 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

command -v asrkit >/dev/null || { echo "run.sh: 'asrkit' is not on PATH (activate the venv)" >&2; exit 1; }
bindir=$(dirname "$(command -v asrkit)")
python=$bindir/python
[ -x "$python" ] || python=python3
mkdir -p exp/log
echo "# $(date -u +%FT%TZ) $0 $*" >> exp/commands.txt

name() { echo "${1//-/_}"; }  # train-clean-100 -> train_clean_100 (Kaldi data dir names)
train=$(name "$train_set")
cv=$(name "$cv_set")
lang=data/lang_bpe
vocab_file=$corpus_dir/lm/librispeech-vocab.txt
slr11_3gram=$corpus_dir/lm/3-gram.pruned.1e-7.arpa.gz
[ -n "$rescore_lm" ] || rescore_lm=$corpus_dir/lm/4-gram.arpa.gz

source ../utils/stages.sh  # run_stage, log

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
      --jobs "$jobs"
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
  local cmd=(asrkit train conf/train.toml --data "data/fbank/${train}_bpe"
             --cv-data "data/fbank/${cv}_bpe" --tokens "$lang/tokens.txt" --out exp/blstm_bpe
             --set "train.epochs=$epochs" $train_opts)
  if [ "$nj" -gt 1 ]; then
    log "$bindir/mpiexec" -n "$nj" "${cmd[@]}"
  else
    log "${cmd[@]}"
  fi
}

stage_graph() {
  log asrkit graph build --tokens "$lang/tokens.txt" --lexicon "$lang/lexicon.txt" \
    --lm "$(lm_3gram)" --no-text --out exp/graph_bpe_tg
}

stage_decode() {
  for part in $cv_set $test_sets; do
    local d
    d=$(name "$part")
    log asrkit decode --graph exp/graph_bpe_tg --model exp/blstm_bpe/final.mdl "data/fbank/$d" \
      --out "exp/blstm_bpe/decode_${d}_tg"
    log asrkit score --report "exp/blstm_bpe/decode_${d}_tg/wer_details.txt" \
      "data/$d/text" "exp/blstm_bpe/decode_${d}_tg/hyp.txt"
  done
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
  log asrkit model package --model exp/blstm_bpe/final.mdl --graph exp/graph_bpe_tg \
    --features conf/fbank.toml --out exp/final
  log asrkit report exp/blstm_bpe --title "LibriSpeech $train_set: BLSTM-CTC, $bpe_size pieces" \
    --out exp/blstm_bpe/report.html
}

run_stage 0 download stage_download
run_stage 1 prep stage_prep
run_stage 2 features stage_features
run_stage 3 bpe stage_bpe
run_stage 4 lm stage_lm
run_stage 5 train stage_train
run_stage 6 graph stage_graph
run_stage 7 decode stage_decode
run_stage 8 rescore stage_rescore
run_stage 9 final stage_final

for part in $cv_set $test_sets; do
  d=$(name "$part")
  for lm in tg fg; do
    f=exp/blstm_bpe/decode_${d}_$lm/hyp.txt
    [ -f "$f" ] && echo "$part ($lm): $(asrkit score --summary-only "data/$d/text" "$f")"
  done
done
exit 0
