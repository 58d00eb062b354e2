#!/usr/bin/env bash
# Benchmark our server on the sample models with NVIDIA's perf_analyzer (HTTP only), as `make bench` runs it:
#   bash bench/run.sh
# Starts `workbench serve` on the sample repository, sweeps perf_analyzer over digits_mlp (binary + JSON
# tensors), minilm_encoder (binary) and the text_embedder ensemble (Python tokenizer -> minilm_encoder) on real
# sentences next to minilm_encoder fed the same sentences pre-tokenised, at concurrency $CONC, fails on any
# perf_analyzer error, prints a
# markdown table and writes it to bench/results/<timestamp>.md (raw CSV/logs next to it in <timestamp>/).
# Env: PORT=8000, CONC="1 4 16", INTERVAL=3000 (ms per window), WINDOWS=3, SEQ_LEN=32 (minilm tokens),
#      SHARED_BENCH (default ../shared/bench beside the checkout; its setup.sh provides perf_analyzer),
#      PERF_ANALYZER (default /tmp/bench_bin/perf_analyzer).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SHARED_BENCH=${SHARED_BENCH:-$ROOT/../shared/bench}
PA=${PERF_ANALYZER:-${BENCH_BIN:-/tmp/bench_bin}/perf_analyzer}
PORT=${PORT:-8000} CONC=${CONC:-1 4 16} INTERVAL=${INTERVAL:-3000} WINDOWS=${WINDOWS:-3} SEQ_LEN=${SEQ_LEN:-32}
REPO=sample_models/repository
STAMP=$(date +%Y%m%d-%H%M%S)
OUT=bench/results/$STAMP
log() { echo "[bench $(date +%H:%M:%S)] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# (a) perf_analyzer, (b) the sample repository
(exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && die "port $PORT is already in use (set PORT=...)"
if [[ ! -x "$PA" ]]; then
  [[ -f "$SHARED_BENCH/setup.sh" ]] || die "perf_analyzer missing and no $SHARED_BENCH/setup.sh (set SHARED_BENCH)"
  log "perf_analyzer missing: running $SHARED_BENCH/setup.sh"
  bash "$SHARED_BENCH/setup.sh" >&2 || die "setup.sh failed"
fi
[[ -x .venv/bin/workbench && -f $REPO/.built ]] || { log "building venv/sample models (make setup)"; make setup >&2 || die "make setup failed"; }
mkdir -p "$OUT"
.venv/bin/python bench/make_inputs.py "$OUT" --seq-len "$SEQ_LEN" || die "writing input data failed"
cp bench/data/sentences.json "$OUT/"  # text_embedder's real sentences (workbench.testing.sentences)

# (c) the server
.venv/bin/workbench serve --model-repository "$REPO" --http-port "$PORT" >"$OUT/server.log" 2>&1 &
SPID=$!
stop_server() { [[ -n "${SPID:-}" ]] && kill -TERM "$SPID" 2>/dev/null && wait "$SPID" 2>/dev/null; SPID=""; }
trap stop_server EXIT
trap 'exit 130' INT TERM
for m in digits_mlp minilm_encoder text_embedder; do
  for _ in $(seq 240); do
    [[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/v2/models/$m/ready")" == 200 ]] && break
    kill -0 "$SPID" 2>/dev/null || { tail -20 "$OUT/server.log" >&2; die "server exited"; }
    sleep 0.5
  done
  [[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/v2/models/$m/ready")" == 200 ]] \
    || die "$m not ready after 120 s (log: $OUT/server.log)"
done
log "server ready (pid $SPID), results in $OUT"

# (d) the sweep: model | tensor format | input data file (in $OUT) | extra perf_analyzer flags
SHAPES="--shape input_ids:$SEQ_LEN --shape attention_mask:$SEQ_LEN --shape token_type_ids:$SEQ_LEN"
POINTS=("digits_mlp|binary|digits_mlp|" "digits_mlp|json|digits_mlp|--input-tensor-format=json --output-tensor-format=json"
        "minilm_encoder|binary|minilm_encoder|$SHAPES" "text_embedder|sentences|sentences|"
        "minilm_encoder|sentences|minilm_sentences|")
FAILS=0
for point in "${POINTS[@]}"; do
  IFS='|' read -r model fmt data extra <<<"$point"
  for c in $CONC; do
    base="$OUT/${model}__${fmt}__c$c"
    # shellcheck disable=SC2206
    cmd=("$PA" -m "$model" -u "localhost:$PORT" -i http $extra -b 1 --input-data "$OUT/$data.json"
         --percentile 99 --measurement-mode time_windows -p "$INTERVAL" -s 999 -r "$WINDOWS"
         --concurrency-range "$c" -f "$base.csv" --verbose-csv -v)
    echo "${cmd[*]}" >"$base.cmd"
    timeout 180 "${cmd[@]}" >"$base.log" 2>&1
    rc=$?
    # (e) zero errors: exit status 0, a CSV row, and no error line in the output
    errs=$(grep -iE 'error|fail|abort' "$base.log" | head -3)
    if ((rc != 0)) || [[ -n "$errs" ]] || [[ $(wc -l <"$base.csv" 2>/dev/null || echo 0) -lt 2 ]]; then
      FAILS=$((FAILS + 1)); log "$model $fmt c=$c: FAILED (rc=$rc) ${errs//$'\n'/ | } (see $base.log)"
    else
      log "$model $fmt c=$c: $(tail -1 "$base.csv" | cut -d, -f2) infer/s"
    fi
  done
done

# (f) the table (stdout + bench/results/<timestamp>.md)
{
  echo "## workbench on the sample models — $(date -Is), $(nproc) cores, perf_analyzer $("$PA" --version 2>&1 | sed -n 's/.*Version \([0-9.]*\).*/\1/p')"
  echo
  echo "HTTP, batch 1 per request, $WINDOWS windows x $INTERVAL ms per point, p99 percentile; latencies client-side;"
  echo "queue/compute = server-side means from the statistics extension. minilm_encoder binary: real sentences padded to $SEQ_LEN tokens;"
  echo "text_embedder / minilm_encoder sentences: the 17 sentences of workbench.testing.sentences (one truncated at 256 tokens), as text / pre-tokenised at their own length."
  echo
  .venv/bin/python bench/table.py "$OUT"/*__c*.cmd
  ((FAILS)) && echo && echo "**$FAILS perf_analyzer run(s) FAILED** — see $OUT/*.log"
} | tee "bench/results/$STAMP.md"
stop_server
((FAILS == 0)) || die "$FAILS perf_analyzer run(s) failed"
log "done: bench/results/$STAMP.md"
