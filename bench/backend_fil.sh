#!/usr/bin/env bash
# The fil backend (issue 22): cancer_xgboost through the real perf_analyzer at concurrency 1 and 16, HTTP
# (binary tensors) and gRPC, next to the peer "xgboost's own inplace_predict on one row in a loop".
#
#   flock /tmp/bench.lock bash bench/backend_fil.sh [OUT_DIR]
#
# `workbench serve` on sample_models/repository with only cancer_xgboost loaded (explicit mode; its config:
# max_batch_size 64, dynamic_batching {}, one KIND_CPU instance, cpu_nthread 1). perf_analyzer: -b 1, input
# rows = the 143 held-out breast-cancer rows (--input-data), 3 time windows of 3 s per point (-s 999, as
# /work/shared/bench/pa_sweep.sh), p50/p99 from its CSV. Takes ~1.5 min. Env: PYTHON (default: the
# checkout's .venv, else /work/main/.venv), PERF_ANALYZER (default /tmp/bench_bin/perf_analyzer).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
[[ -x $PY ]] || PY=/work/main/.venv/bin/python
PA=${PERF_ANALYZER:-/tmp/bench_bin/perf_analyzer}
OUT=${1:-/tmp/bench_work/results/fil-$(date +%Y%m%d-%H%M%S)}
MODEL=cancer_xgboost
mkdir -p "$OUT"
echo "== backend_fil $(date -u '+%F %T') UTC; $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg); out $OUT"

PYTHONPATH=$ROOT "$PY" - "$OUT/$MODEL.json" <<'EOF'
import json, sys
sys.path.insert(0, "sample_models")
from build_cancer_trees import load_split
x_test = load_split()[1]
rows = [{"input__0": {"content": [float(v) for v in row], "shape": [30]}} for row in x_test]
json.dump({"data": rows}, open(sys.argv[1], "w"))
EOF

PORTS=$("$PY" -c 'import socket
s=[socket.socket() for _ in range(3)]
[x.bind(("127.0.0.1",0)) for x in s]
print(" ".join(str(x.getsockname()[1]) for x in s))')
read -r HTTP GRPC METRICS <<<"$PORTS"
cd "$ROOT"
PYTHONPATH=$ROOT "$PY" -m workbench.hosts.cli serve --model-repository=sample_models/repository \
    --model-control-mode=explicit --load-model=$MODEL --http-address=127.0.0.1 \
    --http-port="$HTTP" --grpc-port="$GRPC" --metrics-port="$METRICS" >"$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null' EXIT
for _ in $(seq 1 120); do
  curl -sf "http://127.0.0.1:$HTTP/v2/models/$MODEL/ready" >/dev/null && break
  sleep 0.5
done
curl -sf "http://127.0.0.1:$HTTP/v2/models/$MODEL/ready" >/dev/null || { tail -20 "$OUT/server.log"; exit 1; }

run() {  # proto url conc
  local base="$OUT/${MODEL}__$1__c$3" fmt=""
  [[ $1 == http ]] && fmt="--input-tensor-format=binary --output-tensor-format=binary"
  # shellcheck disable=SC2086
  timeout 120 "$PA" -m $MODEL -u "$2" -i "$1" $fmt -b 1 --input-data "$OUT/$MODEL.json" --percentile 99 \
      --measurement-mode time_windows -s 999 -r 3 -p 3000 --concurrency-range "$3" -f "$base.csv" \
      --verbose-csv >"$base.log" 2>&1
  "$PY" - "$base.csv" "$1" "$3" <<'EOF'
import csv, sys
row = list(csv.DictReader(open(sys.argv[1])))[-1]
print(f"{sys.argv[2]:5} c={sys.argv[3]:>2}: {float(row['Inferences/Second']):8.1f} infer/s  "
      f"p50 {int(row['p50 latency']) / 1000:6.2f} ms  p99 {int(row['p99 latency']) / 1000:6.2f} ms")
EOF
}

timeout 60 "$PA" -m $MODEL -u "127.0.0.1:$HTTP" -b 1 --input-data "$OUT/$MODEL.json" --concurrency-range 16 \
    -p 1000 -s 999 -r 2 --measurement-mode time_windows >"$OUT/warmup.log" 2>&1 || true  # not recorded
for c in 1 16; do run http "127.0.0.1:$HTTP" "$c"; done
for c in 1 16; do run grpc "127.0.0.1:$GRPC" "$c"; done
echo "-- executions / inferences (the dynamic batcher's joins at c=16):"
curl -s "http://127.0.0.1:$HTTP/v2/models/$MODEL/stats" | "$PY" -c 'import json,sys
s=json.load(sys.stdin)["model_stats"][0]; print("  ", s["execution_count"], "executions for", s["inference_count"], "inferences")'

echo "-- peer: xgboost inplace_predict of one row in a loop (the backend's predictor, no server):"
PYTHONPATH=$ROOT "$PY" - <<'EOF'
import sys, time
import numpy as np
sys.path.insert(0, "sample_models")
from build_cancer_trees import load_split
from workbench.backends.fil import fil_output
from workbench.backends.fil_options import FilOptions
from workbench.backends.fil_predictors import load_predictor
x = load_split()[1]
predictor = load_predictor("cancer_xgboost", "xgboost_json", __import__("pathlib").Path("sample_models/repository/cancer_xgboost/1/xgboost.json"), 1)
options = FilOptions("xgboost_json", True, True, cpu_nthread=1)
for what, f in (("inplace_predict", lambda r: predictor.predict(r)),
                ("inplace_predict + FIL output", lambda r: fil_output(predictor.predict(r), options, 2))):
    for rows in (1, 16):
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < 2.0:
            f(x[(n * rows) % 128 : (n * rows) % 128 + rows]); n += 1
        per = (time.perf_counter() - start) / n
        print(f"   {what}, {rows:>2} rows/call: {per * 1e6:7.1f} us/call = {rows / per:9.0f} rows/s")
EOF
echo "== done $(date -u '+%T') UTC"
