#!/usr/bin/env bash
# Spoken sentences over a ~500-word vocabulary, end to end: synthetic corpus -> features ->
# CMUdict phone lexicon + 3-gram LM -> BLSTM-CTC over phones -> TLG -> decode -> WER.
#
#   recipes/sentences/run.sh [--stage N] [--stop-stage M] [--train-speakers N] [--dev-speakers N]
#                            [--test-speakers N] [--utts-per-speaker N] [--test-utts-per-speaker N]
#                            [--lm-sentences N] [--epochs N] [--jobs N] [--nj N] [--no-prepare]
#
# Stages (each logged to exp/log/stage<N>.log; rerun from any stage with --stage N):
#   0 data      grammar sentences spoken by eSpeak NG/flite/festival/Piper voices (split by
#               voice), perturbed, simulated channels; a disjoint LM text (local/make_corpus.py)
#   1 features  40-dim fbank + per-speaker CMVN stats (asrkit compute-features), validated
#   2 lang      phone tokens + CMUdict lexicon (local/prepare_lang.py), 3-gram LM on the LM text
#               (asrkit lm train), phone-level training transcripts with the pronunciations
#               eSpeak NG spoke (local/phone_transcripts.py)
#   3 train     BLSTM-CTC over phones (asrkit train conf/train.toml; mpiexec -n NJ when NJ > 1)
#   4 graph     TLG with the 3-gram LM, and with the sentence grammar itself (asrkit graph build)
#   5 decode    Viterbi beam search on the test set with both graphs (asrkit decode), scored
#   6 final     exp/final/: a self-contained model directory for asrkit transcribe; report.html
set -euo pipefail
cd "$(dirname "$0")"

stage=0
stop_stage=100
train_speakers=200
dev_speakers=10
test_speakers=40
utts_per_speaker=30
test_utts_per_speaker=10
lm_sentences=50000
epochs=15
jobs=2   # feature extraction processes
nj=1     # training ranks (MPI data parallelism)
prepare=1  # install the voices first (../utils/prepare_recipe.sh); --no-prepare skips it

while [ $# -gt 0 ]; do
  case "$1" in
    --stage) stage=$2; shift 2 ;;
    --stop-stage) stop_stage=$2; shift 2 ;;
    --train-speakers) train_speakers=$2; shift 2 ;;
    --dev-speakers) dev_speakers=$2; shift 2 ;;
    --test-speakers) test_speakers=$2; shift 2 ;;
    --utts-per-speaker) utts_per_speaker=$2; shift 2 ;;
    --test-utts-per-speaker) test_utts_per_speaker=$2; shift 2 ;;
    --lm-sentences) lm_sentences=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --nj) nj=$2; shift 2 ;;
    --no-prepare) prepare=; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

command -v asrkit >/dev/null || { echo "run.sh: 'asrkit' is not on PATH (activate the venv)" >&2; exit 1; }
bindir=$(dirname "$(command -v asrkit)")
python=$bindir/python
[ -x "$python" ] || python=python3
mkdir -p exp/log
echo "# $(date -u +%FT%TZ) $0 $*" >> exp/commands.txt

source ../utils/stages.sh  # run_stage, log

stage_data() {
  # (run_stage calls this in an `if`, where set -e is off: each step checks its own status)
  if [ -n "$prepare" ]; then log bash ../utils/prepare_recipe.sh || return; fi
  log "$python" local/make_corpus.py data --train-speakers "$train_speakers" \
    --dev-speakers "$dev_speakers" --test-speakers "$test_speakers" \
    --utts-per-speaker "$utts_per_speaker" --test-utts-per-speaker "$test_utts_per_speaker" \
    --lm-sentences "$lm_sentences" --jobs "$jobs"
}

stage_features() {
  for part in train dev test; do
    log asrkit compute-features "data/$part" --config conf/fbank.toml --out "data/fbank/$part" \
      --jobs "$jobs"
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

stage_train() {
  if [ "$nj" -gt 1 ]; then
    log "$bindir/mpiexec" -n "$nj" asrkit train conf/train.toml --out exp/blstm \
      --set "train.epochs=$epochs"
  else
    log asrkit train conf/train.toml --out exp/blstm --set "train.epochs=$epochs"
  fi
}

stage_graph() {
  log asrkit graph build --tokens data/lang/tokens.txt --lexicon data/lang/lexicon.txt \
    --lm data/lang/G.arpa --out exp/graph_tg
  log asrkit graph build --tokens data/lang/tokens.txt --lexicon data/lang/lexicon.txt \
    --grammar data/lang/grammar.jsgf --out exp/graph_grammar
}

stage_decode() {
  for graph in tg grammar; do
    log asrkit decode --graph "exp/graph_$graph" --model exp/blstm/final.mdl data/fbank/test \
      --out "exp/blstm/decode_test_$graph"
    log asrkit score --report "exp/blstm/decode_test_$graph/wer_details.txt" \
      data/test/text "exp/blstm/decode_test_$graph/hyp.txt"
  done
}

stage_final() {
  log asrkit model package --model exp/blstm/final.mdl --graph exp/graph_tg \
    --features conf/fbank.toml --out exp/final
  log asrkit report exp/blstm --title "sentences: BLSTM-CTC over phones" \
    --out exp/blstm/report.html
}

run_stage 0 data stage_data
run_stage 1 features stage_features
run_stage 2 lang stage_lang
run_stage 3 train stage_train
run_stage 4 graph stage_graph
run_stage 5 decode stage_decode
run_stage 6 final stage_final

for graph in tg grammar; do
  f=exp/blstm/decode_test_$graph/hyp.txt
  [ -f "$f" ] && echo "test ($graph): $(asrkit score --summary-only data/test/text "$f")"
done
exit 0
