#!/usr/bin/env bash
# `workbench perf` next to NVIDIA's perf_analyzer on the same server, model and data, in one sitting:
#   PY=/path/to/python bash bench/perf_vs_perf_analyzer.sh
# Starts `workbench serve` (explicit mode, $MODEL only) and, for each concurrency in $CONC, runs perf_analyzer
# (HTTP, 3 windows of $INTERVAL ms merged: -s 999 -r 3, as bench/run.sh, so a busy machine cannot fail it) and then `workbench perf` (HTTP, one window of
# 3 x $INTERVAL after a warm-up of $INTERVAL, so both report ~3 windows of data), interleaved. Both send zeros.
# Prints a markdown table; raw CSVs and logs go to bench/results/raw/perf-vs-pa-<timestamp>/.
# Env: PY (default .venv/bin/python), PORT=8010, MODEL=digits_mlp, CONC="1 4 16", INTERVAL=3000 (ms),
#      PERF_ANALYZER (default /tmp/bench_bin/perf_analyzer).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python} PA=${PERF_ANALYZER:-/tmp/bench_bin/perf_analyzer}
PORT=${PORT:-8010} MODEL=${MODEL:-digits_mlp} CONC=${CONC:-1 4 16} INTERVAL=${INTERVAL:-3000}
OUT=bench/results/raw/perf-vs-pa-$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
[[ -x "$PA" ]] || { echo "perf_analyzer not found at $PA (bash ../shared/bench/setup.sh)" >&2; exit 1; }

"$PY" -m workbench.hosts.cli serve --model-repository=sample_models/repository --model-control-mode=explicit \
  --load-model="$MODEL" --http-port="$PORT" --grpc-port=0 --metrics-port=0 >"$OUT/server.log" 2>&1 &
SPID=$!
trap 'kill -TERM $SPID 2>/dev/null; wait $SPID 2>/dev/null' EXIT
for _ in $(seq 120); do curl -sf "localhost:$PORT/v2/health/ready" >/dev/null && break; sleep 0.5; done

echo "| tool | conc | infer/s | p50 us | p99 us | avg us | server queue us | server compute infer us |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
row() {  # tool csv: one data row of a perf_analyzer-format CSV (verbose: Avg latency column)
  "$PY" - "$1" "$2" <<'EOF'
import csv, sys
tool, path = sys.argv[1], sys.argv[2]
for r in csv.DictReader(open(path)):
    print(f"| {tool} | {r['Concurrency']} | {float(r['Inferences/Second']):.0f} | {r['p50 latency']} | "
          f"{r['p99 latency']} | {r['Avg latency']} | {r['Server Queue']} | {r['Server Compute Infer']} |")
EOF
}
for c in $CONC; do
  "$PA" -m "$MODEL" -u "localhost:$PORT" -i http -b 1 --input-data zero --concurrency-range "$c" \
    -p "$INTERVAL" -s 999 -r 3 -f "$OUT/pa-c$c.csv" --verbose-csv >"$OUT/pa-c$c.log" 2>&1 || { echo "perf_analyzer failed" >&2; exit 1; }
  row perf_analyzer "$OUT/pa-c$c.csv"
  "$PY" -m workbench.hosts.cli perf -m "$MODEL" -u "localhost:$PORT" -i http -b 1 --input-data zero \
    --concurrency-range "$c" -p $((3 * INTERVAL)) --warmup-interval "$INTERVAL" -f "$OUT/wb-c$c.csv" \
    --verbose-csv >"$OUT/wb-c$c.log" 2>&1 || { echo "workbench perf failed" >&2; exit 1; }
  row "workbench perf" "$OUT/wb-c$c.csv"
done
