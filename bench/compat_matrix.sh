#!/usr/bin/env bash
# perf_analyzer compatibility matrix (issue 4): every sample model x every client mode, zero errors required.
#   bash bench/compat_matrix.sh            # or: make compat-perf-analyzer
# Starts `workbench serve --allow-client-shm=true` on the sample repository (HTTP $PORT, gRPC $GRPC_PORT), then runs
# perf_analyzer once per (model, mode) with short windows. A point passes when perf_analyzer exits 0, writes a CSV
# row and prints no error line. Prints a markdown table and writes it to bench/results/compat-<timestamp>.md (raw
# logs in bench/results/compat-<timestamp>/). Exit status: the number of failed points (0 = all clean).
# Modes: http (sync, default), grpc, grpc --streaming, http/grpc --shared-memory system, --request-rate-range,
#        --async, --sync. A decoupled model (token_streamer) runs in the streaming mode only: Triton serves
#        decoupled models over gRPC streaming alone, and perf_analyzer refuses them otherwise.
# Env: PORT=8000, GRPC_PORT=8001, INTERVAL=1000 (ms per window), SEQ_LEN=32, MODES / MODELS (subsets),
#      PERF_ANALYZER (default /tmp/bench_bin/perf_analyzer), SHARED_BENCH (its setup.sh provides perf_analyzer).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SHARED_BENCH=${SHARED_BENCH:-$ROOT/../shared/bench}
PA=${PERF_ANALYZER:-${BENCH_BIN:-/tmp/bench_bin}/perf_analyzer}
PORT=${PORT:-8000} GRPC_PORT=${GRPC_PORT:-8001} INTERVAL=${INTERVAL:-1000} SEQ_LEN=${SEQ_LEN:-32}
MODELS=${MODELS:-digits_mlp digits_torchscript minilm_encoder accumulator tokenizer text_classifier postprocessor digits_router text_embedder ensemble_pipeline token_streamer}
MODES=${MODES:-http grpc grpc-streaming http-shm grpc-shm request-rate async sync}
REPO=sample_models/repository
STAMP=$(date +%Y%m%d-%H%M%S)
OUT=bench/results/compat-$STAMP
log() { echo "[compat $(date +%H:%M:%S)] $*" >&2; }
die() { log "ERROR: $*"; exit 100; }

for p in "$PORT" "$GRPC_PORT"; do
  (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && die "port $p is already in use (set PORT / GRPC_PORT)"
done
if [[ ! -x "$PA" ]]; then
  [[ -f "$SHARED_BENCH/setup.sh" ]] || die "perf_analyzer missing and no $SHARED_BENCH/setup.sh (set SHARED_BENCH)"
  bash "$SHARED_BENCH/setup.sh" >&2 || die "setup.sh failed"
fi
[[ -x .venv/bin/workbench && -f $REPO/.built ]] || { make setup >&2 || die "make setup failed"; }
mkdir -p "$OUT"
.venv/bin/python bench/make_inputs.py "$OUT" --seq-len "$SEQ_LEN" || die "writing input data failed"

.venv/bin/workbench serve --model-repository "$REPO" --http-port "$PORT" --grpc-port "$GRPC_PORT" \
  --metrics-port 0 --allow-client-shm=true >"$OUT/server.log" 2>&1 &
SPID=$!
stop_server() { [[ -n "${SPID:-}" ]] && kill -TERM "$SPID" 2>/dev/null && wait "$SPID" 2>/dev/null; SPID=""; }
trap stop_server EXIT
trap 'exit 130' INT TERM
for m in $MODELS; do
  for _ in $(seq 240); do
    [[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/v2/models/$m/ready")" == 200 ]] && break
    kill -0 "$SPID" 2>/dev/null || { tail -20 "$OUT/server.log" >&2; die "server exited"; }
    sleep 0.5
  done
done
log "server ready (pid $SPID), results in $OUT"

model_args() {  # per-model flags: input data and fixed shapes (shared memory needs fixed sizes)
  case $1 in
    minilm_encoder) echo "--input-data $OUT/minilm_encoder.json --shape input_ids:$SEQ_LEN --shape attention_mask:$SEQ_LEN --shape token_type_ids:$SEQ_LEN --output-shared-memory-size 200000";;
    digits_mlp) echo "--input-data $OUT/digits_mlp.json";;
    digits_torchscript) echo "--input-data $OUT/digits_torchscript.json";;  # the same rows, as INPUT__0
    accumulator) echo "--sequence-length 4";;  # a sequence model: perf_analyzer sends correlation IDs itself
    text_classifier) echo "--input-data $OUT/minilm_encoder.json --shape input_ids:$SEQ_LEN --shape attention_mask:$SEQ_LEN --shape token_type_ids:$SEQ_LEN";;
    digits_router) echo "--input-data $OUT/digits_mlp.json";;
    tokenizer|text_embedder|token_streamer) echo "--input-data $ROOT/bench/data/sentences.json --output-shared-memory-size 65536";;
    ensemble_pipeline) echo "--input-data $ROOT/bench/data/raw_text.json";;
  esac
}
modes_of() {  # the modes a model runs in
  if [[ $1 == token_streamer ]]; then
    [[ " $MODES " == *" grpc-streaming "* ]] && echo grpc-streaming
  else
    echo "$MODES"
  fi
}
mode_args() {
  case $1 in
    http) echo "-i http -u localhost:$PORT --concurrency-range 4";;
    grpc) echo "-i grpc -u localhost:$GRPC_PORT --concurrency-range 4";;
    grpc-streaming) echo "-i grpc --streaming -u localhost:$GRPC_PORT --concurrency-range 4";;
    http-shm) echo "-i http -u localhost:$PORT --shared-memory system --concurrency-range 2";;
    grpc-shm) echo "-i grpc -u localhost:$GRPC_PORT --shared-memory system --concurrency-range 2";;
    request-rate) echo "-i grpc -u localhost:$GRPC_PORT --request-rate-range 20";;
    async) echo "-i http -u localhost:$PORT --async --concurrency-range 4";;
    sync) echo "-i grpc -u localhost:$GRPC_PORT --sync --concurrency-range 2";;
  esac
}

FAILS=0 ROWS=()
for model in $MODELS; do
  for mode in $(modes_of "$model"); do
    base="$OUT/${model}__$mode"
    # shellcheck disable=SC2207
    cmd=("$PA" -m "$model" $(mode_args "$mode") $(model_args "$model") -b 1 --measurement-mode time_windows
         -p "$INTERVAL" -s 999 -r 3 --percentile 99 -f "$base.csv")
    echo "${cmd[*]}" >"$base.cmd"
    timeout 120 "${cmd[@]}" >"$base.log" 2>&1
    rc=$?
    errs=$(grep -iE 'error|fail|abort' "$base.log" | head -2)
    if ((rc != 0)) || [[ -n "$errs" ]] || [[ $(wc -l <"$base.csv" 2>/dev/null || echo 0) -lt 2 ]]; then
      FAILS=$((FAILS + 1)); result="**FAILED** (rc=$rc) ${errs//$'\n'/ / }"
    else
      result="ok, $(tail -1 "$base.csv" | cut -d, -f2) infer/s"
    fi
    log "$model $mode: $result"
    flags="$(mode_args "$mode") $(model_args "$model")"
    flags=${flags//$OUT/OUT}
    ROWS+=("| $model | $mode | \`${flags//$ROOT\//}\` | $result |")
  done
done

{
  echo "## perf_analyzer compatibility matrix — $(date -Is), $(nproc) cores"
  echo
  echo "| model | mode | perf_analyzer flags (besides \`-m model -b 1 --measurement-mode time_windows -p $INTERVAL -s 999 -r 3\`) | result |"
  echo "|---|---|---|---|"
  printf '%s\n' "${ROWS[@]}"
  echo
  echo "Failed points: $FAILS. Raw logs: \`$OUT/\`."
} | tee "bench/results/compat-$STAMP.md"
exit "$FAILS"
